-- A voucher's payment rule: how many seconds after an order is
-- created its buyer has to pay (seckill.Voucher.PayWithin), and whether a
-- buyer whose order was cancelled may buy it again
-- (seckill.Voucher.RebuyAfterCancel, 0 or 1). 0 and 0 for vouchers made
-- before: orders with no deadline, as they always were.
--
-- SQLite adds one column a statement; the migration's transaction keeps
-- them together.

ALTER TABLE vouchers ADD COLUMN pay_within_seconds INTEGER NOT NULL DEFAULT 0;

ALTER TABLE vouchers ADD COLUMN rebuy_after_cancel INTEGER NOT NULL DEFAULT 0;
