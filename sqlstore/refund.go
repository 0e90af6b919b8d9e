package sqlstore

import (
	"context"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of the refund requests ([seckill.LifecycleStore]
// ClaimRefunds and after) the dialects agree on: refunding orders, due at
// refund_next_at (NULL: at once, as a binary from before the refund retry
// left them), read through orders_refund_due.
const (
	// RefundColumns are a refund request's columns (scanRefund), for a
	// dialect's SelectRefundsWaiting too.
	RefundColumns = `id, user_id, voucher_id, payment_ref, paid_at, refund_attempts, refund_next_at, refund_error, refund_requested_at`
	// claimRefundsSQL moves the claimed requests' next attempt to their
	// claim's end; %s is one '?' per id.
	claimRefundsSQL  = `UPDATE orders SET refund_next_at = ?, refund_attempts = refund_attempts + 1 WHERE id IN (%s)`
	selectRefundsSQL = `SELECT ` + RefundColumns + ` FROM orders WHERE id IN (%s) ORDER BY paid_at, id`
	// refundAcceptedSQL keeps the first acceptance's time.
	refundAcceptedSQL = `UPDATE orders SET refund_requested_at = COALESCE(refund_requested_at, ?), refund_next_at = ?, refund_error = ''
WHERE id = ? AND status = 'refunding'`
	refundFailedSQL = `UPDATE orders SET refund_next_at = ?, refund_error = ?
WHERE id = ? AND status = 'refunding'`
)

// ClaimRefunds claims up to limit refund requests due at now; see
// [seckill.LifecycleStore]. limit <= 0 means 1000.
func (s *Store) ClaimRefunds(ctx context.Context, now, until time.Time, limit int) (_ []*seckill.RefundRequest, err error) {
	defer s.closeReadOnly(ctx, &err)
	if limit <= 0 {
		limit = defaultPageLimit
	}
	rs, err := s.claimRefunds(ctx, until, s.d.SQL.SelectDueRefunds, s.at(now), limit)
	if err != nil {
		return nil, s.errorf("claim due refunds: %w", s.d.Err(err))
	}
	return rs, nil
}

// ClaimRefund claims the order's refund request if it is due; see
// [seckill.LifecycleStore].
func (s *Store) ClaimRefund(ctx context.Context, id int64, now, until time.Time) (_ *seckill.RefundRequest, err error) {
	defer s.closeReadOnly(ctx, &err)
	rs, err := s.claimRefunds(ctx, until, s.d.SQL.SelectDueRefund, id, s.at(now))
	if err != nil {
		return nil, s.errorf("claim the refund of order %d: %w", id, s.d.Err(err))
	}
	if len(rs) == 0 {
		return nil, nil
	}
	return rs[0], nil
}

// claimRefunds reads (and with MySQL locks) the requests that dueSQL
// selects, moves their next attempt to until, and reads them again, in
// one transaction.
func (s *Store) claimRefunds(ctx context.Context, until time.Time, dueSQL string, args ...any) ([]*seckill.RefundRequest, error) {
	tx, err := s.db.BeginTx(ctx, s.d.LockTx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ids, err := sqlrows.Query(ctx, tx, sqlrows.Scalar[int64], dueSQL, args...)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	in := sqlrows.Placeholders("?", len(ids))
	claim := make([]any, 0, 1+len(ids))
	claim = append(claim, s.at(until))
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
	if err := Commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return rs, nil
}

// RefundAccepted records that the provider accepted the order's refund
// request: asked again at next unless refunded.
func (s *Store) RefundAccepted(ctx context.Context, id int64, at, next time.Time) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, refundAcceptedSQL, s.at(at), s.at(next), id); err != nil {
		return s.errorf("the refund of order %d accepted: %w", id, s.d.Err(err))
	}
	return nil
}

// RefundFailed records that a refund request failed: due again at next.
func (s *Store) RefundFailed(ctx context.Context, id int64, next time.Time, reason string) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, refundFailedSQL, s.at(next), reason, id); err != nil {
		return s.errorf("the refund of order %d failed: %w", id, s.d.Err(err))
	}
	return nil
}

// RefundsWaiting counts the refunding orders, and returns up to limit of
// them, the longest waiting first.
func (s *Store) RefundsWaiting(ctx context.Context, limit int) (*seckill.RefundsWaiting, error) {
	var (
		w      seckill.RefundsWaiting
		oldest nullTime
	)
	err := s.db.QueryRowContext(ctx, s.d.SQL.CountRefundsWaiting).Scan(&w.Count, &oldest)
	if err == nil && w.Count > 0 && limit > 0 {
		w.First, err = sqlrows.Query(ctx, s.db, scanRefund, s.d.SQL.SelectRefundsWaiting, limit)
	}
	if err != nil {
		return nil, s.errorf("refunds waiting: %w", s.d.Err(err))
	}
	if oldest.Valid {
		w.Oldest = oldest.Time
	}
	return &w, nil
}

// scanRefund reads the RefundColumns of one row.
func scanRefund(row sqlrows.Scanner) (*seckill.RefundRequest, error) {
	var (
		r                          seckill.RefundRequest
		paidAt, nextAt, acceptedAt nullTime
	)
	if err := row.Scan(&r.OrderID, &r.UserID, &r.VoucherID, &r.PaymentRef, &paidAt, &r.Attempts, &nextAt, &r.LastError, &acceptedAt); err != nil {
		return nil, err
	}
	if acceptedAt.Valid {
		r.AcceptedAt = acceptedAt.Time
	}
	if paidAt.Valid {
		r.PaidAt = paidAt.Time
	}
	if nextAt.Valid {
		r.NextAt = nextAt.Time
	}
	return &r, nil
}
