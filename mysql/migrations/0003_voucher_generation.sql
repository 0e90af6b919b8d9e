-- A voucher's generation tells its row apart from an earlier row that had
-- the same id (a database reset, or two databases sharing one Redis key
-- prefix): Redis keeps it with the voucher's state, and loading or
-- rebuilding the voucher replaces only state of another generation. 0 for
-- vouchers made before it existed.
--
-- One statement: MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has).

ALTER TABLE vouchers ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
