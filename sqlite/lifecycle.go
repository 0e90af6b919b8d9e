package sqlite

import "github.com/seckill/seckill/sqlstore"

// The statements of the order lifecycle ([sqlstore.Store] PayOrder and
// after) that are SQLite's. SQLite has one writer: a transaction takes the
// write lock as it begins, so a cancellation or a sweep reads and writes
// with no other writer in between, and nothing is locked row by row.
const (
	// selectDueSQL reads up to a limit of the voucher's created orders
	// written before a time, the earliest written first (written_at, not
	// created_at: an order is payable from when it is written, and its
	// deadline counts from then; a row from before written_at is never
	// due): a range of orders_voucher_status in its order. The voucher's pay_within_seconds is the first argument.
	// An order whose payment was started (payment_started_at) is due only
	// once written before the second time too: held for the payment grace.
	selectDueSQL = `SELECT o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, ?, o.payment_started_at, o.amount, o.currency
FROM orders AS o INDEXED BY orders_voucher_status
WHERE o.voucher_id = ? AND o.status = 'created' AND o.returned_at IS NULL AND o.written_at < ?
AND (o.payment_started_at IS NULL OR o.written_at < ?)
ORDER BY o.written_at LIMIT ?`
	// insertPaymentEventSQL names the primary key in its conflict, so that
	// any other violation still fails.
	insertPaymentEventSQL = `INSERT INTO payment_events (event_id, order_id, received_at) VALUES (?, ?, ?)
ON CONFLICT (event_id) DO NOTHING`
	// selectDeadlineVouchersSQL reads the vouchers with a deadline that
	// can still have due orders or unreturned units: those with a created
	// order, or a cancelled one whose unit is not marked back in the cache.
	// Each voucher is one probe of orders_voucher_status, which stops at
	// the first such order; a voucher whose orders are all settled (paid,
	// or cancelled and returned) is left out, however many it had. An
	// order written late makes its voucher come back.
	selectDeadlineVouchersSQL = `SELECT ` + sqlstore.VoucherColumns + ` FROM vouchers
WHERE pay_within_seconds > 0 AND EXISTS (SELECT 1 FROM orders o WHERE o.voucher_id = vouchers.id
    AND o.status IN ('created', 'cancelled', 'refunding', 'refunded') AND o.returned_at IS NULL)
ORDER BY id DESC`
	countLifecycleSQL = `SELECT status, returned_at IS NULL, count(*) FROM orders
WHERE voucher_id = ? GROUP BY status, returned_at IS NULL`
)
