package sqlite

// insertFailedOrderSQL records a failed order unless its id is in either
// table; the conflict names the primary key, so that any other violation
// still fails. (The WHERE is what lets SQLite parse an upsert after a
// SELECT.) One statement, under the write lock: atomic.
const insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6
WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = ?1)
ON CONFLICT (id) DO NOTHING`
