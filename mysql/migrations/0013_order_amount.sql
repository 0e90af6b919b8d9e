-- What an order owes (seckill.Order.Amount, Currency): its voucher's price
-- and currency, copied from the voucher's row by the transaction that
-- writes the order. The orders written before are given theirs now: those of the
-- vouchers made with a price or a currency since 0012 (every older voucher
-- is free, in the default currency '', as the columns' defaults say).
--
-- refused_payment_events keeps the payment provider's events that were
-- refused, their amount or currency not the order's (or not said), by
-- event id: the order was not paid by them, and the operator settles them
-- with the provider. refused_payment_events_at serves the list, newest
-- first.
--
-- IF NOT EXISTS on the table and the columns (as 0011): MySQL commits each
-- DDL statement on its own, so that after a failure of the UPDATE (a lock
-- wait on a live orders table) the migration can run again whole. The
-- UPDATE finds no row to change when run again.

CREATE TABLE IF NOT EXISTS refused_payment_events (
    event_id          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    order_id          BIGINT       NOT NULL,
    payment_ref       VARCHAR(255) NOT NULL DEFAULT '',
    expected_amount   BIGINT       NOT NULL,
    expected_currency CHAR(3)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    received_amount   BIGINT       NULL,
    received_currency VARCHAR(16)  NOT NULL DEFAULT '',
    reason            VARCHAR(32)  NOT NULL,
    refused_at        DATETIME(6)  NOT NULL,
    PRIMARY KEY (event_id),
    KEY refused_payment_events_at (refused_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

ALTER TABLE orders
    ADD COLUMN IF NOT EXISTS amount   BIGINT  NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '';

UPDATE orders o JOIN vouchers v ON v.id = o.voucher_id
SET o.amount = v.price, o.currency = v.currency
WHERE (v.price <> 0 OR v.currency <> '') AND o.currency = '' AND o.amount = 0;
