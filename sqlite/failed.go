package sqlite

import (
	"context"
	"fmt"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

// insertFailedOrderSQL records a failed order unless its id is in either
// table; the conflict names the primary key, so that any other violation
// still fails. (The WHERE is what lets SQLite parse an upsert after a
// SELECT.) One statement, under the write lock: atomic.
const insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6
WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = ?1)
ON CONFLICT (id) DO NOTHING`

// FailOrder records o as failed with o.Reason (see [orderbatch.Reason]),
// unless an order with its id is already recorded, created or failed: then
// it changes nothing, so that the first reason stays. It does not touch the
// stock: a failed order never took any in the database.
func (s *Store) FailOrder(ctx context.Context, o *seckill.Order) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if o == nil {
		return fmt.Errorf("sqlite: fail order: %w: nil order", seckill.ErrInvalidArgument)
	}
	_, err = s.db.ExecContext(ctx, insertFailedOrderSQL,
		o.ID, o.UserID, o.VoucherID, orderbatch.Reason(o.Reason), micros(createdAt(o)), micros(now()))
	switch {
	case err == nil:
		return nil
	case isForeignKeyViolation(err):
		return fmt.Errorf("sqlite: fail order %d: voucher %d: %w: %w", o.ID, o.VoucherID, seckill.ErrVoucherNotFound, err)
	}
	return fmt.Errorf("sqlite: fail order %d: %w", o.ID, dbErr(err))
}
