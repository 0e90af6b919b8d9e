-- An order's life after admission: paid, cancelled (by its
-- buyer or its pay-by deadline), and refunding/refunded when a payment
-- came after the cancellation. paid_at and cancelled_at say when; payment_ref
-- is the payment provider's reference; returned_at is when the unit of a
-- cancelled order was marked back on sale in the cache (the database's
-- stock takes it back with the cancellation). NULL and '' for orders made
-- before: created orders, as they always were. Times in microseconds, as
-- in 0001.
--
-- written_at is when the order was written (admitted, in the sync mode),
-- or its created_at if later: created_at is the admission, which in the
-- stream and queue modes may be long before a worker writes the order, and
-- an order can be paid only once it is written, so its pay-by deadline
-- counts from written_at. NULL for rows from before, as in the other
-- stores: their vouchers have no deadline (only the API after 0007 sets
-- one), and the sweeper never takes them.
--
-- slot keeps the buyer's (user_id, voucher_id) pair: 1 for every order but
-- a cancelled one of a voucher with rebuy_after_cancel, whose slot is NULL
-- (set by the UPDATE that cancels it). NULLs are distinct in a UNIQUE, so
-- such an order frees the pair for the buyer's next order, and any other
-- order keeps it.
--
-- SQLite cannot change a table's CHECK or UNIQUE: orders is made again
-- under a new name, filled from the old one, which is dropped, and renamed,
-- all in the migration's one transaction. Nothing references orders, so
-- the foreign keys need no pause; its indexes go with the old table and are
-- made again (orders_voucher_id by its name: VoucherOrders asks for it).
--
-- orders_voucher_status serves the sweeper (voucher_id = ? AND status =
-- 'created' AND returned_at IS NULL AND written_at < ? ORDER BY
-- written_at), the cancelled orders whose unit is not yet back in the cache
-- (status IN (…) AND returned_at IS NULL), and the counts by status.
--
-- payment_events keeps the ids of the payment provider's events acted on,
-- so that a replayed event is seen as one.

CREATE TABLE orders_0007 (
    id           INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL,
    voucher_id   INTEGER NOT NULL REFERENCES vouchers (id),
    status       TEXT    NOT NULL CHECK (status IN ('created', 'paid', 'cancelled', 'refunding', 'refunded')),
    reason       TEXT    NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    created_at   INTEGER NOT NULL,
    paid_at      INTEGER,
    cancelled_at INTEGER,
    payment_ref  TEXT    NOT NULL DEFAULT '' CHECK (length(payment_ref) <= 255),
    returned_at  INTEGER,
    written_at   INTEGER,
    slot         INTEGER DEFAULT 1,
    UNIQUE (user_id, voucher_id, slot)
) STRICT;

INSERT INTO orders_0007 (id, user_id, voucher_id, status, reason, created_at)
SELECT id, user_id, voucher_id, status, reason, created_at FROM orders;

DROP TABLE orders;

ALTER TABLE orders_0007 RENAME TO orders;

CREATE INDEX orders_voucher_id ON orders (voucher_id);

CREATE INDEX orders_voucher_status ON orders (voucher_id, status, returned_at, written_at);

CREATE TABLE payment_events (
    event_id    TEXT    PRIMARY KEY CHECK (length(event_id) <= 255),
    order_id    INTEGER NOT NULL,
    received_at INTEGER NOT NULL
) STRICT;
