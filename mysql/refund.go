package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of the refund requests ([seckill.LifecycleStore]
// ClaimRefunds and after): refunding orders, due at refund_next_at (NULL:
// at once, as a binary from before the refund retry left them), read
// through orders_refund_due.
const (
	refundColumns = `id, user_id, voucher_id, payment_ref, paid_at, refund_attempts, refund_next_at, refund_error, refund_requested_at`
	// selectDueRefundsSQL locks up to a limit of the refund requests due at
	// a time, skipping those another transaction holds.
	selectDueRefundsSQL = `SELECT id FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)
ORDER BY refund_next_at LIMIT ?
FOR UPDATE SKIP LOCKED`
	// selectDueRefundSQL locks one order's refund request if it is due. It
	// waits for the lock rather than skipping it: the order's payment asks
	// for its refund at once, and a short transaction holding the row (the
	// cancellation it came after, a sweep reading past it) must not put
	// that off to the next pass of a loop; a claim that held it first has
	// moved its next attempt, and this one then finds it not due.
	selectDueRefundSQL = `SELECT id FROM orders
WHERE id = ? AND status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= ?)
FOR UPDATE`
	// claimRefundsSQL moves the locked requests' next attempt to their
	// claim's end; %s is one '?' per id.
	claimRefundsSQL  = `UPDATE orders SET refund_next_at = ?, refund_attempts = refund_attempts + 1 WHERE id IN (%s)`
	selectRefundsSQL = `SELECT ` + refundColumns + ` FROM orders WHERE id IN (%s) ORDER BY paid_at, id`
	// refundAcceptedSQL keeps the first acceptance's time.
	refundAcceptedSQL = `UPDATE orders SET refund_requested_at = COALESCE(refund_requested_at, ?), refund_next_at = ?, refund_error = ''
WHERE id = ? AND status = 'refunding'`
	refundFailedSQL = `UPDATE orders SET refund_next_at = ?, refund_error = ?
WHERE id = ? AND status = 'refunding'`
	countRefundsWaitingSQL = `SELECT COUNT(*), MIN(paid_at) FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding'`
	selectRefundsWaitingSQL = `SELECT ` + refundColumns + ` FROM orders FORCE INDEX (orders_refund_due)
WHERE status = 'refunding'
ORDER BY paid_at, id LIMIT ?`
)

// ClaimRefunds claims up to limit refund requests due at now; see
// [seckill.LifecycleStore]. limit <= 0 means 1000.
func (s *Store) ClaimRefunds(ctx context.Context, now, until time.Time, limit int) (_ []*seckill.RefundRequest, err error) {
	defer s.closeReadOnly(ctx, &err)
	if limit <= 0 {
		limit = defaultPageLimit
	}
	rs, err := s.claimRefunds(ctx, until, selectDueRefundsSQL, utc(now), limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: claim due refunds: %w", dbErr(err))
	}
	return rs, nil
}

// ClaimRefund claims the order's refund request if it is due; see
// [seckill.LifecycleStore].
func (s *Store) ClaimRefund(ctx context.Context, id int64, now, until time.Time) (_ *seckill.RefundRequest, err error) {
	defer s.closeReadOnly(ctx, &err)
	rs, err := s.claimRefunds(ctx, until, selectDueRefundSQL, id, utc(now))
	if err != nil {
		return nil, fmt.Errorf("mysql: claim the refund of order %d: %w", id, dbErr(err))
	}
	if len(rs) == 0 {
		return nil, nil
	}
	return rs[0], nil
}

// claimRefunds locks the requests that lockSQL selects, moves their next
// attempt to until, and reads them, in one transaction.
func (s *Store) claimRefunds(ctx context.Context, until time.Time, lockSQL string, args ...any) ([]*seckill.RefundRequest, error) {
	tx, err := s.db.BeginTx(ctx, cancelTx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ids, err := sqlrows.Query(ctx, tx, sqlrows.Scalar[int64], lockSQL, args...)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	in := sqlrows.Placeholders("?", len(ids))
	claim := make([]any, 0, 1+len(ids))
	claim = append(claim, utc(until))
	for _, id := range ids {
		claim = append(claim, id)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(claimRefundsSQL, in), claim...); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	rs, err := sqlrows.Query(ctx, tx, scanRefund, fmt.Sprintf(selectRefundsSQL, in), claim[1:]...)
	if err != nil {
		return nil, fmt.Errorf("read the claimed: %w", err)
	}
	if err := commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return rs, nil
}

// RefundAccepted records that the provider accepted the order's refund
// request: asked again at next unless refunded.
func (s *Store) RefundAccepted(ctx context.Context, id int64, at, next time.Time) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, refundAcceptedSQL, utc(at), utc(next), id); err != nil {
		return fmt.Errorf("mysql: the refund of order %d accepted: %w", id, dbErr(err))
	}
	return nil
}

// RefundFailed records that a refund request failed: due again at next.
func (s *Store) RefundFailed(ctx context.Context, id int64, next time.Time, reason string) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, refundFailedSQL, utc(next), reason, id); err != nil {
		return fmt.Errorf("mysql: the refund of order %d failed: %w", id, dbErr(err))
	}
	return nil
}

// RefundsWaiting counts the refunding orders, and returns up to limit of
// them, the longest waiting first.
func (s *Store) RefundsWaiting(ctx context.Context, limit int) (*seckill.RefundsWaiting, error) {
	var (
		w      seckill.RefundsWaiting
		oldest sql.NullTime
	)
	err := s.db.QueryRowContext(ctx, countRefundsWaitingSQL).Scan(&w.Count, &oldest)
	if err == nil && w.Count > 0 && limit > 0 {
		w.First, err = sqlrows.Query(ctx, s.db, scanRefund, selectRefundsWaitingSQL, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: refunds waiting: %w", dbErr(err))
	}
	if oldest.Valid {
		w.Oldest = oldest.Time.UTC()
	}
	return &w, nil
}

// scanRefund reads the refundColumns of one row.
func scanRefund(row sqlrows.Scanner) (*seckill.RefundRequest, error) {
	var (
		r                          seckill.RefundRequest
		paidAt, nextAt, acceptedAt sql.NullTime
	)
	if err := row.Scan(&r.OrderID, &r.UserID, &r.VoucherID, &r.PaymentRef, &paidAt, &r.Attempts, &nextAt, &r.LastError, &acceptedAt); err != nil {
		return nil, err
	}
	if acceptedAt.Valid {
		r.AcceptedAt = acceptedAt.Time.UTC()
	}
	if paidAt.Valid {
		r.PaidAt = paidAt.Time.UTC()
	}
	if nextAt.Valid {
		r.NextAt = nextAt.Time.UTC()
	}
	return &r, nil
}
