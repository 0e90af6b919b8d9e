package sqlite

import "github.com/seckill/seckill/internal/retry"

// selectClashingOrdersSQL finds the stored orders that share an id or hold
// a (user, voucher) pair (slot not NULL: a cancelled order of a rebuy
// voucher has let its pair go) with a batch; %[1]s is one '?' per order
// and %[2]s one '(?, ?)' per order. SaveOrders' writers are serialized by
// SQLite's write lock, taken as the transaction begins, so the orders
// found stored are all there are: no voucher is locked first.
const selectClashingOrdersSQL = `SELECT id, user_id, voucher_id, slot IS NOT NULL FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT id, user_id, voucher_id, 1 FROM orders WHERE (user_id, voucher_id) IN (VALUES %[2]s) AND slot IS NOT NULL`

// saveRetry is when SaveOrders runs its transaction again, at once: when
// orders it did not find stored got in the way of its inserts, up to 3
// times.
var saveRetry = retry.Policy{Attempts: 3, Retryable: isUniqueViolation}
