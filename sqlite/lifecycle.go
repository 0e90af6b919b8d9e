package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of the order lifecycle ([seckill.LifecycleStore]). Each
// transition is one UPDATE guarded by the status it leaves, so that of two
// racing for an order exactly one changes it. SQLite has one writer: a
// transaction takes the write lock as it begins, so a cancellation or a
// sweep reads and writes with no other writer in between.
const (
	payOrderSQL = `UPDATE orders SET status = 'paid', paid_at = ?2, payment_ref = ?3
WHERE id = ?1 AND status = 'created'`
	// payCancelledSQL records a payment that came after its order was
	// cancelled: to be given back, its refund request due at once.
	payCancelledSQL = `UPDATE orders SET status = 'refunding', paid_at = ?2, payment_ref = ?3, refund_next_at = ?2
WHERE id = ?1 AND status = 'cancelled'`
	// startPaymentSQL records the first start of a created order's
	// payment; a later start, or one of an order no longer created, changes
	// nothing.
	startPaymentSQL       = `UPDATE orders SET payment_started_at = ? WHERE id = ? AND status = 'created' AND payment_started_at IS NULL`
	refundOrderSQL        = `UPDATE orders SET status = 'refunded' WHERE id = ? AND status = 'refunding'`
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
	// for the payment grace (CancelUnpaid).
	heldSQL = `
AND (payment_started_at IS NULL OR written_at < ?)`
	giveBackSQL = `UPDATE vouchers SET stock = stock + ? WHERE id = ?`
	// selectDueSQL reads up to a limit of the voucher's created orders
	// written before a time, the earliest written first (written_at, not
	// created_at: an order is payable from when it is written, and its
	// deadline counts from then; a row from before written_at is never
	// due): a range of orders_voucher_status in its order. The voucher's pay_within_seconds is the first argument.
	// An order whose payment was started (payment_started_at) is due only
	// once written before the second time too: held for the payment grace.
	selectDueSQL = `SELECT o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, ?, o.payment_started_at
FROM orders AS o INDEXED BY orders_voucher_status
WHERE o.voucher_id = ? AND o.status = 'created' AND o.returned_at IS NULL AND o.written_at < ?
AND (o.payment_started_at IS NULL OR o.written_at < ?)
ORDER BY o.written_at LIMIT ?`
	selectUnreturnedSQL = `SELECT ` + orderColumns + ` FROM orders o
WHERE o.voucher_id = ? AND o.status IN ('cancelled', 'refunding', 'refunded') AND o.returned_at IS NULL
AND o.cancelled_at < ?
ORDER BY o.cancelled_at, o.id LIMIT ?`
	// markReturnedSQL marks cancelled orders' units back in the cache;
	// %s is one '?' per id.
	markReturnedSQL = `UPDATE orders SET returned_at = ?
WHERE id IN (%s) AND returned_at IS NULL AND status IN ('cancelled', 'refunding', 'refunded')`
	// insertPaymentEventSQL names the primary key in its conflict, so that
	// any other violation still fails.
	insertPaymentEventSQL = `INSERT INTO payment_events (event_id, order_id, received_at) VALUES (?, ?, ?)
ON CONFLICT (event_id) DO NOTHING`
	// selectDeadlineVouchersSQL reads the vouchers with a deadline that
	// can still have due orders or unreturned units: those with a created
	// order, or a cancelled one whose unit is not marked back in the cache.
	// Each voucher is one probe of orders_voucher_status, which stops at
	// the first such order; a voucher whose orders are all settled (paid,
	// or cancelled and returned) is left out, however many it had. An
	// order written late makes its voucher come back.
	selectDeadlineVouchersSQL = `SELECT ` + voucherColumns + ` FROM vouchers
WHERE pay_within_seconds > 0 AND EXISTS (SELECT 1 FROM orders o WHERE o.voucher_id = vouchers.id
    AND o.status IN ('created', 'cancelled', 'refunding', 'refunded') AND o.returned_at IS NULL)
ORDER BY id DESC`
	countLifecycleSQL = `SELECT status, returned_at IS NULL, count(*) FROM orders
WHERE voucher_id = ? GROUP BY status, returned_at IS NULL`
)

// PayOrder records a payment of the order; see [seckill.LifecycleStore].
// Each guarded update is a statement of its own: an order cancelled
// between the two is caught by the second.
func (s *Store) PayOrder(ctx context.Context, id int64, p seckill.Payment) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	at := now()
	if !p.At.IsZero() {
		at = p.At
	}
	for _, stmt := range []string{payOrderSQL, payCancelledSQL} {
		res, err := s.db.ExecContext(ctx, stmt, id, micros(at), p.Ref)
		if err != nil {
			return nil, fmt.Errorf("sqlite: pay order %d: %w", id, dbErr(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("sqlite: pay order %d: %w", id, dbErr(err))
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
	if _, err := s.db.ExecContext(ctx, startPaymentSQL, micros(at), id); err != nil {
		return nil, fmt.Errorf("sqlite: start the payment of order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelOrder cancels the order if it is created, and gives its unit back
// to the voucher's stock, in one transaction; see [seckill.LifecycleStore].
func (s *Store) CancelOrder(ctx context.Context, id int64, reason string, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if err := s.cancelOrder(ctx, id, reason, at, nil); err != nil {
		return nil, fmt.Errorf("sqlite: cancel order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelUnpaid cancels the order, its PayBy passed, unless its payment
// was started and the grace after its PayBy is not over; see
// [seckill.LifecycleStore].
func (s *Store) CancelUnpaid(ctx context.Context, id int64, startedBefore, at time.Time) (_ *seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if err := s.cancelOrder(ctx, id, seckill.ReasonNotPaid, at, &startedBefore); err != nil {
		return nil, fmt.Errorf("sqlite: cancel unpaid order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// cancelOrder is CancelOrder's transaction.
func (s *Store) cancelOrder(ctx context.Context, id int64, reason string, at time.Time, startedBefore *time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
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
	if _, err := cancel(ctx, tx, voucherID, rebuy, []int64{id}, reason, at, startedBefore); err != nil {
		return err
	}
	return tx.Commit()
}

// cancel cancels those of ids that are created, orders of the voucher, and
// gives their units back to its stock, in tx; it returns how many it
// cancelled. A non-nil startedBefore leaves those whose payment was
// started and written at or after it created (heldSQL).
func cancel(ctx context.Context, tx *sql.Tx, voucherID int64, rebuy bool, ids []int64, reason string, at time.Time, startedBefore *time.Time) (int64, error) {
	args := make([]any, 0, 4+len(ids))
	args = append(args, reason, micros(at), rebuy)
	for _, id := range ids {
		args = append(args, id)
	}
	stmt := fmt.Sprintf(cancelOrdersSQL, sqlrows.Placeholders("?", len(ids)))
	if startedBefore != nil {
		stmt += heldSQL
		args = append(args, micros(*startedBefore))
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
// written first, in one
// transaction; see
// [seckill.LifecycleStore]. limit <= 0 means 1000. Sweeps take turns at
// the write lock, each finding the orders the one before cancelled gone.
func (s *Store) CancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) (_ []*seckill.Order, err error) {
	defer s.closeReadOnly(ctx, &err)
	if limit <= 0 {
		limit = defaultPageLimit
	}
	due, err := s.cancelDue(ctx, voucherID, before, startedBefore, at, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: cancel due orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return due, nil
}

// cancelDue is CancelDue's transaction.
func (s *Store) cancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) ([]*seckill.Order, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	var (
		payWithin int64
		rebuy     bool
	)
	err = tx.QueryRowContext(ctx, selectVoucherRuleSQL, voucherID).Scan(&payWithin, &rebuy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil // no voucher, no orders
	} else if err != nil {
		return nil, fmt.Errorf("read voucher: %w", err)
	}
	due, err := sqlrows.Query(ctx, tx, scanOrder, selectDueSQL, payWithin, voucherID, micros(before), micros(startedBefore), limit)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	var n int64
	for chunk := range slices.Chunk(due, batchChunk) {
		ids := make([]int64, len(chunk))
		for i, o := range chunk {
			ids[i] = o.ID
		}
		c, err := cancel(ctx, tx, voucherID, rebuy, ids, seckill.ReasonNotPaid, at, nil)
		if err != nil {
			return nil, err
		}
		n += c
	}
	if n != int64(len(due)) {
		// Read created under the write lock: cannot be.
		return nil, fmt.Errorf("cancelled %d of the %d due orders read", n, len(due))
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	cancelledAt := fromMicros(micros(at))
	for _, o := range due {
		o.Status, o.Reason, o.CancelledAt = seckill.OrderCancelled, seckill.ReasonNotPaid, cancelledAt
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
	os, err := sqlrows.Query(ctx, s.db, scanOrder, selectUnreturnedSQL, voucherID, micros(before), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: unreturned orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return os, nil
}

// MarkReturned marks the units of the cancelled orders among ids returned
// to the cache, now; an order marked already keeps its time. It writes
// batchChunk ids per statement.
func (s *Store) MarkReturned(ctx context.Context, ids []int64) (err error) {
	defer s.closeReadOnly(ctx, &err)
	at := micros(now())
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, at)
		for _, id := range chunk {
			args = append(args, id)
		}
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf(markReturnedSQL, sqlrows.Placeholders("?", len(chunk))), args...); err != nil {
			return fmt.Errorf("sqlite: mark units returned: %w", dbErr(err))
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
		return nil, fmt.Errorf("sqlite: refund order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// RecordPaymentEvent records a payment provider's event by its id, and
// reports whether it is new.
func (s *Store) RecordPaymentEvent(ctx context.Context, eventID string, orderID int64, at time.Time) (_ bool, err error) {
	defer s.closeReadOnly(ctx, &err)
	res, err := s.db.ExecContext(ctx, insertPaymentEventSQL, eventID, orderID, micros(at))
	if err != nil {
		return false, fmt.Errorf("sqlite: record payment event %q: %w", eventID, dbErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: record payment event %q: %w", eventID, dbErr(err))
	}
	return n == 1, nil
}

// DeadlineVouchers returns the vouchers with a pay-by deadline that can
// still have due orders or unreturned units, newest first; see
// [seckill.LifecycleStore].
func (s *Store) DeadlineVouchers(ctx context.Context) ([]*seckill.Voucher, error) {
	vs, err := sqlrows.Query(ctx, s.db, scanVoucher, selectDeadlineVouchersSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: vouchers with a deadline: %w", dbErr(err))
	}
	return vs, nil
}

// LifecycleCounts counts the voucher's orders by status, in one statement
// that reads orders_voucher_status alone.
func (s *Store) LifecycleCounts(ctx context.Context, voucherID int64) (*seckill.LifecycleCounts, error) {
	rows, err := s.db.QueryContext(ctx, countLifecycleSQL, voucherID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count orders of voucher %d: %w", voucherID, dbErr(err))
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
			return nil, fmt.Errorf("sqlite: count orders of voucher %d: %w", voucherID, dbErr(err))
		}
		c.Add(status, unreturned, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return &c, nil
}

// lifecycleOrder returns the order with the id after a step of its life,
// read in a statement of its own: as it stands once the step committed.
func (s *Store) lifecycleOrder(ctx context.Context, id int64) (*seckill.Order, error) {
	return orderbatch.Living(s.Order(ctx, id))
}

// batchChunk is how many ids one statement of MarkReturned covers.
const batchChunk = 500
