package mysql

import "github.com/seckill/seckill/sqlstore"

// The statements of the refund requests ([sqlstore.Store] ClaimRefunds and
// after) that are MySQL's: the locking reads of a claim, and the hints that keep
// reads on orders_refund_due.
const (
	// selectDueRefundsSQL locks up to a limit of the refund requests due at
	// a time, skipping those another transaction holds.
	selectDueRefundsSQL = `SELECT id FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)
ORDER BY refund_next_at LIMIT ?
FOR UPDATE SKIP LOCKED`
	// selectDueRefundSQL locks one order's refund request if it is due. It
	// waits for the lock rather than skipping it: the order's payment asks
	// for its refund at once, and a short transaction holding the row (the
	// cancellation it came after, a sweep reading past it) must not put
	// that off to the next pass of a loop; a claim that held it first has
	// moved its next attempt, and this one then finds it not due.
	selectDueRefundSQL = `SELECT id FROM orders
WHERE id = ? AND status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)
FOR UPDATE`
	countRefundsWaitingSQL = `SELECT COUNT(*), MIN(paid_at) FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding'`
	selectRefundsWaitingSQL = `SELECT ` + sqlstore.RefundColumns + ` FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding'
ORDER BY paid_at, id LIMIT ?`
)
