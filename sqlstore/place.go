package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/retry"
)

// The statements of PlaceOrder the dialects agree on.
const (
	// selectSaleSQL reads a voucher's window and stock and the buyer's
	// order of it that holds their slot (created, paid, or cancelled
	// unless the voucher has rebuy_after_cancel). A plain read, which
	// locks nothing: the refusals (most requests, once a sale is sold out)
	// wait for no one.
	selectSaleSQL = `SELECT v.begin_time, v.end_time, v.stock, v.paused, o.id
FROM vouchers v LEFT JOIN orders o ON o.user_id = ? AND o.voucher_id = v.id AND o.slot IS NOT NULL
WHERE v.id = ?`
	// selectBuyerOrderSQL reads the buyer's order that holds their slot.
	selectBuyerOrderSQL = `SELECT id FROM orders WHERE user_id = ? AND voucher_id = ? AND slot IS NOT NULL`
)

// PlaceOrder admits o at now in one transaction (the sync mode); see
// [seckill.OrderStore]. It reads the voucher and the buyer's order,
// inserts o (the dialect's PlaceOrder), then takes one from the stock
// (TakeOne) and commits. A transaction that a concurrent one got in the
// way of starts over, as the dialect's PlaceRetry says.
func (s *Store) PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if o == nil {
		return s.errorf("place order: %w: nil order", seckill.ErrInvalidArgument)
	}
	p := s.d.PlaceRetry
	err = retry.Do(ctx, p, func() error { return s.placeOrder(ctx, o, now) })
	var refusal *seckill.Error
	switch {
	case err == nil, errors.As(err, &refusal):
		return err
	case s.d.IsUnique(err):
		return s.clash(ctx, o, err)
	case p.Retryable(err):
		return s.errorf("place order %d: %w: concurrent writers got in the way %d times: %w", o.ID, seckill.ErrTransient, p.Attempts, err)
	}
	return s.errorf("place order %d: %w", o.ID, err)
}

// placeOrder is one attempt of PlaceOrder. A refusal comes back as an
// *seckill.Error, and a unique violation or an error PlaceRetry retries
// as it is, for PlaceOrder to act on.
func (s *Store) placeOrder(ctx context.Context, o *seckill.Order, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", s.d.Err(err))
	}
	defer tx.Rollback()

	sale := orderbatch.Sale{VoucherID: o.VoucherID}
	var (
		begin, end nullTime
		existing   sql.NullInt64
	)
	err = tx.QueryRowContext(ctx, selectSaleSQL, o.UserID, o.VoucherID).Scan(&begin, &end, &sale.Stock, &sale.Paused, &existing)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return orderbatch.VoucherNotFound(o.VoucherID)
	case err != nil:
		return fmt.Errorf("read voucher %d: %w", o.VoucherID, s.d.Err(err))
	}
	sale.Begin, sale.End = begin.Time, end.Time
	sale.Ordered, sale.OrderID = existing.Valid, existing.Int64
	if err := orderbatch.Refusal(sale, now); err != nil {
		return err
	}

	created := now
	if !o.CreatedAt.IsZero() {
		created = o.CreatedAt
	}
	res, err := tx.ExecContext(ctx, s.d.SQL.PlaceOrder, o.ID, o.UserID, s.at(created), s.at(writtenAt(created)), o.VoucherID)
	if err != nil {
		if s.d.IsUnique(err) || s.d.PlaceRetry.Retryable(err) {
			return err
		}
		return fmt.Errorf("insert: %w", s.d.Err(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("insert: %w", s.d.Err(err))
	} else if n == 0 {
		// The voucher went since the read above; the store never deletes
		// one, but the answer would be this.
		return orderbatch.VoucherNotFound(o.VoucherID)
	}

	// After the insert, as docs/design/persistence.md, Database, says. The guard, not the stock read
	// above, is what refuses to oversell.
	res, err = tx.ExecContext(ctx, s.d.SQL.TakeOne, o.VoucherID, s.at(now))
	if err != nil {
		if s.d.PlaceRetry.Retryable(err) {
			return err
		}
		return fmt.Errorf("take from the stock of voucher %d: %w", o.VoucherID, s.d.Err(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("take from the stock of voucher %d: %w", o.VoucherID, s.d.Err(err))
	} else if n == 0 {
		after := orderbatch.Sale{VoucherID: o.VoucherID}
		var end nullTime
		if err := tx.QueryRowContext(ctx, s.d.SQL.SelectNotTaken, o.VoucherID).Scan(&end, &after.Paused); err != nil {
			return fmt.Errorf("read voucher %d: %w", o.VoucherID, s.d.Err(err))
		}
		after.End = end.Time
		return orderbatch.NotTaken(after, now)
	}
	if err := Commit(ctx, tx); err != nil {
		return fmt.Errorf("commit: %w", s.d.Err(err))
	}
	return nil
}

// clash answers an order whose insert met a unique key, cause: the buyer's
// order of the voucher, committed by a concurrent request since the first
// read, which is a duplicate (G5); else another order's id. It reads in a
// statement of its own, after the transaction: the transaction's snapshot,
// from its first read, does not show that order.
func (s *Store) clash(ctx context.Context, o *seckill.Order, cause error) error {
	var id int64
	err := s.db.QueryRowContext(ctx, selectBuyerOrderSQL, o.UserID, o.VoucherID).Scan(&id)
	switch {
	case err == nil:
		return orderbatch.Duplicate(id)
	case errors.Is(err, sql.ErrNoRows):
		return s.errorf("place order %d: the id is another order's: %w", o.ID, cause)
	}
	return s.errorf("place order %d: read the order of user %d: %w", o.ID, o.UserID, s.d.Err(err))
}
