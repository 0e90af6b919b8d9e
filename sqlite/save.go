package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/retry"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of SaveOrders.
const (
	// selectClashingOrdersSQL finds the stored orders that share an id or
	// hold a (user, voucher) pair (slot not NULL: a cancelled order of a
	// rebuy voucher has let its pair go) with a batch; %[1]s is one '?'
	// per order and %[2]s one '(?, ?)' per order.
	selectClashingOrdersSQL = `SELECT id, user_id, voucher_id, slot IS NOT NULL FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT id, user_id, voucher_id, 1 FROM orders WHERE (user_id, voucher_id) IN (VALUES %[2]s) AND slot IS NOT NULL`
	// insertOrdersSQL inserts orders, %s holding one insertOrderRow per
	// order. A plain INSERT: a clash is an error, never silently skipped.
	insertOrdersSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at) VALUES %s`
	insertOrderRow  = `(?, ?, ?, 'created', ?, ?)`
	// takeStockSQL takes n from a voucher's stock unless that would make it
	// negative: then it changes no row.
	takeStockSQL   = `UPDATE vouchers SET stock = stock - ?1 WHERE id = ?2 AND stock >= ?1`
	selectStockSQL = `SELECT stock FROM vouchers WHERE id = ?`
)

// batchChunk is how many orders one statement of SaveOrders covers, well
// within SQLite's limit of 32766 parameters.
const batchChunk = 500

// saveRetry is when SaveOrders runs its transaction again, at once: when
// orders it did not find stored got in the way of its inserts, up to 3
// times.
var saveRetry = retry.Policy{Attempts: 3, Retryable: isUniqueViolation}

// SaveOrders writes the orders that are new with status created, and takes
// their number from each voucher's stock, in one transaction; see
// [seckill.OrderStore]. Writers are serialized by SQLite's write lock, taken
// as the transaction begins, so the orders found stored are all there are.
func (s *Store) SaveOrders(ctx context.Context, orders []*seckill.Order) (_ []seckill.SaveOutcome, err error) {
	defer s.closeReadOnly(ctx, &err)
	if slices.Contains(orders, nil) {
		return nil, fmt.Errorf("sqlite: save orders: %w: nil order", seckill.ErrInvalidArgument)
	}
	if len(orders) == 0 {
		return []seckill.SaveOutcome{}, nil
	}
	var outcomes []seckill.SaveOutcome
	err = retry.Do(ctx, saveRetry, func() (err error) {
		outcomes, err = s.saveOrders(ctx, orders)
		return err
	})
	switch {
	case err == nil:
		return outcomes, nil
	case saveRetry.Retryable(err):
		return nil, fmt.Errorf("sqlite: save orders: %w: orders kept appearing while saving: %w", seckill.ErrTransient, err)
	}
	return nil, fmt.Errorf("sqlite: save orders: %w", err)
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
		args := make([]any, 0, 5*len(chunk))
		for _, o := range chunk {
			created := createdAt(o)
			args = append(args, o.ID, o.UserID, o.VoucherID, micros(created), micros(writtenAt(created)))
		}
		query := fmt.Sprintf(insertOrdersSQL, sqlrows.Placeholders(insertOrderRow, len(chunk)))
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

	// After the inserts, as docs/design/persistence.md, Database, says: the stock drops only for
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
func appendClashingOrders(ctx context.Context, q sqlrows.Querier, stored []orderbatch.Key, orders []*seckill.Order) ([]orderbatch.Key, error) {
	args := make([]any, 0, 3*len(orders))
	for _, o := range orders {
		args = append(args, o.ID)
	}
	for _, o := range orders {
		args = append(args, o.UserID, o.VoucherID)
	}
	query := fmt.Sprintf(selectClashingOrdersSQL, sqlrows.Placeholders("?", len(orders)), sqlrows.Placeholders("(?, ?)", len(orders)))
	keys, err := sqlrows.Query(ctx, q, scanKey, query, args...)
	if err != nil {
		return nil, fmt.Errorf("find stored orders: %w", dbErr(err))
	}
	return append(stored, keys...), nil
}

// scanKey reads the id, user_id, voucher_id and whether it holds the
// pair, of one row.
func scanKey(row sqlrows.Scanner) (orderbatch.Key, error) {
	var k orderbatch.Key
	err := row.Scan(&k.ID, &k.UserID, &k.VoucherID, &k.Holds)
	return k, err
}

// stockError explains why the stock of a voucher could not drop by t.N:
// the voucher is missing, or its stock is short.
func stockError(ctx context.Context, q sqlrows.Querier, t orderbatch.Take) error {
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
