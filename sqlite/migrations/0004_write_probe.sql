-- One row that Store.Writable writes and commits when a worker must tell a
-- database that refuses writes from orders that fail: a write rolled back
-- would not meet a refusal that comes at commit (docs/design/persistence.md, What
-- counts as a delivery).

CREATE TABLE write_probe (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at INTEGER NOT NULL
);
