-- A voucher's payment rule: how many seconds after an order is
-- created its buyer has to pay (seckill.Voucher.PayWithin), and whether a
-- buyer whose order was cancelled may buy it again
-- (seckill.Voucher.RebuyAfterCancel). 0 and false for vouchers made before:
-- orders with no deadline, as they always were.

ALTER TABLE vouchers
    ADD COLUMN pay_within_seconds INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN rebuy_after_cancel BOOLEAN NOT NULL DEFAULT false;
