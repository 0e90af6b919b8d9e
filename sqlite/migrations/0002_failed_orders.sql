-- Failed orders: admitted, then given up on (dead-lettered), their stock
-- and the buyer's slot given back in Redis. They live apart from orders, so
-- that they hold neither the buyer's UNIQUE (user_id, voucher_id) slot (the
-- buyer may buy again) nor stock: orders holds created orders only.
-- created_at is the order's admission time, failed_at when it failed, both
-- in microseconds as in 0001.
--
-- VoucherOrders pages orders by (voucher_id, id): orders_voucher_id already
-- ends with the rowid, which id is, so orders needs no new index.

CREATE TABLE failed_orders (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL,
    voucher_id INTEGER NOT NULL REFERENCES vouchers (id),
    reason     TEXT    NOT NULL CHECK (length(reason) <= 500),
    created_at INTEGER NOT NULL,
    failed_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX failed_orders_user_id ON failed_orders (user_id);
CREATE INDEX failed_orders_voucher_id ON failed_orders (voucher_id);
