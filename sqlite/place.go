package sqlite

// The statements of PlaceOrder ([sqlstore.Store.PlaceOrder]). The
// transaction takes the write lock as it begins, so PlaceOrders take turns
// whole: what the first read finds is what the insert and the update meet,
// and there is nothing to lock or retry. The only unique violation left is
// of the id, taken by another order; SQLITE_BUSY after busy_timeout is
// transient.
const (
	// placeOrderSQL inserts an order. A plain INSERT: a clash is an error.
	// Arguments: id, user, created, written, voucher.
	// The order owes the voucher's price, in its currency.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at, amount, currency)
VALUES (?1, ?2, ?5, 'created', ?3, ?4, COALESCE((SELECT price FROM vouchers WHERE id = ?5), 0), COALESCE((SELECT currency FROM vouchers WHERE id = ?5), ''))`
	// takeOneSQL is hm-dianping's: one from the stock, unless none is
	// left. The window and the pause were read under the write lock.
	takeOneSQL        = `UPDATE vouchers SET stock = stock - 1 WHERE id = ?1 AND stock > 0`
	selectNotTakenSQL = `SELECT end_time, paused FROM vouchers WHERE id = ?`
)
