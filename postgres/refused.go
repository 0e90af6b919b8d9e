package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

// The statements of the refused payment events; a replay inserts nothing.
const (
	insertRefusedPaymentSQL = `INSERT INTO refused_payment_events
(event_id, order_id, payment_ref, expected_amount, expected_currency, received_amount, received_currency, reason, refused_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (event_id) DO NOTHING`
	selectRefusedPaymentsSQL = `SELECT event_id, order_id, payment_ref, expected_amount, expected_currency, received_amount, received_currency, reason, refused_at
FROM refused_payment_events ORDER BY refused_at DESC, event_id LIMIT $1`
	// Both records by their primary keys, in one round trip.
	selectPaymentEventSeenSQL = `SELECT EXISTS (SELECT 1 FROM payment_events WHERE event_id = $1),
EXISTS (SELECT 1 FROM refused_payment_events WHERE event_id = $1)`
)

// PaymentEventSeen says what the database holds of a payment event's id;
// see [seckill.LifecycleStore].
func (s *Store) PaymentEventSeen(ctx context.Context, eventID string) (seckill.PaymentEventState, error) {
	var recorded, refused bool
	err := s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, selectPaymentEventSeenSQL, eventID).Scan(&recorded, &refused)
	})
	if err != nil {
		return seckill.PaymentEventNew, fmt.Errorf("postgres: payment event %q: %w", eventID, dbErr(err))
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
func (s *Store) RefusePaymentEvent(ctx context.Context, r *seckill.RefusedPayment) (bool, error) {
	var inserted bool
	err := s.with(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, insertRefusedPaymentSQL, r.EventID, r.OrderID, r.Ref, r.ExpectedAmount, r.ExpectedCurrency,
			r.ReceivedAmount, r.ReceivedCurrency, r.Reason, utc(r.At))
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: refuse payment event %q: %w", r.EventID, dbErr(err))
	}
	return inserted, nil
}

// RefusedPayments returns up to limit refused payment events, the latest
// first; limit <= 0 means 100.
func (s *Store) RefusedPayments(ctx context.Context, limit int) ([]*seckill.RefusedPayment, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	var rs []*seckill.RefusedPayment
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, selectRefusedPaymentsSQL, limit)
		if err != nil {
			return err
		}
		rs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.RefusedPayment, error) {
			var r seckill.RefusedPayment
			if err := row.Scan(&r.EventID, &r.OrderID, &r.Ref, &r.ExpectedAmount, &r.ExpectedCurrency, &r.ReceivedAmount, &r.ReceivedCurrency, &r.Reason, &r.At); err != nil {
				return nil, err
			}
			r.At = r.At.UTC()
			return &r, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: refused payment events: %w", dbErr(err))
	}
	return rs, nil
}
