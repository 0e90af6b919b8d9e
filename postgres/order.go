package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

// orderColumns are an order's columns, of orders o; scanOrder reads them.
// The voucher's pay_within_seconds, for the pay-by deadline, is a subquery
// rather than a join, so that each read keeps the plan it had without it:
// an index probe of vouchers per order returned.
const orderColumns = `o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL,
(SELECT v.pay_within_seconds FROM vouchers v WHERE v.id = o.voucher_id), o.payment_started_at, o.amount, o.currency`

// Orders holding a unit are the rows of orders, created or paid, and so
// are cancelled ones (cancelled, refunding, refunded); failed ones are
// those of failed_orders. An id can be in both (FailOrder and SaveOrders
// racing, or a failed order saved later on a retry); it is not failed, so
// the reads take a failed order only if it is notCreated. Each read is one
// statement, so that it sees both tables at one instant.
const (
	// failedOrderColumns are orderColumns of failed_orders f: no payment,
	// no cancellation, no deadline.
	failedOrderColumns = `f.id, f.user_id, f.voucher_id, 'failed', f.reason, f.created_at, NULL, NULL, NULL, '', false, 0, NULL, 0, ''`
	notCreated         = `NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = f.id)`

	selectOrderSQL = `SELECT ` + orderColumns + ` FROM orders o WHERE o.id = $1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.id = $1 AND ` + notCreated
	selectUserOrdersSQL = `SELECT ` + orderColumns + ` FROM orders o WHERE o.user_id = $1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.user_id = $1 AND ` + notCreated + `
ORDER BY id DESC LIMIT $2`
	countOrdersSQL       = `SELECT count(*) FROM orders WHERE voucher_id = $1 AND status IN ('created', 'paid')`
	countFailedOrdersSQL = `SELECT count(*) FROM failed_orders f WHERE f.voucher_id = $1 AND ` + notCreated
	// selectVoucherOrdersSQL reads a page of voucher $1's orders after id
	// $2 as a range of orders_voucher_id_id_idx (voucher_id, id): just the
	// page, wherever it is. Written
	// the plain way (voucher_id = $1 AND id > $2 ORDER BY id), it lets the
	// planner walk the primary key instead, filtering out other vouchers'
	// orders, which it does when it takes the voucher for a large share of
	// the table: measured, the first page of a sale read the 100,000
	// orders of an earlier one, and the last page of a sale reads every
	// order after it. The row comparison and ORDER BY voucher_id, id give
	// the same rows in the same order, but only that index provides the
	// order (with voucher_id = $1, the planner would drop voucher_id from
	// the ORDER BY).
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders o
WHERE (o.voucher_id, o.id) > ($1, $2) AND o.voucher_id <= $1
ORDER BY o.voucher_id, o.id LIMIT $3`
	// selectOrderStatusesSQL reads the status of the ids in $1; run as
	// planned.
	selectOrderStatusesSQL = `SELECT id, status FROM orders WHERE id = ANY($1::bigint[])
UNION ALL
SELECT f.id, 'failed' FROM failed_orders f WHERE f.id = ANY($1::bigint[]) AND ` + notCreated
)

// Order returns the order with the id, in whatever status, or an error
// wrapping [seckill.ErrOrderNotFound].
func (s *Store) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	var o *seckill.Order
	err := s.with(ctx, func(conn *pgx.Conn) error {
		var err error
		o, err = scanOrder(conn.QueryRow(ctx, selectOrderSQL, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: order %d: %w", id, dbErr(err))
	}
	return o, nil
}

// UserOrders returns up to limit of the user's orders, in every status,
// newest first (order ids grow with time); limit <= 0 means 100.
func (s *Store) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	os, err := s.queryOrders(ctx, selectUserOrdersSQL, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: orders of user %d: %w", userID, dbErr(err))
	}
	return os, nil
}

// VoucherOrders returns up to limit orders of the voucher with ids above
// afterID, in every status the orders table holds (created, paid,
// cancelled, refunding, refunded: a cancelled order of a voucher with
// RebuyAfterCancel too, which no longer holds its buyer's slot), by id
// ascending; limit <= 0 means 1000. Each page costs the same however far
// into the voucher's orders it is.
func (s *Store) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultPageLimit
	}
	os, err := s.queryOrders(ctx, selectVoucherOrdersSQL, planned, voucherID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: orders of voucher %d after %d: %w", voucherID, afterID, dbErr(err))
	}
	return os, nil
}

// queryOrders runs a query of orderColumns and reads its rows.
func (s *Store) queryOrders(ctx context.Context, query string, args ...any) ([]*seckill.Order, error) {
	var os []*seckill.Order
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		os, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.Order, error) { return scanOrder(row) })
		return err
	})
	return os, err
}

// CountOrders returns how many orders of the voucher the database holds
// that hold a unit (created and paid): the stock they took. Cancelled
// orders gave theirs back, and failed ones, in failed_orders, took none.
func (s *Store) CountOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	err := s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, countOrdersSQL, voucherID).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: count orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return n, nil
}

// CountFailedOrders returns how many of the voucher's orders the database
// holds as failed (and not created after all).
func (s *Store) CountFailedOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	err := s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, countFailedOrdersSQL, voucherID).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: count failed orders of voucher %d: %w", voucherID, dbErr(err))
	}
	return n, nil
}

// OrderStatuses returns the status of each of ids that the database holds
// (that of orders when an id is failed too); ids it does not hold are absent.
// The ids go as one array, whatever their number.
func (s *Store) OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error) {
	statuses := make(map[int64]seckill.OrderStatus, len(ids))
	if len(ids) == 0 {
		return statuses, nil
	}
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, selectOrderStatusesSQL, planned, ids)
		if err != nil {
			return err
		}
		var (
			id     int64
			status seckill.OrderStatus
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
			statuses[id] = status
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: order statuses: %w", dbErr(err))
	}
	return statuses, nil
}

// scanOrder reads the orderColumns of one row.
func scanOrder(row pgx.Row) (*seckill.Order, error) {
	var (
		o                              seckill.Order
		writtenAt, paidAt, cancelledAt *time.Time
		payWithin                      int64
		startedAt                      *time.Time
	)
	if err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Status, &o.Reason, &o.CreatedAt, &writtenAt,
		&paidAt, &cancelledAt, &o.PaymentRef, &o.Returned, &payWithin, &startedAt, &o.Amount, &o.Currency); err != nil {
		return nil, err
	}
	o.CreatedAt = o.CreatedAt.UTC()
	if startedAt != nil {
		o.PaymentStartedAt = startedAt.UTC()
	}
	if paidAt != nil {
		o.PaidAt = paidAt.UTC()
	}
	if cancelledAt != nil {
		o.CancelledAt = cancelledAt.UTC()
	}
	if payWithin > 0 && o.Status != seckill.OrderFailed {
		// A row from before written_at counts from its creation.
		from := o.CreatedAt
		if writtenAt != nil {
			from = writtenAt.UTC()
		}
		o.PayBy = from.Add(time.Duration(payWithin) * time.Second)
	}
	return &o, nil
}

// createdAt is the creation time to store for o: its own, else now.
func createdAt(o *seckill.Order) time.Time {
	if o.CreatedAt.IsZero() {
		return now()
	}
	return utc(o.CreatedAt)
}

// writtenAt is the time to store as the written_at of an order created at
// created and written now: the later of the two. An order is payable from
// when it is written, which in the stream and queue modes may be long
// after its admission (a backlog, a database down), and never before its
// admission.
func writtenAt(created time.Time) time.Time {
	if t := now(); t.After(created) {
		return t
	}
	return utc(created)
}
