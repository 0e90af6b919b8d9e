-- The operator's controls of a voucher on sale (docs/design/controls.md, Operator
-- controls). paused: admission answers 409 paused and admits nobody while
-- it is set (false for vouchers made before). voucher_stock_additions
-- records each addition of stock under its Idempotency-Key, inserted in
-- the transaction that grows the voucher's stock and initial_stock: the
-- primary key (voucher_id, idem_key) makes a second addition with the same
-- key add nothing. The keys compare exactly (utf8mb4_bin), as HTTP's do.
--
-- Two statements: MySQL commits each DDL statement on its own. The table
-- comes first, IF NOT EXISTS, so that after a failure of the ALTER the
-- migration can run again whole.

CREATE TABLE IF NOT EXISTS voucher_stock_additions (
    voucher_id BIGINT       NOT NULL,
    idem_key   VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    units      BIGINT       NOT NULL,
    added_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (voucher_id, idem_key),
    CONSTRAINT voucher_stock_additions_voucher FOREIGN KEY (voucher_id) REFERENCES vouchers (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

ALTER TABLE vouchers
    ADD COLUMN paused TINYINT(1) NOT NULL DEFAULT 0;
