-- The operator's controls of a voucher on sale (docs/design/controls.md, Operator
-- controls). paused (0 or 1): admission answers 409 paused and admits
-- nobody while it is 1 (0 for vouchers made before).
-- voucher_stock_additions records each addition of stock under its
-- Idempotency-Key, inserted in the transaction that grows the voucher's
-- stock and initial_stock: the primary key (voucher_id, idem_key) makes a
-- second addition with the same key add nothing.

ALTER TABLE vouchers ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;

CREATE TABLE voucher_stock_additions (
    voucher_id INTEGER NOT NULL REFERENCES vouchers (id),
    idem_key   TEXT    NOT NULL,
    units      INTEGER NOT NULL,
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (voucher_id, idem_key)
) STRICT;
