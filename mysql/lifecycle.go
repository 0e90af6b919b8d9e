package mysql

import (
	"database/sql"

	"github.com/seckill/seckill/internal/retry"
	"github.com/seckill/seckill/sqlstore"
)

// The statements of the order lifecycle ([sqlstore.Store] PayOrder and
// after) that are MySQL's: the locking reads of a sweep, and the hints
// that keep reads on orders_voucher_status.
const (
	// selectDueSQL locks up to a limit of the voucher's created orders
	// written before a time, the earliest written first, skipping those
	// another transaction holds (written_at, not created_at: an order is
	// payable from when it is written, and its deadline counts from then;
	// a row from before written_at is never due): a range of
	// orders_voucher_status in its order, which locks
	// the orders it returns and no other (BenchmarkCancelDue: EXPLAIN
	// estimates the 1,000 due of a million). MariaDB 10.11 picks that
	// index itself once it has statistics; the hint keeps it so before, as
	// a sale starts.
	// It reads orders alone: FOR UPDATE locks every table read, and a lock
	// on the voucher would make sweepers wait for each other and for
	// admissions. The voucher's pay_within_seconds is the first argument.
	// An order whose payment was started (payment_started_at) is due only
	// once written before the second time too: held for the payment grace.
	selectDueSQL = `SELECT o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, ?, o.payment_started_at, o.amount, o.currency
FROM orders o FORCE INDEX (orders_voucher_status)
WHERE o.voucher_id = ? AND o.status = 'created' AND o.returned_at IS NULL AND o.written_at < ?
AND (o.payment_started_at IS NULL OR o.written_at < ?)
ORDER BY o.written_at LIMIT ?
FOR UPDATE SKIP LOCKED`
	// insertPaymentEventSQL is a plain INSERT, not INSERT IGNORE: a
	// replay is told apart by its duplicate key, any other error fails.
	insertPaymentEventSQL = `INSERT INTO payment_events (event_id, order_id, received_at) VALUES (?, ?, ?)`
	// selectDeadlineVouchersSQL reads the vouchers with a deadline that
	// can still have due orders or unreturned units: those with a created
	// order, or a cancelled one whose unit is not marked back in the cache.
	// Each voucher is at most four probes of orders_voucher_status, one per
	// status (voucher_id, status, returned_at IS NULL: a ref on three
	// columns), each stopping at its first order; a voucher whose orders
	// are all settled (paid, or cancelled and returned) is left out,
	// however many it had, and none of them is read. An order written late
	// makes its voucher come back. One scalar subquery per status, not
	// EXISTS with status IN (…): MariaDB 10.11 makes that a semi-join
	// probing voucher_id alone and filters status and returned_at row by
	// row, reading every order of a settled voucher on every sweep
	// (TestDeadlineVouchersReadsNoSettledOrders); OR EXISTS per status,
	// even with FORCE INDEX, did the same. The hint keeps each subquery on
	// the index before the table has statistics of its orders: without
	// it, MariaDB read every order of the settled vouchers then too.
	selectDeadlineVouchersSQL = `SELECT ` + sqlstore.VoucherColumns + ` FROM vouchers
WHERE pay_within_seconds > 0 AND COALESCE(
    (SELECT 1 FROM orders o FORCE INDEX (orders_voucher_status) WHERE o.voucher_id = vouchers.id AND o.status = 'created' AND o.returned_at IS NULL LIMIT 1),
    (SELECT 1 FROM orders o FORCE INDEX (orders_voucher_status) WHERE o.voucher_id = vouchers.id AND o.status = 'cancelled' AND o.returned_at IS NULL LIMIT 1),
    (SELECT 1 FROM orders o FORCE INDEX (orders_voucher_status) WHERE o.voucher_id = vouchers.id AND o.status = 'refunding' AND o.returned_at IS NULL LIMIT 1),
    (SELECT 1 FROM orders o FORCE INDEX (orders_voucher_status) WHERE o.voucher_id = vouchers.id AND o.status = 'refunded' AND o.returned_at IS NULL LIMIT 1)
) IS NOT NULL
ORDER BY id DESC`
	countLifecycleSQL = `SELECT status, returned_at IS NULL, COUNT(*) FROM orders
WHERE voucher_id = ? GROUP BY status, returned_at IS NULL`
)

// cancelRetry is when a cancellation runs its transaction again: when
// InnoDB chose it as a deadlock's victim (with an admission inserting the
// buyer's order while it holds the voucher), up to 5 times.
var cancelRetry = retry.Policy{
	Attempts:  5,
	Retryable: func(err error) bool { return isDeadlock(err) || isLockWaitTimeout(err) },
	Wait:      retry.Jitter,
}

// cancelTx is the isolation of a cancellation, a sweep and a refund claim:
// READ COMMITTED takes no gap locks, so that a sweep locks the orders it
// cancels and nothing between them, and a locking read sees the latest
// committed status.
var cancelTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
