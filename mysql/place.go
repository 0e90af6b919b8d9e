package mysql

import "github.com/seckill/seckill/internal/retry"

// The statements of PlaceOrder ([sqlstore.Store.PlaceOrder]), and why.
//
// The insert locks the voucher row before its foreign key check takes a
// shared lock on it. With a plain INSERT, concurrent buyers each held that
// shared lock and then deadlocked at the stock update, each waiting for
// the others' (measured on MariaDB 10.11: 773 deadlocks in 3 runs of the
// conformance suite's concurrent cases; BenchmarkPlaceOrder's 8 callers
// placed 450 orders/s, against 1,400 with the lock in the insert and 1,200
// with it in a SELECT … FOR UPDATE first). Taking the lock in the insert
// keeps the refusals (a plain read first) lock-free and costs no round
// trip; the transactions take turns from the insert on, as the stock
// update would make them do anyway. A buyer's concurrent request then
// meets the committed order at the unique key, and gets it back (G5). A
// deadlock or a lock wait timeout starts the transaction over, as
// placeRetry says.
const (
	// placeOrderSQL inserts an order, locking its voucher row (FOR UPDATE)
	// as it reads it. Not INSERT IGNORE: a clash is an error.
	// The order owes the voucher's price, in its currency.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at, amount, currency)
SELECT ?, ?, id, 'created', ?, ?, price, currency FROM vouchers WHERE id = ? FOR UPDATE`
	// takeOneSQL is hm-dianping's: one from the stock, unless none is
	// left; nor while the sale is paused or once it ended, read under the
	// row's lock, so that an operator's pause or end committed is seen by
	// every order committed after it (docs/design/controls.md, Operator controls).
	takeOneSQL = `UPDATE vouchers SET stock = stock - 1 WHERE id = ? AND stock > 0 AND paused = 0 AND end_time > ?`
	// selectNotTakenSQL reads why takeOneSQL took nothing: a locking read,
	// which sees the latest commit (a plain one, the transaction's
	// snapshot).
	selectNotTakenSQL = `SELECT end_time, paused FROM vouchers WHERE id = ? FOR UPDATE`
)

// placeRetry is when PlaceOrder runs its transaction again: when a
// concurrent one got in its way, up to 5 times.
var placeRetry = retry.Policy{
	Attempts:  5,
	Retryable: func(err error) bool { return isDeadlock(err) || isLockWaitTimeout(err) },
	Wait:      retry.Jitter,
}
