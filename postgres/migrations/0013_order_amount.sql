-- What an order owes (seckill.Order.Amount, Currency): its voucher's price
-- and currency, copied from the voucher's row by the statement that writes
-- the order. The orders written before are given theirs now: those of the
-- vouchers made with a price or a currency since 0012 (every older voucher
-- is free, in the default currency '', as the columns' defaults say).
--
-- refused_payment_events keeps the payment provider's events that were
-- refused, their amount or currency not the order's (or not said), by
-- event id: the order was not paid by them, and the operator settles them
-- with the provider. refused_payment_events_at_idx serves the list,
-- newest first.

ALTER TABLE orders
    ADD COLUMN amount   BIGINT     NOT NULL DEFAULT 0,
    ADD COLUMN currency VARCHAR(3) NOT NULL DEFAULT '';

UPDATE orders o SET amount = v.price, currency = v.currency
FROM vouchers v
WHERE v.id = o.voucher_id AND (v.price <> 0 OR v.currency <> '');

CREATE TABLE refused_payment_events (
    event_id          VARCHAR(255) PRIMARY KEY,
    order_id          BIGINT       NOT NULL,
    payment_ref       VARCHAR(255) NOT NULL DEFAULT '',
    expected_amount   BIGINT       NOT NULL,
    expected_currency VARCHAR(3)   NOT NULL,
    received_amount   BIGINT,
    received_currency VARCHAR(16)  NOT NULL DEFAULT '',
    reason            VARCHAR(32)  NOT NULL,
    refused_at        TIMESTAMPTZ  NOT NULL
);

CREATE INDEX refused_payment_events_at_idx ON refused_payment_events (refused_at);
