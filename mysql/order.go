package mysql

// orderColumns are an order's columns, of orders o joined to its voucher v
// (fromOrders) for the pay-by deadline; scanOrder reads them.
const (
	orderColumns = `o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, v.pay_within_seconds, o.payment_started_at, o.amount, o.currency`
	fromOrders = ` FROM orders o JOIN vouchers v ON v.id = o.voucher_id`
)

const (
	// selectVoucherOrdersSQL reads a page of a voucher's orders as a
	// range of orders_voucher_id, which InnoDB ends with the primary key:
	// one index entry read per order returned. Without the hint MariaDB
	// 10.11 prefers a lookup of voucher_id alone, and reads every order of
	// the voucher below afterID to skip it (measured: 136,000 index
	// entries for a page of 1,000 at 200,000 orders).
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders o FORCE INDEX (orders_voucher_id)
JOIN vouchers v ON v.id = o.voucher_id
WHERE o.voucher_id = ? AND o.id > ? ORDER BY o.id LIMIT ?`
)
