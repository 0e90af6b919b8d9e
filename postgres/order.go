package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
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

	// insertFailedOrderSQL records a failed order unless its id is in
	// either table. The conflict names the primary key, so that any other
	// violation still fails; it never waits for or hides a row of orders
	// (MVCC), and a concurrent insert of the id makes it wait for that
	// insert to commit, then do nothing. The reason is text, not cast to
	// varchar(500), which would cut it silently.
	insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
SELECT $1::bigint, $2::bigint, $3::bigint, $4::text, $5::timestamptz, $6::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = $1)
ON CONFLICT (id) DO NOTHING`
)

// The statements of SaveOrders take a batch as arrays, one per column, so
// that their text is fixed whatever the batch's size.
const (
	// selectClashingOrdersSQL finds the stored orders that share an id or a
	// (user, voucher) pair with a batch: $1 the ids, $2 and $3 the pairs.
	// The LIMIT 1 (the pair is unique anyway) keeps the planner from
	// turning the pairs' lookup into a hash join over a scan of the whole
	// table, which it prefers up to a few hundred thousand orders: one
	// index probe per order instead.
	selectClashingOrdersSQL = `SELECT id, user_id, voucher_id FROM orders WHERE id = ANY($1::bigint[])
UNION ALL
SELECT o.id, o.user_id, o.voucher_id
FROM unnest($2::bigint[], $3::bigint[]) AS b(user_id, voucher_id)
CROSS JOIN LATERAL (
    SELECT id, user_id, voucher_id FROM orders
    WHERE orders.user_id = b.user_id AND orders.voucher_id = b.voucher_id
    LIMIT 1
) AS o`
	// insertOrdersSQL inserts orders with status created. Not ON CONFLICT
	// DO NOTHING: that would hide an order of the same buyer with another
	// id (DESIGN 4a), and a clash with a concurrent batch; a clash is an
	// error, and SaveOrders starts over.
	insertOrdersSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at)
SELECT id, user_id, voucher_id, 'created', created_at
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[]) AS o(id, user_id, voucher_id, created_at)`
	// takeStockSQL takes n from each voucher's stock unless that would make
	// it negative, and returns the vouchers it changed: $1 the vouchers, $2
	// the numbers. A concurrent transaction's change to a voucher is waited
	// for, and the condition checked again on the changed row.
	takeStockSQL = `UPDATE vouchers AS v SET stock = v.stock - t.n
FROM unnest($1::bigint[], $2::bigint[]) AS t(id, n)
WHERE v.id = t.id AND v.stock >= t.n
RETURNING v.id`
	selectStockSQL = `SELECT stock FROM vouchers WHERE id = $1`
)

// planned runs a statement of SaveOrders as an unnamed one, which
// PostgreSQL plans for its arguments and the tables' current size every
// time. A prepared statement soon gets a generic plan instead, and one made
// while the tables were new and small scans them whole, and keeps scanning
// as a sale fills them: measured, 100-order batches went from 6 ms to 500 ms
// within 80,000 orders. Planning costs a fraction of a millisecond.
// (plan_cache_mode=force_custom_plan on the connection would do it too, but
// replans every foreign key check of every inserted row: 35% slower.)
// The reads whose best plan depends on their arguments (VoucherOrders,
// OrderStatuses) run this way too.
const planned = pgx.QueryExecModeCacheDescribe

// saveAttempts is how many times SaveOrders runs its transaction when a
// concurrent one got in its way.
const saveAttempts = 5

// SaveOrders writes the orders that are new with status created, and takes
// their number from each voucher's stock, in one transaction; see
// [seckill.OrderStore].
//
// The transaction looks up the stored orders that clash with the batch,
// inserts the others, then updates the stock. Concurrent batches of one
// voucher insert side by side and take turns only at the stock update (an
// insert's foreign key check does not conflict with it in PostgreSQL). When
// a concurrent batch inserted some of the same orders after the lookup, the
// insert fails on the unique key once that batch commits, and the
// transaction starts over, then finds them stored; likewise after a
// deadlock. It tries up to saveAttempts times.
func (s *Store) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	if slices.Contains(orders, nil) {
		return nil, fmt.Errorf("postgres: save orders: %w: nil order", seckill.ErrInvalidArgument)
	}
	if len(orders) == 0 {
		return []seckill.SaveOutcome{}, nil
	}
	for attempt := 1; ; attempt++ {
		var outcomes []seckill.SaveOutcome
		err := s.with(ctx, func(conn *pgx.Conn) error {
			var err error
			outcomes, err = saveOrders(ctx, conn, orders)
			return err
		})
		if err == nil {
			return outcomes, nil
		}
		if !isRetryable(err) {
			return nil, fmt.Errorf("postgres: save orders: %w", dbErr(err))
		}
		if attempt == saveAttempts {
			return nil, fmt.Errorf("postgres: save orders: %w: concurrent writers got in the way %d times: %w", seckill.ErrTransient, attempt, err)
		}
		// Jitter, so that the transactions that collided do not collide
		// again at once.
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("postgres: save orders: %w", ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
}

// saveOrders is one attempt of SaveOrders.
func saveOrders(ctx context.Context, conn *pgx.Conn, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	var outcomes []seckill.SaveOutcome
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		ids := make([]int64, len(orders))
		users := make([]int64, len(orders))
		vouchers := make([]int64, len(orders))
		for i, o := range orders {
			ids[i], users[i], vouchers[i] = o.ID, o.UserID, o.VoucherID
		}
		rows, err := tx.Query(ctx, selectClashingOrdersSQL, planned, ids, users, vouchers)
		if err != nil {
			return fmt.Errorf("find stored orders: %w", err)
		}
		stored, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orderbatch.Key, error) {
			var o orderbatch.Key
			err := row.Scan(&o.ID, &o.UserID, &o.VoucherID)
			return o, err
		})
		if err != nil {
			return fmt.Errorf("find stored orders: %w", err)
		}
		var inserts []*seckill.Order
		outcomes, inserts = orderbatch.Classify(orders, stored)
		if len(inserts) == 0 {
			return nil
		}

		ids, users, vouchers = ids[:0], users[:0], vouchers[:0]
		times := make([]time.Time, 0, len(inserts))
		for _, o := range inserts {
			ids, users, vouchers = append(ids, o.ID), append(users, o.UserID), append(vouchers, o.VoucherID)
			times = append(times, createdAt(o))
		}
		if _, err := tx.Exec(ctx, insertOrdersSQL, planned, ids, users, vouchers, times); err != nil {
			if isForeignKeyViolation(err) {
				return fmt.Errorf("insert orders: a voucher does not exist: %w: %w", seckill.ErrVoucherNotFound, err)
			}
			return fmt.Errorf("insert orders: %w", err)
		}

		// After the inserts, as DESIGN 4a says: the stock drops only for
		// orders that went in.
		takes := orderbatch.Takes(inserts)
		takeIDs, takeNs := make([]int64, len(takes)), make([]int64, len(takes))
		for i, t := range takes {
			takeIDs[i], takeNs[i] = t.VoucherID, t.N
		}
		rows, err = tx.Query(ctx, takeStockSQL, planned, takeIDs, takeNs)
		if err != nil {
			return fmt.Errorf("take from the stock: %w", err)
		}
		taken, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("take from the stock: %w", err)
		}
		if len(taken) < len(takes) {
			return stockError(ctx, tx, takes, taken)
		}
		return nil
	})
	return outcomes, err
}

// stockError explains why the stock of a voucher could not drop: its stock
// is short (the foreign key let every order in, so the voucher exists).
func stockError(ctx context.Context, tx pgx.Tx, takes []orderbatch.Take, taken []int64) error {
	var short orderbatch.Take
	for _, t := range takes {
		if !slices.Contains(taken, t.VoucherID) {
			short = t
			break
		}
	}
	var stock int64
	err := tx.QueryRow(ctx, selectStockSQL, short.VoucherID).Scan(&stock)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("voucher %d: %w", short.VoucherID, seckill.ErrVoucherNotFound)
	case err != nil:
		return fmt.Errorf("voucher %d has too little stock for %d new orders: %w (reading the stock: %w)", short.VoucherID, short.N, seckill.ErrSoldOut, err)
	}
	return fmt.Errorf("voucher %d has a stock of %d for %d new orders: %w", short.VoucherID, stock, short.N, seckill.ErrSoldOut)
}

// FailOrder records o as failed with o.Reason (see [orderbatch.Reason]),
// unless an order with its id is already recorded, created or failed: then
// it changes nothing, so that the first reason stays. It does not touch the
// stock: a failed order never took any in the database. A SaveOrders of the
// id committing at the same time can leave the id in both tables, which
// reads as created.
func (s *Store) FailOrder(ctx context.Context, o *seckill.Order) error {
	if o == nil {
		return fmt.Errorf("postgres: fail order: %w: nil order", seckill.ErrInvalidArgument)
	}
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, insertFailedOrderSQL,
			o.ID, o.UserID, o.VoucherID, orderbatch.Reason(o.Reason), createdAt(o), now())
		return err
	})
	switch {
	case err == nil:
		return nil
	case isForeignKeyViolation(err):
		return fmt.Errorf("postgres: fail order %d: voucher %d: %w: %w", o.ID, o.VoucherID, seckill.ErrVoucherNotFound, err)
	}
	return fmt.Errorf("postgres: fail order %d: %w", o.ID, dbErr(err))
}

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

// The statements of PlaceOrder.
const (
	// selectSaleSQL reads a voucher's window and stock and the buyer's
	// order of it, at one instant.
	selectSaleSQL = `SELECT v.begin_time, v.end_time, v.stock, o.id
FROM vouchers v LEFT JOIN orders o ON o.user_id = $1 AND o.voucher_id = v.id
WHERE v.id = $2`
	// placeOrderSQL inserts an order unless its buyer has one of the
	// voucher: then it returns no row. A concurrent insert of the buyer's
	// is waited for: if it commits, nothing is inserted. An error would
	// abort the transaction, and the order in the way could then be read
	// only in another; DO NOTHING lets PlaceOrder read it at once, and
	// tell the buyer (DESIGN 4a). Any other clash, of the id, is an error.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at)
VALUES ($1, $2, $3, 'created', $4)
ON CONFLICT (user_id, voucher_id) DO NOTHING
RETURNING id`
	// selectBuyerOrderSQL reads the buyer's order of a voucher; in a
	// statement of its own, it sees the orders committed before it began.
	selectBuyerOrderSQL = `SELECT id FROM orders WHERE user_id = $1 AND voucher_id = $2`
	// takeOneSQL is hm-dianping's: one from the stock, unless none is left.
	// A concurrent transaction's change to the voucher is waited for, and
	// the condition checked again on the changed row.
	takeOneSQL = `UPDATE vouchers SET stock = stock - 1 WHERE id = $1 AND stock > 0`
)

// placeAttempts is how many times PlaceOrder runs its transaction when a
// concurrent one got in its way.
const placeAttempts = 5

// PlaceOrder admits o at now in one transaction (the sync mode); see
// [seckill.OrderStore]. It reads the voucher and the buyer's order,
// inserts o, then takes one from the stock: four statements and a commit,
// under READ COMMITTED.
//
// Concurrent buyers insert side by side and take turns at the stock
// update: an insert's foreign key check (FOR KEY SHARE) does not conflict
// with the update of a non-key column, so unlike on MySQL, nothing
// deadlocks and the voucher needs no lock of its own. A buyer's concurrent
// requests meet at the unique key, where all but the first wait for it to
// commit and then find its order. A deadlock, a serialization failure or a
// lock wait past lock_timeout starts the transaction over, up to
// placeAttempts times.
func (s *Store) PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) error {
	if o == nil {
		return fmt.Errorf("postgres: place order: %w: nil order", seckill.ErrInvalidArgument)
	}
	for attempt := 1; ; attempt++ {
		err := s.with(ctx, func(conn *pgx.Conn) error { return placeOrder(ctx, conn, o, now) })
		var refusal *seckill.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &refusal):
			return err
		case !lostToConcurrent(err):
			return fmt.Errorf("postgres: place order %d: %w", o.ID, dbErr(err))
		case attempt == placeAttempts:
			return fmt.Errorf("postgres: place order %d: %w: concurrent writers got in the way %d times: %w", o.ID, seckill.ErrTransient, attempt, err)
		}
		// Jitter, so that the transactions that collided do not collide
		// again at once.
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: place order %d: %w", o.ID, ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
}

// placeOrder is one attempt of PlaceOrder. A refusal comes back as an
// *seckill.Error, a database error unwrapped.
func placeOrder(ctx context.Context, conn *pgx.Conn, o *seckill.Order, now time.Time) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		sale := orderbatch.Sale{VoucherID: o.VoucherID}
		var existing *int64
		err := tx.QueryRow(ctx, selectSaleSQL, o.UserID, o.VoucherID).Scan(&sale.Begin, &sale.End, &sale.Stock, &existing)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return orderbatch.VoucherNotFound(o.VoucherID)
		case err != nil:
			return fmt.Errorf("read voucher %d: %w", o.VoucherID, err)
		}
		if existing != nil {
			sale.Ordered, sale.OrderID = true, *existing
		}
		if err := orderbatch.Refusal(sale, now); err != nil {
			return err
		}

		created := now
		if !o.CreatedAt.IsZero() {
			created = o.CreatedAt
		}
		var id int64
		err = tx.QueryRow(ctx, placeOrderSQL, o.ID, o.UserID, o.VoucherID, utc(created)).Scan(&id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The buyer's order, committed since the first read.
			if err := tx.QueryRow(ctx, selectBuyerOrderSQL, o.UserID, o.VoucherID).Scan(&id); err != nil {
				return fmt.Errorf("read the order of user %d: %w", o.UserID, err)
			}
			return orderbatch.Duplicate(id)
		case isForeignKeyViolation(err):
			return orderbatch.VoucherNotFound(o.VoucherID)
		case err != nil:
			return fmt.Errorf("insert: %w", err)
		}

		// After the insert, as DESIGN 4a says. The guard, not the stock
		// read above, is what refuses to oversell.
		tag, err := tx.Exec(ctx, takeOneSQL, o.VoucherID)
		if err != nil {
			return fmt.Errorf("take from the stock of voucher %d: %w", o.VoucherID, err)
		}
		if tag.RowsAffected() == 0 {
			return orderbatch.SoldOut(o.VoucherID)
		}
		return nil
	})
}
