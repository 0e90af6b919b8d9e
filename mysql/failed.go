package mysql

// The statements of FailOrder.
const (
	// orderExistsSQL is a plain, non-locking read before the insert,
	// rather than the INSERT … SELECT it could be: that would lock the gap
	// of orders around the id (shared next-key locks, under REPEATABLE
	// READ) while the insert's foreign key check waits for the voucher row,
	// which SaveOrders holds while it inserts into that gap: a deadlock
	// (the conformance suite's FailOrder/RacingSaveOrders met one in every
	// run).
	orderExistsSQL = `SELECT EXISTS (SELECT 1 FROM orders WHERE id = ?)`
	// insertFailedOrderSQL is a plain INSERT, not INSERT IGNORE, which would
	// also hide a missing voucher; a duplicate id is told apart by its error.
	insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
VALUES (?, ?, ?, ?, ?, ?)`
)
