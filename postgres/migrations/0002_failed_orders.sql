-- Failed orders: admitted, then given up on (dead-lettered), their stock
-- and the buyer's slot given back in Redis. They live apart from orders, so
-- that they hold neither the buyer's UNIQUE (user_id, voucher_id) slot (the
-- buyer may buy again) nor stock: orders holds created orders only.
-- created_at is the order's admission time, failed_at when it failed.

CREATE TABLE failed_orders (
    id         BIGINT       PRIMARY KEY,
    user_id    BIGINT       NOT NULL,
    voucher_id BIGINT       NOT NULL REFERENCES vouchers (id),
    reason     VARCHAR(500) NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL,
    failed_at  TIMESTAMPTZ  NOT NULL
);

CREATE INDEX failed_orders_user_id_idx ON failed_orders (user_id);
CREATE INDEX failed_orders_voucher_id_idx ON failed_orders (voucher_id);

-- VoucherOrders pages a voucher's orders by id. On (voucher_id) alone the
-- planner reads a page either through the primary key, filtering out every
-- other voucher's orders, or by sorting all of the voucher's orders: both
-- grow with the table. (voucher_id, id) reads just the page, and serves
-- everything the index it replaces did.
CREATE INDEX orders_voucher_id_id_idx ON orders (voucher_id, id);
DROP INDEX orders_voucher_id_idx;
