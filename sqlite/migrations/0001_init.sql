-- Times are INTEGER microseconds since the Unix epoch, in UTC: SQLite has no
-- time type, and integers compare and index as times should.
-- STRICT tables refuse values of the wrong type instead of storing them.

-- AUTOINCREMENT: an id is never reused, even after the newest row is
-- deleted; Redis keys and tokens name users and vouchers by id.
CREATE TABLE users (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    phone      TEXT    NOT NULL UNIQUE CHECK (length(phone) <= 32),
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE vouchers (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL CHECK (length(title) <= 200),
    stock         INTEGER NOT NULL CHECK (stock >= 0),
    initial_stock INTEGER NOT NULL CHECK (initial_stock >= 0),
    begin_time    INTEGER NOT NULL,
    end_time      INTEGER NOT NULL,
    created_at    INTEGER NOT NULL
) STRICT;

CREATE INDEX vouchers_end_time ON vouchers (end_time);

-- Order ids come from the service. The primary key and the unique
-- (user_id, voucher_id) make saving an order twice impossible (G2, G4).
CREATE TABLE orders (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL,
    voucher_id INTEGER NOT NULL REFERENCES vouchers (id),
    status     TEXT    NOT NULL CHECK (status IN ('created', 'failed')),
    reason     TEXT    NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    created_at INTEGER NOT NULL,
    UNIQUE (user_id, voucher_id)
) STRICT;

CREATE INDEX orders_voucher_id ON orders (voucher_id);
