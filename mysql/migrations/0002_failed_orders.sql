-- Failed orders: admitted, then given up on (dead-lettered), their stock
-- and the buyer's slot given back in Redis. They live apart from orders, so
-- that they hold neither the buyer's UNIQUE (user_id, voucher_id) slot (the
-- buyer may buy again) nor stock: orders holds created orders only.
-- created_at is the order's admission time, failed_at when it failed.
-- IF NOT EXISTS: see 0001.
--
-- VoucherOrders pages orders by (voucher_id, id): InnoDB's orders_voucher_id
-- already ends with the primary key, so orders needs no new index.

CREATE TABLE IF NOT EXISTS failed_orders (
    id         BIGINT       NOT NULL,
    user_id    BIGINT       NOT NULL,
    voucher_id BIGINT       NOT NULL,
    reason     VARCHAR(500) NOT NULL,
    created_at DATETIME(6)  NOT NULL,
    failed_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY failed_orders_user_id (user_id),
    KEY failed_orders_voucher_id (voucher_id),
    CONSTRAINT failed_orders_voucher_fk FOREIGN KEY (voucher_id) REFERENCES vouchers (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
