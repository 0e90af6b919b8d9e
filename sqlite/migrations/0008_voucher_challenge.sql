-- A voucher's challenge: whether a buy must carry a solved
-- proof-of-work challenge (seckill.Voucher.Challenge, 0 or 1), and how many
-- seconds before the sale begins challenges are issued
-- (seckill.Voucher.ChallengeLead). 0 and 0 for vouchers made before: buys
-- without a challenge, as they always were.
--
-- SQLite adds one column a statement; the migration's transaction keeps
-- them together.

ALTER TABLE vouchers ADD COLUMN challenge INTEGER NOT NULL DEFAULT 0;

ALTER TABLE vouchers ADD COLUMN challenge_lead_seconds INTEGER NOT NULL DEFAULT 0;
