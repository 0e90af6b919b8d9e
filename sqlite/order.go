package sqlite

// orderColumns are an order's columns, of orders o; scanOrder reads them.
// The voucher's pay_within_seconds, for the pay-by deadline, is a subquery
// rather than a join, so that each read keeps the plan it had without it:
// a probe of vouchers' primary key per order returned.
const orderColumns = `o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL,
(SELECT v.pay_within_seconds FROM vouchers v WHERE v.id = o.voucher_id), o.payment_started_at, o.amount, o.currency`

const (
	// selectVoucherOrdersSQL reads a page of a voucher's orders as a range
	// of orders_voucher_id, which ends with the rowid (id): just the page,
	// wherever it is. With statistics (ANALYZE, PRAGMA optimize) SQLite may
	// walk the primary key instead, filtering out other vouchers' orders:
	// the first page of a sale then reads every order of the sales before
	// it. INDEXED BY rules that out, and fails the statement if the index
	// is gone.
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders AS o INDEXED BY orders_voucher_id
WHERE o.voucher_id = ? AND o.id > ? ORDER BY o.id LIMIT ?`
)
