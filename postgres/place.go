package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
	"github.com/seckill/seckill/internal/retry"
)

// The statements of PlaceOrder.
const (
	// selectSaleSQL reads a voucher's window and stock and the buyer's
	// order of it that holds their slot (created, paid, or cancelled
	// unless the voucher has rebuy_after_cancel), at one instant.
	selectSaleSQL = `SELECT v.begin_time, v.end_time, v.stock, v.paused, o.id
FROM vouchers v LEFT JOIN orders o ON o.user_id = $1 AND o.voucher_id = v.id AND o.slot IS NOT NULL
WHERE v.id = $2`
	// placeOrderSQL inserts an order (slot 1) unless its buyer has one of
	// the voucher holding that slot: then it returns no row. A concurrent insert of the buyer's
	// is waited for: if it commits, nothing is inserted. An error would
	// abort the transaction, and the order in the way could then be read
	// only in another; DO NOTHING lets PlaceOrder read it at once, and
	// tell the buyer (docs/design/persistence.md, Database). Any other clash, of the id, is an error.
	// The order owes the voucher's price, in its currency.
	placeOrderSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at, amount, currency)
VALUES ($1, $2, $3, 'created', $4, $5,
    COALESCE((SELECT price FROM vouchers WHERE id = $3), 0), COALESCE((SELECT currency FROM vouchers WHERE id = $3), ''))
ON CONFLICT (user_id, voucher_id, slot) DO NOTHING
RETURNING id`
	// selectBuyerOrderSQL reads the buyer's order of a voucher that holds
	// their slot; in a statement of its own, it sees the orders committed
	// before it began.
	selectBuyerOrderSQL = `SELECT id FROM orders WHERE user_id = $1 AND voucher_id = $2 AND slot IS NOT NULL`
	// takeOneSQL is hm-dianping's: one from the stock, unless none is left.
	// A concurrent transaction's change to the voucher is waited for, and
	// the condition checked again on the changed row.
	// Nor while the sale is paused or once it ended: an operator's pause
	// or end committed is then seen by every order committed after it
	// (docs/design/controls.md, Operator controls).
	takeOneSQL = `UPDATE vouchers SET stock = stock - 1 WHERE id = $1 AND stock > 0 AND NOT paused AND end_time > $2`
	// selectNotTakenSQL reads why takeOneSQL took nothing; in a statement
	// of its own, it sees the latest commit.
	selectNotTakenSQL = `SELECT end_time, paused FROM vouchers WHERE id = $1`
)

// placeRetry is when PlaceOrder runs its transaction again: when it lost
// to a concurrent one, up to 5 times.
var placeRetry = retry.Policy{Attempts: 5, Retryable: lostToConcurrent, Wait: retry.Jitter}

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
// lock wait past lock_timeout starts the transaction over, as placeRetry
// says.
func (s *Store) PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) error {
	if o == nil {
		return fmt.Errorf("postgres: place order: %w: nil order", seckill.ErrInvalidArgument)
	}
	err := retry.Do(ctx, placeRetry, func() error {
		return s.with(ctx, func(conn *pgx.Conn) error { return placeOrder(ctx, conn, o, now) })
	})
	var refusal *seckill.Error
	switch {
	case err == nil, errors.As(err, &refusal):
		return err
	case placeRetry.Retryable(err):
		return fmt.Errorf("postgres: place order %d: %w: concurrent writers got in the way %d times: %w", o.ID, seckill.ErrTransient, placeRetry.Attempts, err)
	}
	return fmt.Errorf("postgres: place order %d: %w", o.ID, dbErr(err))
}

// placeOrder is one attempt of PlaceOrder. A refusal comes back as an
// *seckill.Error, a database error unwrapped.
func placeOrder(ctx context.Context, conn *pgx.Conn, o *seckill.Order, now time.Time) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		sale := orderbatch.Sale{VoucherID: o.VoucherID}
		var existing *int64
		err := tx.QueryRow(ctx, selectSaleSQL, o.UserID, o.VoucherID).Scan(&sale.Begin, &sale.End, &sale.Stock, &sale.Paused, &existing)
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
		err = tx.QueryRow(ctx, placeOrderSQL, o.ID, o.UserID, o.VoucherID, utc(created), writtenAt(created)).Scan(&id)
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

		// After the insert, as docs/design/persistence.md, Database, says. The guard, not the stock
		// read above, is what refuses to oversell.
		tag, err := tx.Exec(ctx, takeOneSQL, o.VoucherID, utc(now))
		if err != nil {
			return fmt.Errorf("take from the stock of voucher %d: %w", o.VoucherID, err)
		}
		if tag.RowsAffected() == 0 {
			after := orderbatch.Sale{VoucherID: o.VoucherID}
			if err := tx.QueryRow(ctx, selectNotTakenSQL, o.VoucherID).Scan(&after.End, &after.Paused); err != nil {
				return fmt.Errorf("read voucher %d: %w", o.VoucherID, err)
			}
			return orderbatch.NotTaken(after, now)
		}
		return nil
	})
}
