-- A voucher's challenge: whether a buy must carry a solved
-- proof-of-work challenge (seckill.Voucher.Challenge), and how many seconds
-- before the sale begins challenges are issued
-- (seckill.Voucher.ChallengeLead). false and 0 for vouchers made before:
-- buys without a challenge, as they always were.

ALTER TABLE vouchers
    ADD COLUMN challenge              BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN challenge_lead_seconds INTEGER NOT NULL DEFAULT 0;
