package postgres

import (
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

// The statements of SaveOrders take a batch as arrays, one per column, so
// that their text is fixed whatever the batch's size.
const (
	// selectClashingOrdersSQL finds the stored orders that share an id or
	// hold a (user, voucher) pair (slot not NULL: a cancelled order of a
	// rebuy voucher has let its pair go) with a batch: $1 the ids, $2 and
	// $3 the pairs.
	// The LIMIT 1 (the pair is unique anyway) keeps the planner from
	// turning the pairs' lookup into a hash join over a scan of the whole
	// table, which it prefers up to a few hundred thousand orders: one
	// index probe per order instead.
	selectClashingOrdersSQL = `SELECT id, user_id, voucher_id, slot IS NOT NULL FROM orders WHERE id = ANY($1::bigint[])
UNION ALL
SELECT o.id, o.user_id, o.voucher_id, true
FROM unnest($2::bigint[], $3::bigint[]) AS b(user_id, voucher_id)
CROSS JOIN LATERAL (
    SELECT id, user_id, voucher_id FROM orders
    WHERE orders.user_id = b.user_id AND orders.voucher_id = b.voucher_id AND orders.slot IS NOT NULL
    LIMIT 1
) AS o`
	// insertOrdersSQL inserts orders with status created. Not ON CONFLICT
	// DO NOTHING: that would hide an order of the same buyer with another
	// id (docs/design/persistence.md, Database), and a clash with a concurrent batch; a clash is an
	// error, and SaveOrders starts over.
	// Each order owes its voucher's price, in its currency, joined from
	// the voucher's row (no read per order); LEFT JOIN and COALESCE: an
	// unknown voucher fails at the foreign key, as it did.
	insertOrdersSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at, amount, currency)
SELECT o.id, o.user_id, o.voucher_id, 'created', o.created_at, o.written_at, COALESCE(v.price, 0), COALESCE(v.currency, '')
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::timestamptz[])
    AS o(id, user_id, voucher_id, created_at, written_at)
LEFT JOIN vouchers v ON v.id = o.voucher_id`
	// takeStockSQL takes n from each voucher's stock unless that would make
	// it negative, and returns the vouchers it changed: $1 the vouchers, $2
	// the numbers. A concurrent transaction's change to a voucher is waited
	// for, and the condition checked again on the changed row.
	takeStockSQL = `UPDATE vouchers AS v SET stock = v.stock - t.n
FROM unnest($1::bigint[], $2::bigint[]) AS t(id, n)
WHERE v.id = t.id AND v.stock >= t.n
RETURNING v.id`
	selectStockSQL = `SELECT stock FROM vouchers WHERE id = $1`
	// takeVoucherStockSQL takes $2 from voucher $1's stock, for a batch
	// whose orders all went in. Unguarded: the table's CHECK (stock >= 0)
	// fails the statement, and with it the batch, when the stock is short.
	takeVoucherStockSQL = `UPDATE vouchers SET stock = stock - $2 WHERE id = $1`
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

// saveRetry is when SaveOrders runs its transaction again: when a
// concurrent one got in its way, up to 5 times.
var saveRetry = retry.Policy{Attempts: 5, Retryable: isRetryable, Wait: retry.Jitter}

// SaveOrders writes the orders that are new with status created, and takes
// their number from each voucher's stock, in one transaction; see
// [seckill.OrderStore].
//
// It first takes every order for new, as a worker's batch nearly always
// is, and writes them all in one round trip (saveNew). When that fails on
// a constraint (an order stored already, a short stock, an unknown
// voucher) or a deadlock, nothing of it was written, and the transaction
// below sorts the batch out.
//
// That transaction looks up the stored orders that clash with the batch,
// inserts the others, then updates the stock. Concurrent batches of one
// voucher insert side by side and take turns only at the stock update (an
// insert's foreign key check does not conflict with it in PostgreSQL). When
// a concurrent batch inserted some of the same orders after the lookup, the
// insert fails on the unique key once that batch commits, and the
// transaction starts over, then finds them stored; likewise after a
// deadlock. It tries again as saveRetry says.
func (s *Store) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	if slices.Contains(orders, nil) {
		return nil, fmt.Errorf("postgres: save orders: %w: nil order", seckill.ErrInvalidArgument)
	}
	if len(orders) == 0 {
		return []seckill.SaveOutcome{}, nil
	}
	err := s.with(ctx, func(conn *pgx.Conn) error { return saveNew(ctx, conn, orders) })
	switch {
	case err == nil:
		outcomes := make([]seckill.SaveOutcome, len(orders))
		for i := range outcomes {
			outcomes[i] = seckill.Saved
		}
		return outcomes, nil
	case !isConstraintViolation(err) && !isRetryable(err):
		return nil, fmt.Errorf("postgres: save orders: %w", dbErr(err))
	}
	var outcomes []seckill.SaveOutcome
	err = retry.Do(ctx, saveRetry, func() error {
		return s.with(ctx, func(conn *pgx.Conn) (err error) {
			outcomes, err = saveOrders(ctx, conn, orders)
			return err
		})
	})
	switch {
	case err == nil:
		return outcomes, nil
	case saveRetry.Retryable(err):
		return nil, fmt.Errorf("postgres: save orders: %w: concurrent writers got in the way %d times: %w", seckill.ErrTransient, saveRetry.Attempts, err)
	}
	return nil, fmt.Errorf("postgres: save orders: %w", dbErr(err))
}

// saveNew inserts every order of a batch, and takes their number from each
// voucher's stock, in one round trip: the statements go out together as a
// pipeline, which PostgreSQL runs as one implicit transaction, committed
// if all succeed and rolled back whole if one fails. A stored order fails
// the insert on a unique key, an unknown voucher on the foreign key, and a
// short stock the voucher's CHECK; so the stock needs no guard, and an
// update that succeeds found its voucher (the foreign key check locked it
// for this transaction). The vouchers are updated in id order, as every
// batch locks them.
//
// Measured on PostgreSQL 15, one saver: 1.5× (batches of 100) to 1.9×
// (1,000) the orders a second of saveOrders' transaction, and less than
// half the server's CPU per order while a backlog drains. COPY into orders
// in a transaction reached 0.8× of it (100 to 1,000 orders), and COPY into
// a temporary table then INSERT … SELECT less (the table created per
// batch, ON COMMIT DROP, or kept for the session, ON COMMIT DELETE ROWS).
// Updating the stock before inserting serializes a voucher's batches:
// 0.6× with 4 or 16 savers of 1,000 orders.
//
// The statements run in the connection's default mode, prepared: unlike
// the lookup of saveOrders, their plans cannot depend on the arguments.
func saveNew(ctx context.Context, conn *pgx.Conn, orders []*seckill.Order) error {
	ids := make([]int64, len(orders))
	users := make([]int64, len(orders))
	vouchers := make([]int64, len(orders))
	times := make([]time.Time, len(orders))
	written := make([]time.Time, len(orders))
	for i, o := range orders {
		ids[i], users[i], vouchers[i], times[i] = o.ID, o.UserID, o.VoucherID, createdAt(o)
		written[i] = writtenAt(times[i])
	}
	b := &pgx.Batch{}
	b.Queue(insertOrdersSQL, ids, users, vouchers, times, written)
	for _, t := range orderbatch.Takes(orders) {
		b.Queue(takeVoucherStockSQL, t.VoucherID, t.N)
	}
	return conn.SendBatch(ctx, b).Close()
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
			err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Holds)
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
		written := make([]time.Time, 0, len(inserts))
		for _, o := range inserts {
			ids, users, vouchers = append(ids, o.ID), append(users, o.UserID), append(vouchers, o.VoucherID)
			created := createdAt(o)
			times, written = append(times, created), append(written, writtenAt(created))
		}
		if _, err := tx.Exec(ctx, insertOrdersSQL, planned, ids, users, vouchers, times, written); err != nil {
			if isForeignKeyViolation(err) {
				return fmt.Errorf("insert orders: a voucher does not exist: %w: %w", seckill.ErrVoucherNotFound, err)
			}
			return fmt.Errorf("insert orders: %w", err)
		}

		// After the inserts, as docs/design/persistence.md, Database, says: the stock drops only for
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
