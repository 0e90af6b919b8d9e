package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

const orderColumns = `id, user_id, voucher_id, status, reason, created_at`

// Created orders are the rows of orders, failed ones those of
// failed_orders. An id can be in both (a failed order saved later on a
// retry); it is created, so the reads take a failed order only if it is
// notCreated. Each read is one statement, so that it sees both tables at
// one instant.
const (
	// failedOrderColumns are orderColumns of failed_orders f.
	failedOrderColumns = `f.id, f.user_id, f.voucher_id, 'failed', f.reason, f.created_at`
	notCreated         = `NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = f.id)`

	selectOrderSQL = `SELECT ` + orderColumns + ` FROM orders WHERE id = ?1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.id = ?1 AND ` + notCreated
	selectUserOrdersSQL = `SELECT ` + orderColumns + ` FROM orders WHERE user_id = ?1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.user_id = ?1 AND ` + notCreated + `
ORDER BY id DESC LIMIT ?2`
	countOrdersSQL       = `SELECT count(*) FROM orders WHERE voucher_id = ?`
	countFailedOrdersSQL = `SELECT count(*) FROM failed_orders f WHERE f.voucher_id = ? AND ` + notCreated
	// selectVoucherOrdersSQL reads a page of a voucher's orders as a range
	// of orders_voucher_id, which ends with the rowid (id): just the page,
	// wherever it is. With statistics (ANALYZE, PRAGMA optimize) SQLite may
	// walk the primary key instead, filtering out other vouchers' orders:
	// the first page of a sale then reads every order of the sales before
	// it. INDEXED BY rules that out, and fails the statement if the index
	// is gone.
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders INDEXED BY orders_voucher_id
WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?`
	// selectOrderStatusesSQL reads the status of ids; %[1]s is one '?' per
	// id, and the ids are passed twice.
	selectOrderStatusesSQL = `SELECT id, status FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT f.id, 'failed' FROM failed_orders f WHERE f.id IN (%[1]s) AND ` + notCreated

	// insertFailedOrderSQL records a failed order unless its id is in
	// either table; the conflict names the primary key, so that any other
	// violation still fails. (The WHERE is what lets SQLite parse an
	// upsert after a SELECT.) One statement, under the write lock: atomic.
	insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6
WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = ?1)
ON CONFLICT (id) DO NOTHING`
)

// The statements of SaveOrders.
const (
	// selectClashingOrdersSQL finds the stored orders that share an id or a
	// (user, voucher) pair with a batch; %[1]s is one '?' per order and
	// %[2]s one '(?, ?)' per order.
	selectClashingOrdersSQL = `SELECT id, user_id, voucher_id FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT id, user_id, voucher_id FROM orders WHERE (user_id, voucher_id) IN (VALUES %[2]s)`
	// insertOrdersSQL inserts orders, %s holding one insertOrderRow per
	// order. A plain INSERT: a clash is an error, never silently skipped.
	insertOrdersSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at) VALUES %s`
	insertOrderRow  = `(?, ?, ?, 'created', ?)`
	// takeStockSQL takes n from a voucher's stock unless that would make it
	// negative: then it changes no row.
	takeStockSQL   = `UPDATE vouchers SET stock = stock - ?1 WHERE id = ?2 AND stock >= ?1`
	selectStockSQL = `SELECT stock FROM vouchers WHERE id = ?`
)

// batchChunk is how many orders one statement of SaveOrders covers, well
// within SQLite's limit of 32766 parameters.
const batchChunk = 500

// saveAttempts is how many times SaveOrders runs its transaction when it
// fails for a reason that a new attempt may not meet.
const saveAttempts = 3

// SaveOrders writes the orders that are new with status created, and takes
// their number from each voucher's stock, in one transaction; see
// [seckill.OrderStore]. Writers are serialized by SQLite's write lock, taken
// as the transaction begins, so the orders found stored are all there are.
func (s *Store) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	if slices.Contains(orders, nil) {
		return nil, fmt.Errorf("sqlite: save orders: %w: nil order", seckill.ErrInvalidArgument)
	}
	if len(orders) == 0 {
		return []seckill.SaveOutcome{}, nil
	}
	for attempt := 1; ; attempt++ {
		outcomes, err := s.saveOrders(ctx, orders)
		if err == nil {
			return outcomes, nil
		}
		if !isUniqueViolation(err) {
			return nil, fmt.Errorf("sqlite: save orders: %w", err)
		}
		if attempt == saveAttempts {
			return nil, fmt.Errorf("sqlite: save orders: %w: orders kept appearing while saving: %w", seckill.ErrTransient, err)
		}
	}
}

// saveOrders is one attempt of SaveOrders. Its error is unique violation
// unwrapped when orders were inserted by another writer since they were
// looked up, so that SaveOrders can try again.
func (s *Store) saveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", dbErr(err))
	}
	defer tx.Rollback()

	var stored []orderbatch.Key
	for chunk := range slices.Chunk(orders, batchChunk) {
		if stored, err = appendClashingOrders(ctx, tx, stored, chunk); err != nil {
			return nil, err
		}
	}
	outcomes, inserts := orderbatch.Classify(orders, stored)

	for chunk := range slices.Chunk(inserts, batchChunk) {
		args := make([]any, 0, 4*len(chunk))
		for _, o := range chunk {
			args = append(args, o.ID, o.UserID, o.VoucherID, micros(createdAt(o)))
		}
		query := fmt.Sprintf(insertOrdersSQL, placeholders(insertOrderRow, len(chunk)))
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			switch {
			case isUniqueViolation(err):
				return nil, err
			case isForeignKeyViolation(err):
				return nil, fmt.Errorf("insert orders: a voucher does not exist: %w: %w", seckill.ErrVoucherNotFound, err)
			}
			return nil, fmt.Errorf("insert orders: %w", dbErr(err))
		}
	}

	// After the inserts, as DESIGN 4a says: the stock drops only for
	// orders that went in.
	for _, t := range orderbatch.Takes(inserts) {
		res, err := tx.ExecContext(ctx, takeStockSQL, t.N, t.VoucherID)
		if err != nil {
			return nil, fmt.Errorf("take %d from the stock of voucher %d: %w", t.N, t.VoucherID, dbErr(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("take %d from the stock of voucher %d: %w", t.N, t.VoucherID, dbErr(err))
		} else if n == 0 {
			return nil, stockError(ctx, tx, t)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", dbErr(err))
	}
	return outcomes, nil
}

// appendClashingOrders appends to stored the stored orders that share an id
// or a (user, voucher) pair with one of orders.
func appendClashingOrders(ctx context.Context, q querier, stored []orderbatch.Key, orders []*seckill.Order) ([]orderbatch.Key, error) {
	args := make([]any, 0, 3*len(orders))
	for _, o := range orders {
		args = append(args, o.ID)
	}
	for _, o := range orders {
		args = append(args, o.UserID, o.VoucherID)
	}
	query := fmt.Sprintf(selectClashingOrdersSQL, placeholders("?", len(orders)), placeholders("(?, ?)", len(orders)))
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("find stored orders: %w", dbErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var o orderbatch.Key
		if err := rows.Scan(&o.ID, &o.UserID, &o.VoucherID); err != nil {
			return nil, fmt.Errorf("find stored orders: %w", dbErr(err))
		}
		stored = append(stored, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find stored orders: %w", dbErr(err))
	}
	return stored, nil
}

// stockError explains why the stock of a voucher could not drop by t.N:
// the voucher is missing, or its stock is short.
func stockError(ctx context.Context, q querier, t orderbatch.Take) error {
	var stock int64
	err := q.QueryRowContext(ctx, selectStockSQL, t.VoucherID).Scan(&stock)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("voucher %d: %w", t.VoucherID, seckill.ErrVoucherNotFound)
	case err != nil:
		return fmt.Errorf("voucher %d has too little stock for %d new orders: %w (reading the stock: %w)", t.VoucherID, t.N, seckill.ErrSoldOut, dbErr(err))
	}
	return fmt.Errorf("voucher %d has a stock of %d for %d new orders: %w", t.VoucherID, stock, t.N, seckill.ErrSoldOut)
}

// FailOrder records o as failed with o.Reason (see [orderbatch.Reason]),
// unless an order with its id is already recorded, created or failed: then
// it changes nothing, so that the first reason stays. It does not touch the
// stock: a failed order never took any in the database.
func (s *Store) FailOrder(ctx context.Context, o *seckill.Order) error {
	if o == nil {
		return fmt.Errorf("sqlite: fail order: %w: nil order", seckill.ErrInvalidArgument)
	}
	_, err := s.db.ExecContext(ctx, insertFailedOrderSQL,
		o.ID, o.UserID, o.VoucherID, orderbatch.Reason(o.Reason), micros(createdAt(o)), micros(now()))
	switch {
	case err == nil:
		return nil
	case isForeignKeyViolation(err):
		return fmt.Errorf("sqlite: fail order %d: voucher %d: %w: %w", o.ID, o.VoucherID, seckill.ErrVoucherNotFound, err)
	}
	return fmt.Errorf("sqlite: fail order %d: %w", o.ID, dbErr(err))
}

// Order returns the order with the id, created or failed, or an error
// wrapping [seckill.ErrOrderNotFound].
func (s *Store) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	o, err := scanOrder(s.db.QueryRowContext(ctx, selectOrderSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: order %d: %w", id, dbErr(err))
	}
	return o, nil
}

// UserOrders returns up to limit of the user's orders, created and failed,
// newest first (order ids grow with time); limit <= 0 means 100.
func (s *Store) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	os, err := queryOrders(ctx, s.db, selectUserOrdersSQL, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: orders of user %d: %w", userID, err)
	}
	return os, nil
}

// VoucherOrders returns up to limit created orders of the voucher with ids
// above afterID, by id ascending; limit <= 0 means 1000. Each page costs
// the same however far into the voucher's orders it is.
func (s *Store) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	os, err := queryOrders(ctx, s.db, selectVoucherOrdersSQL, voucherID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: orders of voucher %d after %d: %w", voucherID, afterID, err)
	}
	return os, nil
}

// CountOrders returns how many created orders of the voucher the database
// holds: the rows of orders, the stock they took. Failed orders are in
// failed_orders and do not count.
func (s *Store) CountOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, countOrdersSQL, voucherID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return n, nil
}

// CountFailedOrders returns how many of the voucher's orders the database
// holds as failed (and not created after all).
func (s *Store) CountFailedOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, countFailedOrdersSQL, voucherID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count failed orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return n, nil
}

// OrderStatuses returns the status of each of ids that the database holds,
// created or failed (created when both); ids it does not hold are absent.
// It reads batchChunk ids per statement.
func (s *Store) OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error) {
	statuses := make(map[int64]seckill.OrderStatus, len(ids))
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := make([]any, 0, 2*len(chunk))
		for range 2 {
			for _, id := range chunk {
				args = append(args, id)
			}
		}
		if err := readStatuses(ctx, s.db, statuses, fmt.Sprintf(selectOrderStatusesSQL, placeholders("?", len(chunk))), args); err != nil {
			return nil, fmt.Errorf("sqlite: order statuses: %w", err)
		}
	}
	return statuses, nil
}

// readStatuses adds to statuses the (id, status) rows of query.
func readStatuses(ctx context.Context, q querier, statuses map[int64]seckill.OrderStatus, query string, args []any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return dbErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     int64
			status seckill.OrderStatus
		)
		if err := rows.Scan(&id, &status); err != nil {
			return dbErr(err)
		}
		statuses[id] = status
	}
	return dbErr(rows.Err())
}

// queryOrders runs a query of orderColumns and reads its rows.
func queryOrders(ctx context.Context, q querier, query string, args ...any) ([]*seckill.Order, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var os []*seckill.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		os = append(os, o)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return os, nil
}

// scanOrder reads the orderColumns of one row.
func scanOrder(row interface{ Scan(...any) error }) (*seckill.Order, error) {
	var (
		o         seckill.Order
		createdAt int64
	)
	if err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Status, &o.Reason, &createdAt); err != nil {
		return nil, err
	}
	o.CreatedAt = fromMicros(createdAt)
	return &o, nil
}

// createdAt is the creation time to store for o: its own, else now.
func createdAt(o *seckill.Order) time.Time {
	if o.CreatedAt.IsZero() {
		return now()
	}
	return o.CreatedAt
}

// placeholders returns n copies of group joined by commas: the parameters
// of a statement about n orders.
func placeholders(group string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(group) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(group)
	}
	return b.String()
}

// The statements of PlaceOrder.
const (
	// selectSaleSQL reads a voucher's window and stock and the buyer's
	// order of it.
	selectSaleSQL = `SELECT v.begin_time, v.end_time, v.stock, o.id
FROM vouchers v LEFT JOIN orders o ON o.user_id = ?1 AND o.voucher_id = v.id
WHERE v.id = ?2`
	// placeOrderSQL inserts an order. A plain INSERT: a clash is an error.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at) VALUES (?, ?, ?, 'created', ?)`
	// takeOneSQL is hm-dianping's: one from the stock, unless none is left.
	takeOneSQL = `UPDATE vouchers SET stock = stock - 1 WHERE id = ? AND stock > 0`
)

// PlaceOrder admits o at now in one transaction (the sync mode); see
// [seckill.OrderStore]. It reads the voucher and the buyer's order,
// inserts o, then takes one from the stock: three statements and a
// commit.
//
// The transaction takes the write lock as it begins, so PlaceOrders take
// turns whole: what the read finds is what the insert and the update meet,
// and there is nothing to retry. The only unique violation left is of the
// id, taken by another order; SQLITE_BUSY after busy_timeout is transient.
func (s *Store) PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) error {
	if o == nil {
		return fmt.Errorf("sqlite: place order: %w: nil order", seckill.ErrInvalidArgument)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: place order %d: begin: %w", o.ID, dbErr(err))
	}
	defer tx.Rollback()

	sale := orderbatch.Sale{VoucherID: o.VoucherID}
	var (
		begin, end int64
		existing   sql.NullInt64
	)
	err = tx.QueryRowContext(ctx, selectSaleSQL, o.UserID, o.VoucherID).Scan(&begin, &end, &sale.Stock, &existing)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return orderbatch.VoucherNotFound(o.VoucherID)
	case err != nil:
		return fmt.Errorf("sqlite: place order %d: read voucher %d: %w", o.ID, o.VoucherID, dbErr(err))
	}
	sale.Begin, sale.End = fromMicros(begin), fromMicros(end)
	sale.Ordered, sale.OrderID = existing.Valid, existing.Int64
	if err := orderbatch.Refusal(sale, now); err != nil {
		return err
	}

	created := now
	if !o.CreatedAt.IsZero() {
		created = o.CreatedAt
	}
	if _, err := tx.ExecContext(ctx, placeOrderSQL, o.ID, o.UserID, o.VoucherID, micros(created)); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("sqlite: place order %d: the id is another order's: %w", o.ID, err)
		}
		return fmt.Errorf("sqlite: place order %d: insert: %w", o.ID, dbErr(err))
	}

	// After the insert, as DESIGN 4a says.
	res, err := tx.ExecContext(ctx, takeOneSQL, o.VoucherID)
	if err != nil {
		return fmt.Errorf("sqlite: place order %d: take from the stock of voucher %d: %w", o.ID, o.VoucherID, dbErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: place order %d: take from the stock of voucher %d: %w", o.ID, o.VoucherID, dbErr(err))
	} else if n == 0 {
		return orderbatch.SoldOut(o.VoucherID)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: place order %d: commit: %w", o.ID, dbErr(err))
	}
	return nil
}
