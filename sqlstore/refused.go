package sqlstore

import (
	"context"
	"database/sql"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// The statements of the refused payment events. A plain INSERT: a replay
// is refused as a duplicate key, as InsertPaymentEvent's is in MySQL.
const (
	insertRefusedPaymentSQL = `INSERT INTO refused_payment_events
(event_id, order_id, payment_ref, expected_amount, expected_currency, received_amount, received_currency, reason, refused_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	selectRefusedPaymentsSQL = `SELECT event_id, order_id, payment_ref, expected_amount, expected_currency, received_amount, received_currency, reason, refused_at
FROM refused_payment_events ORDER BY refused_at DESC, event_id LIMIT ?`
	// Both records by their primary keys, in one round trip.
	selectPaymentEventSeenSQL = `SELECT EXISTS (SELECT 1 FROM payment_events WHERE event_id = ?),
EXISTS (SELECT 1 FROM refused_payment_events WHERE event_id = ?)`
)

// PaymentEventSeen says what the database holds of a payment event's id;
// see [seckill.LifecycleStore].
func (s *Store) PaymentEventSeen(ctx context.Context, eventID string) (seckill.PaymentEventState, error) {
	var recorded, refused bool
	if err := s.db.QueryRowContext(ctx, selectPaymentEventSeenSQL, eventID, eventID).Scan(&recorded, &refused); err != nil {
		return seckill.PaymentEventNew, s.errorf("payment event %q: %w", eventID, s.d.Err(err))
	}
	switch {
	case recorded:
		return seckill.PaymentEventRecorded, nil
	case refused:
		return seckill.PaymentEventRefused, nil
	}
	return seckill.PaymentEventNew, nil
}

// RefusePaymentEvent records a payment event refused for its amount or
// currency, and reports whether it is new; see [seckill.LifecycleStore].
func (s *Store) RefusePaymentEvent(ctx context.Context, r *seckill.RefusedPayment) (_ bool, err error) {
	defer s.closeReadOnly(ctx, &err)
	_, err = s.db.ExecContext(ctx, insertRefusedPaymentSQL, r.EventID, r.OrderID, r.Ref, r.ExpectedAmount, r.ExpectedCurrency,
		r.ReceivedAmount, r.ReceivedCurrency, r.Reason, s.at(r.At))
	switch {
	case err == nil:
		return true, nil
	case s.d.IsUnique(err):
		return false, nil
	}
	return false, s.errorf("refuse payment event %q: %w", r.EventID, s.d.Err(err))
}

// RefusedPayments returns up to limit refused payment events, the latest
// first; limit <= 0 means 100.
func (s *Store) RefusedPayments(ctx context.Context, limit int) ([]*seckill.RefusedPayment, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	rs, err := sqlrows.Query(ctx, s.db, scanRefusedPayment, selectRefusedPaymentsSQL, limit)
	if err != nil {
		return nil, s.errorf("refused payment events: %w", s.d.Err(err))
	}
	return rs, nil
}

func scanRefusedPayment(row sqlrows.Scanner) (*seckill.RefusedPayment, error) {
	var (
		r        seckill.RefusedPayment
		received sql.NullInt64
		at       nullTime
	)
	if err := row.Scan(&r.EventID, &r.OrderID, &r.Ref, &r.ExpectedAmount, &r.ExpectedCurrency, &received, &r.ReceivedCurrency, &r.Reason, &at); err != nil {
		return nil, err
	}
	if received.Valid {
		r.ReceivedAmount = &received.Int64
	}
	r.At = at.Time
	return &r, nil
}
