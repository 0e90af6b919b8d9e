-- An order's life after admission: paid, cancelled (by its
-- buyer or its pay-by deadline), and refunding/refunded when a payment
-- came after the cancellation. paid_at and cancelled_at say when; payment_ref
-- is the payment provider's reference; returned_at is when the unit of a
-- cancelled order was marked back on sale in the cache (the database's
-- stock takes it back with the cancellation). NULL and '' for orders made
-- before: created orders, as they always were.
--
-- written_at is when the order was written (admitted, in the sync mode),
-- or its created_at if later: created_at is the admission, which in the
-- stream and queue modes may be long before a worker writes the order, and
-- an order can be paid only once it is written, so its pay-by deadline
-- counts from written_at. NULL for rows from before: their vouchers have no
-- deadline (only the API after 0007 sets one), and the sweeper never takes
-- them.
--
-- slot keeps the buyer's (user_id, voucher_id) pair: 1 for every order but
-- a cancelled one of a voucher with rebuy_after_cancel, whose slot is NULL
-- (set by the UPDATE that cancels it). NULLs are distinct in a unique
-- constraint, so such an order frees the pair for the buyer's next order,
-- and any other order keeps it.
--
-- orders_voucher_status_idx serves the sweeper (voucher_id = $1 AND status
-- = 'created' AND returned_at IS NULL AND written_at < $2 ORDER BY
-- written_at), the cancelled orders whose unit is not yet back in the cache
-- (status IN (…) AND returned_at IS NULL), and the counts by status.
--
-- payment_events keeps the ids of the payment provider's events acted on,
-- so that a replayed event is seen as one.

ALTER TABLE orders
    DROP CONSTRAINT orders_status_check,
    ADD CONSTRAINT orders_status_check CHECK (status IN ('created', 'paid', 'cancelled', 'refunding', 'refunded')),
    ADD COLUMN paid_at      TIMESTAMPTZ,
    ADD COLUMN cancelled_at TIMESTAMPTZ,
    ADD COLUMN payment_ref  VARCHAR(255) NOT NULL DEFAULT '',
    ADD COLUMN returned_at  TIMESTAMPTZ,
    ADD COLUMN written_at   TIMESTAMPTZ,
    ADD COLUMN slot         SMALLINT DEFAULT 1,
    DROP CONSTRAINT orders_user_voucher_key,
    ADD CONSTRAINT orders_user_voucher_slot_key UNIQUE (user_id, voucher_id, slot);

CREATE INDEX orders_voucher_status_idx ON orders (voucher_id, status, returned_at, written_at);

CREATE TABLE payment_events (
    event_id    VARCHAR(255) PRIMARY KEY,
    order_id    BIGINT       NOT NULL,
    received_at TIMESTAMPTZ  NOT NULL
);
