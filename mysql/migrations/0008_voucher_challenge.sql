-- A voucher's challenge: whether a buy must carry a solved
-- proof-of-work challenge (seckill.Voucher.Challenge), and how many seconds
-- before the sale begins challenges are issued
-- (seckill.Voucher.ChallengeLead). false and 0 for vouchers made before:
-- buys without a challenge, as they always were.
--
-- One statement: MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has), and
-- each statement commits on its own, so two would leave half a migration
-- when the second fails.

ALTER TABLE vouchers
    ADD COLUMN challenge              TINYINT(1) NOT NULL DEFAULT 0,
    ADD COLUMN challenge_lead_seconds INT        NOT NULL DEFAULT 0;
