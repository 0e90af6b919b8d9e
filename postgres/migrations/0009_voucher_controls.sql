-- The operator's controls of a voucher on sale (docs/design/controls.md, Operator
-- controls). paused: admission answers 409 paused and admits nobody while
-- it is set (false for vouchers made before). voucher_stock_additions
-- records each addition of stock under its Idempotency-Key, inserted in
-- the transaction that grows the voucher's stock and initial_stock: the
-- primary key (voucher_id, idem_key) makes a second addition with the same
-- key add nothing.

ALTER TABLE vouchers ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false;

CREATE TABLE voucher_stock_additions (
    voucher_id BIGINT       NOT NULL REFERENCES vouchers (id),
    idem_key   VARCHAR(100) NOT NULL,
    units      BIGINT       NOT NULL,
    added_at   TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (voucher_id, idem_key)
);
