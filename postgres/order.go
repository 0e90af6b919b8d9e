package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

const orderColumns = `id, user_id, voucher_id, status, reason, created_at`

// Created orders are the rows of orders, failed ones those of
// failed_orders. An id can be in both (FailOrder and SaveOrders racing, or
// a failed order saved later on a retry); it is created, so the reads take
// a failed order only if it is notCreated. Each read is one statement, so
// that it sees both tables at one instant.
const (
	// failedOrderColumns are orderColumns of failed_orders f.
	failedOrderColumns = `f.id, f.user_id, f.voucher_id, 'failed', f.reason, f.created_at`
	notCreated         = `NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = f.id)`

	selectOrderSQL = `SELECT ` + orderColumns + ` FROM orders WHERE id = $1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.id = $1 AND ` + notCreated
	selectUserOrdersSQL = `SELECT ` + orderColumns + ` FROM orders WHERE user_id = $1
UNION ALL
SELECT ` + failedOrderColumns + ` FROM failed_orders f WHERE f.user_id = $1 AND ` + notCreated + `
ORDER BY id DESC LIMIT $2`
	countOrdersSQL       = `SELECT count(*) FROM orders WHERE voucher_id = $1`
	countFailedOrdersSQL = `SELECT count(*) FROM failed_orders f WHERE f.voucher_id = $1 AND ` + notCreated
	// selectVoucherOrdersSQL reads a page of voucher $1's orders after id
	// $2 as a range of orders_voucher_id_id_idx (voucher_id, id): just the
	// page, wherever it is. Written the plain way (voucher_id = $1 AND
	// id > $2 ORDER BY id), it lets the planner walk the primary key
	// instead, filtering out other vouchers' orders, which it does when it
	// takes the voucher for a large share of the table: measured, the first
	// page of a sale read the 100,000 orders of an earlier one, and the last
	// page of a sale reads every order after it. The row comparison and
	// ORDER BY voucher_id, id give the same rows in the same order, but only
	// that index provides the order (with voucher_id = $1, the planner
	// would drop voucher_id from the ORDER BY).
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders
WHERE (voucher_id, id) > ($1, $2) AND voucher_id <= $1
ORDER BY voucher_id, id LIMIT $3`
	// selectOrderStatusesSQL reads the status of the ids in $1; run as
	// planned.
	selectOrderStatusesSQL = `SELECT id, status FROM orders WHERE id = ANY($1::bigint[])
UNION ALL
SELECT f.id, 'failed' FROM failed_orders f WHERE f.id = ANY($1::bigint[]) AND ` + notCreated
)

// Order returns the order with the id, created or failed, or an error
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

// UserOrders returns up to limit of the user's orders, created and failed,
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

// VoucherOrders returns up to limit created orders of the voucher with ids
// above afterID, by id ascending; limit <= 0 means 1000. Each page costs
// the same however far into the voucher's orders it is.
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

// CountOrders returns how many created orders of the voucher the database
// holds: the rows of orders, the stock they took. Failed orders are in
// failed_orders and do not count.
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

// OrderStatuses returns the status of each of ids that the database holds,
// created or failed (created when both); ids it does not hold are absent.
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
	var o seckill.Order
	if err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Status, &o.Reason, &o.CreatedAt); err != nil {
		return nil, err
	}
	o.CreatedAt = o.CreatedAt.UTC()
	return &o, nil
}

// createdAt is the creation time to store for o: its own, else now.
func createdAt(o *seckill.Order) time.Time {
	if o.CreatedAt.IsZero() {
		return now()
	}
	return utc(o.CreatedAt)
}
