-- What an order owes (seckill.Order.Amount, Currency): its voucher's price
-- and currency, copied from the voucher's row by the statement that writes
-- the order. The orders written before are given theirs now: those of the
-- vouchers made with a price or a currency since 0012 (every older voucher
-- is free, in the default currency '', as the columns' defaults say).
--
-- refused_payment_events keeps the payment provider's events that were
-- refused, their amount or currency not the order's (or not said), by
-- event id: the order was not paid by them, and the operator settles them
-- with the provider. refused_payment_events_at serves the list, newest
-- first. Times in microseconds, as in 0001.

ALTER TABLE orders ADD COLUMN amount INTEGER NOT NULL DEFAULT 0;

ALTER TABLE orders ADD COLUMN currency TEXT NOT NULL DEFAULT '' CHECK (length(currency) <= 3);

UPDATE orders SET
    amount = (SELECT v.price FROM vouchers v WHERE v.id = orders.voucher_id),
    currency = (SELECT v.currency FROM vouchers v WHERE v.id = orders.voucher_id)
WHERE voucher_id IN (SELECT id FROM vouchers WHERE price <> 0 OR currency <> '');

CREATE TABLE refused_payment_events (
    event_id          TEXT    PRIMARY KEY CHECK (length(event_id) <= 255),
    order_id          INTEGER NOT NULL,
    payment_ref       TEXT    NOT NULL DEFAULT '' CHECK (length(payment_ref) <= 255),
    expected_amount   INTEGER NOT NULL,
    expected_currency TEXT    NOT NULL CHECK (length(expected_currency) <= 3),
    received_amount   INTEGER,
    received_currency TEXT    NOT NULL DEFAULT '' CHECK (length(received_currency) <= 16),
    reason            TEXT    NOT NULL CHECK (length(reason) <= 32),
    refused_at        INTEGER NOT NULL
) STRICT;

CREATE INDEX refused_payment_events_at ON refused_payment_events (refused_at);
