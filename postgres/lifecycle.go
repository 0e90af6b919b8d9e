package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/retry"
)

// The statements of the order lifecycle ([seckill.LifecycleStore]). Each
// transition is one UPDATE guarded by the status it leaves, so that of two
// racing for an order exactly one changes it; a cancellation and its unit
// back to the stock are one statement, which PostgreSQL runs atomically.
const (
	payOrderSQL = `UPDATE orders SET status = 'paid', paid_at = $2, payment_ref = $3
WHERE id = $1 AND status = 'created'`
	// payCancelledSQL records a payment that came after its order was
	// cancelled: to be given back, its refund request due at once.
	payCancelledSQL = `UPDATE orders SET status = 'refunding', paid_at = $2, payment_ref = $3, refund_next_at = $2
WHERE id = $1 AND status = 'cancelled'`
	// startPaymentSQL records the first start of a created order's
	// payment; a later start, or one of an order no longer created, changes
	// nothing.
	startPaymentSQL = `UPDATE orders SET payment_started_at = $1 WHERE id = $2 AND status = 'created' AND payment_started_at IS NULL`
	refundOrderSQL  = `UPDATE orders SET status = 'refunded' WHERE id = $1 AND status = 'refunding'`
	// cancelOrderSQL cancels order $1 with reason $2 at $3 if it is
	// created, freeing the buyer's pair (slot NULL) if its voucher allows a
	// rebuy, and gives its unit back to the voucher's stock. The vouchers
	// joined in c are not locked; the voucher's row is locked after the
	// order's, as every cancellation does. $4, unless NULL, leaves created
	// an order whose payment was started unless it was written before $4:
	// held for the payment grace (CancelUnpaid), checked again on the row
	// as updated if it changed since the statement began.
	cancelOrderSQL = `WITH c AS (
    UPDATE orders o
    SET status = 'cancelled', reason = $2, cancelled_at = $3,
        slot = CASE WHEN v.rebuy_after_cancel THEN NULL ELSE o.slot END
    FROM vouchers v
    WHERE o.id = $1 AND o.status = 'created' AND v.id = o.voucher_id
        AND ($4::timestamptz IS NULL OR o.payment_started_at IS NULL OR o.written_at < $4)
    RETURNING o.voucher_id
)
UPDATE vouchers SET stock = stock + 1 FROM c WHERE vouchers.id = c.voucher_id`
	selectVoucherRuleSQL = `SELECT pay_within_seconds, rebuy_after_cancel FROM vouchers WHERE id = $1`
	// cancelDueSQL cancels up to $3 created orders of voucher $1 written
	// before $2, the earliest written first, with reason $4 at $5 ($6: the
	// voucher allows a rebuy), gives their units back, and returns them.
	// Written, not created: an order is payable from when it is written,
	// and its deadline counts from then; a row from before written_at is
	// never due. due locks them
	// as it reads them, a range of orders_voucher_status_idx in its order,
	// skipping those another transaction holds (a concurrent sweep, a
	// buyer's cancel or payment); a row changed since the statement began
	// is checked again, and skipped if no longer created. $7 is the
	// voucher's pay_within_seconds, for the orders returned. An order whose
	// payment was started is due only once written before $8 too: held for
	// the payment grace.
	cancelDueSQL = `WITH due AS (
    SELECT id FROM orders
    WHERE voucher_id = $1 AND status = 'created' AND returned_at IS NULL AND written_at < $2
        AND (payment_started_at IS NULL OR written_at < $8)
    ORDER BY written_at LIMIT $3
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE orders o
    SET status = 'cancelled', reason = $4, cancelled_at = $5,
        slot = CASE WHEN $6::boolean THEN NULL ELSE o.slot END
    FROM due
    WHERE o.id = due.id AND o.status = 'created'
    RETURNING o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
        o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, $7::integer, o.payment_started_at, o.amount, o.currency
), back AS (
    UPDATE vouchers SET stock = stock + (SELECT count(*) FROM c)
    WHERE id = $1 AND EXISTS (SELECT 1 FROM c)
)
SELECT * FROM c`
	selectUnreturnedSQL = `SELECT ` + orderColumns + ` FROM orders o
WHERE o.voucher_id = $1 AND o.status IN ('cancelled', 'refunding', 'refunded') AND o.returned_at IS NULL
AND o.cancelled_at < $2
ORDER BY o.cancelled_at, o.id LIMIT $3`
	// markReturnedSQL marks the units of the cancelled orders among $2
	// back in the cache at $1.
	markReturnedSQL = `UPDATE orders SET returned_at = $1
WHERE id = ANY($2::bigint[]) AND returned_at IS NULL AND status IN ('cancelled', 'refunding', 'refunded')`
	insertPaymentEventSQL = `INSERT INTO payment_events (event_id, order_id, received_at) VALUES ($1, $2, $3)
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
WHERE voucher_id = $1 GROUP BY status, returned_at IS NULL`
)

// cancelRetry is when a cancellation runs again: when PostgreSQL chose it
// as a deadlock's victim, up to 5 times.
var cancelRetry = retry.Policy{Attempts: 5, Retryable: lostToConcurrent, Wait: retry.Jitter}

// PayOrder records a payment of the order; see [seckill.LifecycleStore].
// Each guarded update is a statement of its own: an order cancelled
// between the two is caught by the second.
func (s *Store) PayOrder(ctx context.Context, id int64, p seckill.Payment) (*seckill.Order, error) {
	at := now()
	if !p.At.IsZero() {
		at = utc(p.At)
	}
	err := s.with(ctx, func(conn *pgx.Conn) error {
		for _, stmt := range []string{payOrderSQL, payCancelledSQL} {
			tag, err := conn.Exec(ctx, stmt, id, at, p.Ref)
			if err != nil || tag.RowsAffected() > 0 {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: pay order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// StartPayment records the first start of the order's payment; see
// [seckill.LifecycleStore].
func (s *Store) StartPayment(ctx context.Context, id int64, at time.Time) (*seckill.Order, error) {
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, startPaymentSQL, utc(at), id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: start the payment of order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelOrder cancels the order if it is created, and gives its unit back
// to the voucher's stock, in one statement; see [seckill.LifecycleStore].
func (s *Store) CancelOrder(ctx context.Context, id int64, reason string, at time.Time) (*seckill.Order, error) {
	if err := s.cancelOrder(ctx, id, reason, at, nil); err != nil {
		return nil, fmt.Errorf("postgres: cancel order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// CancelUnpaid cancels the order, its PayBy passed, unless its payment
// was started and the grace after its PayBy is not over; see
// [seckill.LifecycleStore].
func (s *Store) CancelUnpaid(ctx context.Context, id int64, startedBefore, at time.Time) (*seckill.Order, error) {
	if err := s.cancelOrder(ctx, id, seckill.ReasonNotPaid, at, utc(startedBefore)); err != nil {
		return nil, fmt.Errorf("postgres: cancel unpaid order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// cancelOrder runs cancelOrderSQL, startedBefore its $4 (nil: no hold).
func (s *Store) cancelOrder(ctx context.Context, id int64, reason string, at time.Time, startedBefore any) error {
	return retry.Do(ctx, cancelRetry, func() error {
		return s.with(ctx, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, cancelOrderSQL, id, reason, utc(at), startedBefore)
			return err
		})
	})
}

// CancelDue cancels up to limit created orders of the voucher written
// before before (their PayBy passed), or before startedBefore if their
// payment was started (the grace after PayBy passed too), the earliest
// written first, in one
// statement; see [seckill.LifecycleStore]. limit <= 0 means 1000. The
// statement returns them in no order: they are sorted by PayBy (written_at
// and one PayWithin for all), as the other stores return them.
func (s *Store) CancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	var due []*seckill.Order
	err := retry.Do(ctx, cancelRetry, func() error {
		return s.with(ctx, func(conn *pgx.Conn) error {
			var (
				payWithin int32
				rebuy     bool
			)
			err := conn.QueryRow(ctx, selectVoucherRuleSQL, voucherID).Scan(&payWithin, &rebuy)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // no voucher, no orders
			} else if err != nil {
				return err
			}
			rows, err := conn.Query(ctx, cancelDueSQL, planned,
				voucherID, utc(before), limit, seckill.ReasonNotPaid, utc(at), rebuy, payWithin, utc(startedBefore))
			if err != nil {
				return err
			}
			due, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.Order, error) { return scanOrder(row) })
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: cancel due orders of voucher %d: %w", voucherID, dbErr(err))
	}
	slices.SortFunc(due, func(a, b *seckill.Order) int {
		return cmp.Or(a.PayBy.Compare(b.PayBy), cmp.Compare(a.ID, b.ID))
	})
	return due, nil
}

// Unreturned returns up to limit cancelled orders of the voucher, cancelled
// before before, whose unit is not marked back in the cache, the earliest
// cancelled first; limit <= 0 means 1000.
func (s *Store) Unreturned(ctx context.Context, voucherID int64, before time.Time, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	os, err := s.queryOrders(ctx, selectUnreturnedSQL, voucherID, utc(before), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: unreturned orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return os, nil
}

// MarkReturned marks the units of the cancelled orders among ids returned
// to the cache, now; an order marked already keeps its time. The ids go
// as one array, whatever their number.
func (s *Store) MarkReturned(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, markReturnedSQL, now(), ids)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: mark units returned: %w", dbErr(err))
	}
	return nil
}

// RefundOrder records that a refunding order's payment was given back;
// see [seckill.LifecycleStore]. The store keeps no time of it: at is not
// stored.
func (s *Store) RefundOrder(ctx context.Context, id int64, at time.Time) (*seckill.Order, error) {
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, refundOrderSQL, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: refund order %d: %w", id, dbErr(err))
	}
	return s.lifecycleOrder(ctx, id)
}

// RecordPaymentEvent records a payment provider's event by its id, and
// reports whether it is new.
func (s *Store) RecordPaymentEvent(ctx context.Context, eventID string, orderID int64, at time.Time) (bool, error) {
	var inserted bool
	err := s.with(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, insertPaymentEventSQL, eventID, orderID, utc(at))
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: record payment event %q: %w", eventID, dbErr(err))
	}
	return inserted, nil
}

// DeadlineVouchers returns the vouchers with a pay-by deadline that can
// still have due orders or unreturned units, newest first; see
// [seckill.LifecycleStore].
func (s *Store) DeadlineVouchers(ctx context.Context) ([]*seckill.Voucher, error) {
	var vs []*seckill.Voucher
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, selectDeadlineVouchersSQL)
		if err != nil {
			return err
		}
		vs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.Voucher, error) { return scanVoucher(row) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: vouchers with a deadline: %w", dbErr(err))
	}
	return vs, nil
}

// LifecycleCounts counts the voucher's orders by status, in one statement
// that reads orders_voucher_status_idx alone.
func (s *Store) LifecycleCounts(ctx context.Context, voucherID int64) (*seckill.LifecycleCounts, error) {
	var c seckill.LifecycleCounts
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, countLifecycleSQL, voucherID)
		if err != nil {
			return err
		}
		var (
			status     seckill.OrderStatus
			unreturned bool
			n          int64
		)
		_, err = pgx.ForEachRow(rows, []any{&status, &unreturned, &n}, func() error {
			c.Add(status, unreturned, n)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: count orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return &c, nil
}

// lifecycleOrder returns the order with the id after a step of its life,
// read in a statement of its own: as it stands once the step committed.
func (s *Store) lifecycleOrder(ctx context.Context, id int64) (*seckill.Order, error) {
	return orderbatch.Living(s.Order(ctx, id))
}
