package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// Orders holding a unit are the rows of orders, created or paid, and so
// are cancelled ones (cancelled, refunding, refunded); failed ones are
// those of failed_orders. An id can be in both (FailOrder and SaveOrders
// racing, or a failed order saved later on a retry); it is not failed, so
// the reads take a failed order only if it is notCreated. Each read is one
// statement, so that it sees both tables at one instant.
const (
	// failedOrderColumns are a dialect's OrderColumns of failed_orders f:
	// no payment, no cancellation, no deadline.
	failedOrderColumns = `f.id, f.user_id, f.voucher_id, 'failed', f.reason, f.created_at, NULL, NULL, NULL, '', FALSE, 0, NULL, 0, ''`
	notCreated         = `NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = f.id)`

	countOrdersSQL       = `SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status IN ('created', 'paid')`
	countFailedOrdersSQL = `SELECT count(*) FROM failed_orders f WHERE f.voucher_id = ? AND ` + notCreated
	// selectOrderStatusesSQL reads the status of ids; %[1]s is one '?' per
	// id, and the ids are passed twice.
	selectOrderStatusesSQL = `SELECT id, status FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT f.id, 'failed' FROM failed_orders f WHERE f.id IN (%[1]s) AND ` + notCreated
)

// statements are those the store makes of a dialect's OrderColumns and
// FromOrders, once.
type statements struct {
	selectOrder, selectUserOrders, selectUnreturned string
}

// compose makes the statements of the dialect's parts.
func compose(d Statements) statements {
	orders := `SELECT ` + d.OrderColumns + d.FromOrders
	return statements{
		selectOrder: orders + ` WHERE o.id = ?
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.id = ? AND ` + notCreated,
		selectUserOrders: orders + ` WHERE o.user_id = ?
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.user_id = ? AND ` + notCreated + `
ORDER BY id DESC LIMIT ?`,
		selectUnreturned: orders + `
WHERE o.voucher_id = ? AND o.status IN ('cancelled', 'refunding', 'refunded') AND o.returned_at IS NULL
AND o.cancelled_at < ?
ORDER BY o.cancelled_at, o.id LIMIT ?`,
	}
}

// Order returns the order with the id, in whatever status, or an error
// wrapping [seckill.ErrOrderNotFound].
func (s *Store) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	o, err := scanOrder(s.db.QueryRowContext(ctx, s.q.selectOrder, id, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", id)
	}
	if err != nil {
		return nil, s.errorf("order %d: %w", id, s.d.Err(err))
	}
	return o, nil
}

// UserOrders returns up to limit of the user's orders, in every status,
// newest first (order ids grow with time); limit <= 0 means 100.
func (s *Store) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	os, err := sqlrows.Query(ctx, s.db, scanOrder, s.q.selectUserOrders, userID, userID, limit)
	if err != nil {
		return nil, s.errorf("orders of user %d: %w", userID, s.d.Err(err))
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
	os, err := sqlrows.Query(ctx, s.db, scanOrder, s.d.SQL.SelectVoucherOrders, voucherID, afterID, limit)
	if err != nil {
		return nil, s.errorf("orders of voucher %d after %d: %w", voucherID, afterID, s.d.Err(err))
	}
	return os, nil
}

// CountOrders returns how many orders of the voucher the database holds
// that hold a unit (created and paid): the stock they took. Cancelled
// orders gave theirs back, and failed ones, in failed_orders, took none.
func (s *Store) CountOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, countOrdersSQL, voucherID).Scan(&n); err != nil {
		return 0, s.errorf("count orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	return n, nil
}

// CountFailedOrders returns how many of the voucher's orders the database
// holds as failed (and not created after all).
func (s *Store) CountFailedOrders(ctx context.Context, voucherID int64) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, countFailedOrdersSQL, voucherID).Scan(&n); err != nil {
		return 0, s.errorf("count failed orders of voucher %d: %w", voucherID, s.d.Err(err))
	}
	return n, nil
}

// OrderStatuses returns the status of each of ids that the database holds
// (that of orders when an id is failed too); ids it does not hold are absent.
// It reads batchChunk ids per statement.
func (s *Store) OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error) {
	statuses := make(map[int64]seckill.OrderStatus, len(ids))
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := make([]any, 0, 2*len(chunk))
		for range 2 {
			for _, id := range chunk {
				args = append(args, id)
			}
		}
		query := fmt.Sprintf(selectOrderStatusesSQL, sqlrows.Placeholders("?", len(chunk)))
		if err := sqlrows.QueryMap(ctx, s.db, statuses, query, args...); err != nil {
			return nil, s.errorf("order statuses: %w", s.d.Err(err))
		}
	}
	return statuses, nil
}

// scanOrder reads the OrderColumns of one row.
func scanOrder(row sqlrows.Scanner) (*seckill.Order, error) {
	var (
		o                                         seckill.Order
		createdAt, writtenAt, paidAt, cancelledAt nullTime
		payWithin                                 int64
		startedAt                                 nullTime
	)
	if err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Status, &o.Reason, &createdAt, &writtenAt,
		&paidAt, &cancelledAt, &o.PaymentRef, &o.Returned, &payWithin, &startedAt, &o.Amount, &o.Currency); err != nil {
		return nil, err
	}
	o.CreatedAt = createdAt.Time
	if startedAt.Valid {
		o.PaymentStartedAt = startedAt.Time
	}
	if paidAt.Valid {
		o.PaidAt = paidAt.Time
	}
	if cancelledAt.Valid {
		o.CancelledAt = cancelledAt.Time
	}
	if payWithin > 0 && o.Status != seckill.OrderFailed {
		// A row from before written_at counts from its creation.
		from := o.CreatedAt
		if writtenAt.Valid {
			from = writtenAt.Time
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
	return UTC(o.CreatedAt)
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
	return UTC(created)
}
