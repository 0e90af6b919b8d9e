package mysql

import "github.com/seckill/seckill/internal/retry"

// The statements of SaveOrders ([sqlstore.Store.SaveOrders]). The sorting
// transaction first locks the batch's vouchers (lockVouchersSQL), so that
// concurrent batches of one voucher take turns: the orders one finds
// stored then include every order the previous one committed. Without that
// lock, two batches would each take a shared lock on the voucher row by
// inserting orders (the foreign key check) and then deadlock when both
// tried to update its stock.
const (
	// lockVouchersSQL locks a batch's vouchers, in id order, and reads their
	// stock; %s is one '?' per voucher.
	lockVouchersSQL = `SELECT id, stock FROM vouchers WHERE id IN (%s) ORDER BY id FOR UPDATE`
	// selectClashingOrdersSQL finds the stored orders that share an id or
	// hold a (user, voucher) pair (slot not NULL: a cancelled order of a
	// rebuy voucher has let its pair go) with a batch; %[1]s is one '?'
	// per order and %[2]s one '(?, ?)' per order. Both halves are range
	// scans of an index (the row constructor IN too, on MySQL 5.7+ and
	// MariaDB 10.3+).
	selectClashingOrdersSQL = `SELECT id, user_id, voucher_id, slot IS NOT NULL FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT id, user_id, voucher_id, 1 FROM orders WHERE (user_id, voucher_id) IN (%[2]s) AND slot IS NOT NULL`
)

// saveRetry is when SaveOrders runs its sorting transaction again: when a
// concurrent one got in its way (an order inserted meanwhile for another
// voucher, a clashing id; a deadlock), up to 5 times.
var saveRetry = retry.Policy{
	Attempts:  5,
	Retryable: func(err error) bool { return isUniqueViolation(err) || isDeadlock(err) },
	Wait:      retry.Jitter,
}
