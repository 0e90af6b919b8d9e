-- The refund request of a payment that came after its order was cancelled
-- (a refunding order), asked of the provider until it accepts (docs/design/lifecycle.md,
-- Refunds). refund_next_at is when it is asked for next: NULL once the
-- provider accepted it (refund_requested_at says when), or for an order
-- never refunding. refund_attempts counts the requests sent, refund_error
-- says why the last one failed.
--
-- orders_refund_due serves the refund loop (status = 'refunding' AND
-- refund_next_at <= ? ORDER BY refund_next_at) and the count of those
-- waiting (refund_next_at IS NOT NULL).
--
-- The orders refunding before this migration are due now: whether their
-- refund was asked for is not known, and asking again refunds once (the
-- provider's idempotency key).
--
-- IF NOT EXISTS: MySQL commits each DDL statement on its own, so that after
-- a failure of the UPDATE the migration can run again whole.

ALTER TABLE orders
    ADD COLUMN IF NOT EXISTS refund_next_at      DATETIME(6)  NULL,
    ADD COLUMN IF NOT EXISTS refund_attempts     INT          NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS refund_requested_at DATETIME(6)  NULL,
    ADD COLUMN IF NOT EXISTS refund_error        VARCHAR(500) NOT NULL DEFAULT '',
    ADD KEY IF NOT EXISTS orders_refund_due (status, refund_next_at);

UPDATE orders SET refund_next_at = paid_at WHERE status = 'refunding' AND refund_requested_at IS NULL;
