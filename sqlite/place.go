package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

// The statements of PlaceOrder.
const (
	// selectSaleSQL reads a voucher's window and stock and the buyer's
	// order of it that holds their slot (created, paid, or cancelled
	// unless the voucher has rebuy_after_cancel).
	selectSaleSQL = `SELECT v.begin_time, v.end_time, v.stock, v.paused, o.id
FROM vouchers v LEFT JOIN orders o ON o.user_id = ?1 AND o.voucher_id = v.id AND o.slot IS NOT NULL
WHERE v.id = ?2`
	// placeOrderSQL inserts an order. A plain INSERT: a clash is an error.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at) VALUES (?, ?, ?, 'created', ?, ?)`
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
func (s *Store) PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) (err error) {
	defer s.closeReadOnly(ctx, &err)
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
	err = tx.QueryRowContext(ctx, selectSaleSQL, o.UserID, o.VoucherID).Scan(&begin, &end, &sale.Stock, &sale.Paused, &existing)
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
	if _, err := tx.ExecContext(ctx, placeOrderSQL, o.ID, o.UserID, o.VoucherID, micros(created), micros(writtenAt(created))); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("sqlite: place order %d: the id is another order's: %w", o.ID, err)
		}
		return fmt.Errorf("sqlite: place order %d: insert: %w", o.ID, dbErr(err))
	}

	// After the insert, as docs/design/persistence.md, Database, says.
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
