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

const (
	selectOrderSQL      = `SELECT ` + orderColumns + ` FROM orders WHERE id = ?`
	selectUserOrdersSQL = `SELECT ` + orderColumns + ` FROM orders WHERE user_id = ? ORDER BY id DESC LIMIT ?`
	countOrdersSQL      = `SELECT count(*) FROM orders WHERE voucher_id = ?`

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

// Order returns the order with the id, or an error wrapping
// [seckill.ErrOrderNotFound].
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

// UserOrders returns up to limit of the user's orders, newest first (order
// ids grow with time); limit <= 0 means 100.
func (s *Store) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	rows, err := s.db.QueryContext(ctx, selectUserOrdersSQL, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: orders of user %d: %w", userID, dbErr(err))
	}
	defer rows.Close()
	var os []*seckill.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: orders of user %d: %w", userID, dbErr(err))
		}
		os = append(os, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: orders of user %d: %w", userID, dbErr(err))
	}
	return os, nil
}

// CountOrders returns how many orders of the voucher the database holds,
// whatever their status.
func (s *Store) CountOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, countOrdersSQL, voucherID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return n, nil
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
