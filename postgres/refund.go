package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

// The statements of the refund requests ([seckill.LifecycleStore]
// ClaimRefunds and after): refunding orders, due at refund_next_at (NULL:
// at once, as a binary from before the refund retry left them), read
// through orders_refund_due_idx.
const (
	refundColumns = `o.id, o.user_id, o.voucher_id, o.payment_ref, o.paid_at, o.refund_attempts, o.refund_next_at, o.refund_error, o.refund_requested_at`
	// claimRefundsSQL claims up to $3 refund requests due at $1: due locks
	// them as it reads them, skipping those another transaction holds (a
	// row changed since the statement began is checked again), and their
	// next attempt moves to $2.
	claimRefundsSQL = `WITH due AS (
    SELECT id FROM orders
    WHERE status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= $1)
    ORDER BY refund_next_at NULLS FIRST LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE orders o SET refund_next_at = $2, refund_attempts = o.refund_attempts + 1
FROM due WHERE o.id = due.id
RETURNING ` + refundColumns
	// claimRefundSQL is claimRefundsSQL for the order $3 alone, waiting for
	// its lock rather than skipping it: the payment asks for its refund at
	// once, and a short transaction holding the row must not put that off
	// to the loop's next pass; a claim that held it first has moved its
	// next attempt, and the row, checked again, is then not due.
	claimRefundSQL = `WITH due AS (
    SELECT id FROM orders
    WHERE id = $3 AND status = 'refunding' AND (refund_next_at IS NULL OR refund_next_at <= $1)
    FOR UPDATE
)
UPDATE orders o SET refund_next_at = $2, refund_attempts = o.refund_attempts + 1
FROM due WHERE o.id = due.id
RETURNING ` + refundColumns
	// refundAcceptedSQL keeps the first acceptance's time.
	refundAcceptedSQL = `UPDATE orders SET refund_requested_at = COALESCE(refund_requested_at, $2), refund_next_at = $3, refund_error = ''
WHERE id = $1 AND status = 'refunding'`
	refundFailedSQL = `UPDATE orders SET refund_next_at = $2, refund_error = $3
WHERE id = $1 AND status = 'refunding'`
	countRefundsWaitingSQL = `SELECT count(*), min(paid_at) FROM orders
WHERE status = 'refunding'`
	selectRefundsWaitingSQL = `SELECT ` + refundColumns + ` FROM orders o
WHERE o.status = 'refunding'
ORDER BY o.paid_at, o.id LIMIT $1`
)

// ClaimRefunds claims up to limit refund requests due at now, in one
// statement; see [seckill.LifecycleStore]. limit <= 0 means 1000.
func (s *Store) ClaimRefunds(ctx context.Context, now, until time.Time, limit int) ([]*seckill.RefundRequest, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	rs, err := s.refunds(ctx, claimRefundsSQL, utc(now), utc(until), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due refunds: %w", dbErr(err))
	}
	return rs, nil
}

// ClaimRefund claims the order's refund request if it is due; see
// [seckill.LifecycleStore].
func (s *Store) ClaimRefund(ctx context.Context, id int64, now, until time.Time) (*seckill.RefundRequest, error) {
	rs, err := s.refunds(ctx, claimRefundSQL, utc(now), utc(until), id)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim the refund of order %d: %w", id, dbErr(err))
	}
	if len(rs) == 0 {
		return nil, nil
	}
	return rs[0], nil
}

// refunds runs a statement that returns refundColumns, and reads them.
func (s *Store) refunds(ctx context.Context, query string, args ...any) ([]*seckill.RefundRequest, error) {
	var rs []*seckill.RefundRequest
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		rs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.RefundRequest, error) { return scanRefund(row) })
		return err
	})
	return rs, err
}

// RefundAccepted records that the provider accepted the order's refund
// request: asked again at next unless refunded.
func (s *Store) RefundAccepted(ctx context.Context, id int64, at, next time.Time) error {
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, refundAcceptedSQL, id, utc(at), utc(next))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: the refund of order %d accepted: %w", id, dbErr(err))
	}
	return nil
}

// RefundFailed records that a refund request failed: due again at next.
func (s *Store) RefundFailed(ctx context.Context, id int64, next time.Time, reason string) error {
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, refundFailedSQL, id, utc(next), reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: the refund of order %d failed: %w", id, dbErr(err))
	}
	return nil
}

// RefundsWaiting counts the refunding orders, and returns up to limit of
// them, the longest waiting first.
func (s *Store) RefundsWaiting(ctx context.Context, limit int) (*seckill.RefundsWaiting, error) {
	var (
		w      seckill.RefundsWaiting
		oldest *time.Time
	)
	err := s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, countRefundsWaitingSQL).Scan(&w.Count, &oldest)
	})
	if err == nil && w.Count > 0 && limit > 0 {
		w.First, err = s.refunds(ctx, selectRefundsWaitingSQL, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: refunds waiting: %w", dbErr(err))
	}
	if oldest != nil {
		w.Oldest = oldest.UTC()
	}
	return &w, nil
}

// scanRefund reads the refundColumns of one row.
func scanRefund(row pgx.Row) (*seckill.RefundRequest, error) {
	var (
		r                          seckill.RefundRequest
		paidAt, nextAt, acceptedAt *time.Time
	)
	if err := row.Scan(&r.OrderID, &r.UserID, &r.VoucherID, &r.PaymentRef, &paidAt, &r.Attempts, &nextAt, &r.LastError, &acceptedAt); err != nil {
		return nil, err
	}
	if acceptedAt != nil {
		r.AcceptedAt = acceptedAt.UTC()
	}
	if paidAt != nil {
		r.PaidAt = paidAt.UTC()
	}
	if nextAt != nil {
		r.NextAt = nextAt.UTC()
	}
	return &r, nil
}
