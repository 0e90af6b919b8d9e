-- MySQL runs each DDL statement in a transaction of its own, so a migration
-- that fails half-way leaves the statements before the failure applied.
-- IF NOT EXISTS lets this one run again after such a failure.
--
-- InnoDB: transactions, row locks, foreign keys. utf8mb4: four-byte
-- characters (emoji) in titles. Times are DATETIME(6), written in UTC by
-- the store; the column keeps no zone.

CREATE TABLE IF NOT EXISTS users (
    id         BIGINT      NOT NULL AUTO_INCREMENT,
    -- Binary collation: phone numbers match exactly.
    phone      VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_at DATETIME(6) NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY users_phone (phone)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS vouchers (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    title         VARCHAR(200) NOT NULL,
    stock         BIGINT       NOT NULL,
    initial_stock BIGINT       NOT NULL,
    begin_time    DATETIME(6)  NOT NULL,
    end_time      DATETIME(6)  NOT NULL,
    created_at    DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY vouchers_end_time (end_time),
    CONSTRAINT vouchers_stock_check CHECK (stock >= 0),
    CONSTRAINT vouchers_initial_stock_check CHECK (initial_stock >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Order ids come from the service. The primary key and the unique
-- (user_id, voucher_id) make saving an order twice impossible (G2, G4).
CREATE TABLE IF NOT EXISTS orders (
    id         BIGINT       NOT NULL,
    user_id    BIGINT       NOT NULL,
    voucher_id BIGINT       NOT NULL,
    status     VARCHAR(16)  NOT NULL,
    reason     VARCHAR(500) NOT NULL DEFAULT '',
    created_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY orders_user_voucher (user_id, voucher_id),
    KEY orders_voucher_id (voucher_id),
    CONSTRAINT orders_voucher_fk FOREIGN KEY (voucher_id) REFERENCES vouchers (id),
    CONSTRAINT orders_status_check CHECK (status IN ('created', 'failed'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
