package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/retry"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of the order lifecycle ([seckill.LifecycleStore]) the
// dialects agree on. Each transition is one UPDATE guarded by the status
// it leaves, so that of two racing for an order exactly one changes it.
const (
	payOrderSQL = `UPDATE orders SET status = 'paid', paid_at = ?, payment_ref = ?
WHERE id = ? AND status = 'created'`
	// payCancelledSQL records a payment that came after its order was
	// cancelled: to be given back, its refund request due at once. The
	// time is bound twice, not read back from paid_at: under MariaDB's
	// SIMULTANEOUS_ASSIGNMENT, SET reads each column's old value (as
	// SQLite's does).
	payCancelledSQL = `UPDATE orders SET status = 'refunding', paid_at = ?, payment_ref = ?, refund_next_at = ?
WHERE id = ? AND status = 'cancelled'`
	// startPaymentSQL records the first start of a created order's
	// payment; a later start, or one of an order no longer created, changes
	// nothing.
	startPaymentSQL = `UPDATE orders SET payment_started_at = ? WHERE id = ? AND status = 'created' AND payment_started_at IS NULL`
	refundOrderSQL  = `UPDATE orders SET status = 'refunded' WHERE id = ? AND status = 'refunding'`
	// selectOrderVoucherSQL reads what a cancellation needs of an order's
	// voucher; a plain read, which locks nothing (the rule never changes).
	selectOrderVoucherSQL = `SELECT v.id, v.rebuy_after_cancel FROM orders o JOIN vouchers v ON v.id = o.voucher_id WHERE o.id = ?`
	selectVoucherRuleSQL  = `SELECT pay_within_seconds, rebuy_after_cancel FROM vouchers WHERE id = ?`
	// cancelOrdersSQL cancels orders with a reason at a time; the third
	// argument says the voucher has rebuy_after_cancel, and the slot then
	// goes to NULL, which frees the buyer's pair. %s is one '?' per id.
	cancelOrdersSQL = `UPDATE orders
SET status = 'cancelled', reason = ?, cancelled_at = ?, slot = CASE WHEN ? THEN NULL ELSE slot END
WHERE id IN (%s) AND status = 'created'`
	// heldSQL, added to cancelOrdersSQL, leaves created an order whose
	// payment was started unless it was written before the argument: held
	// for the payment grace (CancelUnpaid), checked on the row as updated.
	heldSQL = `
AND (payment_started_at IS NULL OR written_at < ?)`
	giveBackSQL = `UPDATE vouchers SET stock = stock + ? WHERE id = ?`
	// markReturnedSQL marks cancelled orders' units back in the cache;
	// %s is one '?' per id.
	markReturnedSQL = `UPDATE orders SET returned_at = ?
WHERE id IN (%s) AND returned_at IS NULL AND status IN ('cancelled', 'refunding', 'refunded')`
)

// PayOrder records a payment of the order; see [seckill.LifecycleStore].
// Each guarded update is a statement of its own: an order cancelled
// between the two is caught by the second.
func (s *Store) PayOrder(ctx context.Context, id int64, p seckill.Payment) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	at := s.at(now())
	if !p.At.IsZero() {
		at = s.at(p.At)
	}
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{payOrderSQL, []any{at, p.Ref, id}},
		{payCancelledSQL, []any{at, p.Ref, at, id}},
	} {
		res, err := s.db.ExecContext(ctx, st.sql, st.args...)
		if err != nil {
			return nil, s.errorf("pay order %d: %w", id, s.d.Err(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, s.errorf("pay order %d: %w", id, s.d.Err(err))
		} else if n > 0 {
			break
		}
	}
	return s.lifecycleOrder(ctx, id)
}

// StartPayment records the first start of the order's payment; see
// [seckill.LifecycleStore].
func (s *Store) StartPayment(ctx context.Context, id int64, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, startPaymentSQL, s.at(at), id); err != nil {
		return nil, s.errorf("start the payment of order %d: %w", id, s.d.Err(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelOrder cancels the order if it is created, and gives its unit back
// to the voucher's stock, in one transaction; see [seckill.LifecycleStore].
func (s *Store) CancelOrder(ctx context.Context, id int64, reason string, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	err = retry.Do(ctx, s.d.CancelRetry, func() error { return s.cancelOrder(ctx, id, reason, at, nil) })
	if err != nil {
		return nil, s.errorf("cancel order %d: %w", id, s.d.Err(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelUnpaid cancels the order, its PayBy passed, unless its payment
// was started and the grace after its PayBy is not over; see
// [seckill.LifecycleStore].
func (s *Store) CancelUnpaid(ctx context.Context, id int64, startedBefore, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	err = retry.Do(ctx, s.d.CancelRetry, func() error { return s.cancelOrder(ctx, id, seckill.ReasonNotPaid, at, &startedBefore) })
	if err != nil {
		return nil, s.errorf("cancel unpaid order %d: %w", id, s.d.Err(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// cancelOrder is one attempt of CancelOrder.
func (s *Store) cancelOrder(ctx context.Context, id int64, reason string, at time.Time, startedBefore *time.Time) error {
	tx, err := s.db.BeginTx(ctx, s.d.LockTx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	var (
		voucherID int64
		rebuy     bool
	)
	err = tx.QueryRowContext(ctx, selectOrderVoucherSQL, id).Scan(&voucherID, &rebuy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // lifecycleOrder tells
	} else if err != nil {
		return fmt.Errorf("read the voucher: %w", err)
	}
	if _, err := s.cancel(ctx, tx, voucherID, rebuy, []int64{id}, reason, at, startedBefore); err != nil {
		return err
	}
	return Commit(ctx, tx)
}

// cancel cancels those of ids that are created, orders of the voucher, and
// gives their units back to its stock, in tx; it returns how many it
// cancelled. A non-nil startedBefore leaves those whose payment was
// started and written at or after it created (heldSQL).
func (s *Store) cancel(ctx context.Context, tx *sql.Tx, voucherID int64, rebuy bool, ids []int64, reason string, at time.Time, startedBefore *time.Time) (int64, error) {
	args := make([]any, 0, 4+len(ids))
	args = append(args, reason, s.at(at), rebuy)
	for _, id := range ids {
		args = append(args, id)
	}
	stmt := fmt.Sprintf(cancelOrdersSQL, sqlrows.Placeholders("?", len(ids)))
	if startedBefore != nil {
		stmt += heldSQL
		args = append(args, s.at(*startedBefore))
	}
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, fmt.Errorf("cancel: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, giveBackSQL, n, voucherID); err != nil {
		return 0, fmt.Errorf("give %d back to the stock of voucher %d: %w", n, voucherID, err)
	}
	return n, nil
}

// CancelDue cancels up to limit created orders of the voucher written
// before before (their PayBy passed), or before startedBefore if their
// payment was started (the grace after PayBy passed too), the earliest
// written first, in one transaction; see [seckill.LifecycleStore]. limit
// <= 0 means 1000. The dialect's SelectDue reads them under the lock
// that keeps concurrent sweeps apart (MySQL's FOR UPDATE SKIP LOCKED: a
// concurrent sweep takes others, and a buyer's cancel or payment of one of
// them waits for this transaction and then finds it cancelled; SQLite's
// write lock: sweeps take turns, each finding the orders the one before
// cancelled gone).
func (s *Store) CancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) (_ []*seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if limit <= 0 {
		limit = defaultPageLimit
	}
	var due []*seckill.Order
	err = retry.Do(ctx, s.d.CancelRetry, func() (err error) {
		due, err = s.cancelDue(ctx, voucherID, before, startedBefore, at, limit)
		return err
	})
	if err != nil {
		return nil, s.errorf("cancel due orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	return due, nil
}

// cancelDue is one attempt of CancelDue.
func (s *Store) cancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) ([]*seckill.Order, error) {
	var (
		payWithin int64
		rebuy     bool
	)
	err := s.db.QueryRowContext(ctx, selectVoucherRuleSQL, voucherID).Scan(&payWithin, &rebuy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil // no voucher, no orders
	} else if err != nil {
		return nil, fmt.Errorf("read voucher: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, s.d.LockTx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	due, err := sqlrows.Query(ctx, tx, scanOrder, s.d.SQL.SelectDue, payWithin, voucherID, s.at(before), s.at(startedBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("lock due orders: %w", err)
	}
	if len(due) == 0 {
		return nil, nil
	}
	chunk := s.d.SweepChunk
	if chunk <= 0 {
		chunk = len(due)
	}
	var n int64
	for orders := range slices.Chunk(due, chunk) {
		ids := make([]int64, len(orders))
		for i, o := range orders {
			ids[i] = o.ID
		}
		c, err := s.cancel(ctx, tx, voucherID, rebuy, ids, seckill.ReasonNotPaid, at, nil)
		if err != nil {
			return nil, err
		}
		n += c
	}
	if n != int64(len(due)) {
		// The rows are locked and were read created: cannot be.
		return nil, fmt.Errorf("cancelled %d of the %d due orders locked", n, len(due))
	}
	if err := Commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	for _, o := range due {
		o.Status, o.Reason, o.CancelledAt = seckill.OrderCancelled, seckill.ReasonNotPaid, UTC(at)
	}
	return due, nil
}

// Unreturned returns up to limit cancelled orders of the voucher, cancelled
// before before, whose unit is not marked back in the cache, the earliest
// cancelled first; limit <= 0 means 1000.
func (s *Store) Unreturned(ctx context.Context, voucherID int64, before time.Time, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	os, err := sqlrows.Query(ctx, s.db, scanOrder, s.q.selectUnreturned, voucherID, s.at(before), limit)
	if err != nil {
		return nil, s.errorf("unreturned orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	return os, nil
}

// MarkReturned marks the units of the cancelled orders among ids returned
// to the cache, now; an order marked already keeps its time. It writes
// batchChunk ids per statement.
func (s *Store) MarkReturned(ctx context.Context, ids []int64) (err error) {
	defer s.closeReadOnly(ctx, &err)
	at := s.at(now())
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, at)
		for _, id := range chunk {
			args = append(args, id)
		}
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf(markReturnedSQL, sqlrows.Placeholders("?", len(chunk))), args...); err != nil {
			return s.errorf("mark units returned: %w", s.d.Err(err))
		}
	}
	return nil
}

// RefundOrder records that a refunding order's payment was given back;
// see [seckill.LifecycleStore]. The store keeps no time of it: at is not
// stored.
func (s *Store) RefundOrder(ctx context.Context, id int64, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, refundOrderSQL, id); err != nil {
		return nil, s.errorf("refund order %d: %w", id, s.d.Err(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// RecordPaymentEvent records a payment provider's event by its id, and
// reports whether it is new: a replay is a row the dialect's
// InsertPaymentEvent did not insert, or refused as a duplicate key.
func (s *Store) RecordPaymentEvent(ctx context.Context, eventID string, orderID int64, at time.Time) (_ bool, err error) {
	defer s.closeReadOnly(ctx, &err)
	res, err := s.db.ExecContext(ctx, s.d.SQL.InsertPaymentEvent, eventID, orderID, s.at(at))
	switch {
	case err == nil:
		n, err := res.RowsAffected()
		if err != nil {
			return false, s.errorf("record payment event %q: %w", eventID, s.d.Err(err))
		}
		return n == 1, nil
	case s.d.IsUnique(err):
		return false, nil
	}
	return false, s.errorf("record payment event %q: %w", eventID, s.d.Err(err))
}

// DeadlineVouchers returns the vouchers with a pay-by deadline that can
// still have due orders or unreturned units, newest first; see
// [seckill.LifecycleStore].
func (s *Store) DeadlineVouchers(ctx context.Context) ([]*seckill.Voucher, error) {
	vs, err := sqlrows.Query(ctx, s.db, scanVoucher, s.d.SQL.SelectDeadlineVouchers)
	if err != nil {
		return nil, s.errorf("vouchers with a deadline: %w", s.d.Err(err))
	}
	return vs, nil
}

// LifecycleCounts counts the voucher's orders by status, in one statement
// that reads orders_voucher_status alone.
func (s *Store) LifecycleCounts(ctx context.Context, voucherID int64) (*seckill.LifecycleCounts, error) {
	rows, err := s.db.QueryContext(ctx, s.d.SQL.CountLifecycle, voucherID)
	if err != nil {
		return nil, s.errorf("count orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	defer rows.Close()
	var c seckill.LifecycleCounts
	for rows.Next() {
		var (
			status     seckill.OrderStatus
			unreturned bool
			n          int64
		)
		if err := rows.Scan(&status, &unreturned, &n); err != nil {
			return nil, s.errorf("count orders of voucher %d: %w", voucherID, s.d.Err(err))
		}
		c.Add(status, unreturned, n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("count orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	return &c, nil
}

// lifecycleOrder returns the order with the id after a step of its life,
// read in a statement of its own: as it stands once the step committed.
func (s *Store) lifecycleOrder(ctx context.Context, id int64) (*seckill.Order, error) {
	return orderbatch.Living(s.Order(ctx, id))
}
