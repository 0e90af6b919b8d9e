package sqlite

import "github.com/seckill/seckill/sqlstore"

// The statements of the refund requests ([sqlstore.Store] ClaimRefunds and
// after) that are SQLite's: a claim's transaction holds the one write
// lock, so two claims take turns, the second finding the first's moved;
// INDEXED BY keeps reads on orders_refund_due.
const (
	selectDueRefundsSQL = `SELECT id FROM orders INDEXED BY orders_refund_due
WHERE status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)
ORDER BY refund_next_at LIMIT ?`
	selectDueRefundSQL = `SELECT id FROM orders
WHERE id = ? AND status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)`
	countRefundsWaitingSQL = `SELECT count(*), min(paid_at) FROM orders INDEXED BY orders_refund_due
WHERE status = 'refunding'`
	selectRefundsWaitingSQL = `SELECT ` + sqlstore.RefundColumns + ` FROM orders INDEXED BY orders_refund_due
WHERE status = 'refunding'
ORDER BY paid_at, id LIMIT ?`
)
