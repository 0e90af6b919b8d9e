-- payment_started_at is when the buyer started paying the order with a
-- provider that confirms later (pay answered 202), if before its payBy:
-- such an order is held for the payment grace after its payBy
-- (--payment-grace) before the sweeper may cancel it, so that a
-- confirmation arriving late still pays it. NULL for orders whose payment
-- was never started, and for every order made before. The first start is
-- kept. orders_voucher_status still serves the sweeper's range; the column
-- is read from the rows it finds.

ALTER TABLE orders ADD COLUMN payment_started_at TIMESTAMPTZ;
