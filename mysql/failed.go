package mysql

import (
	"context"
	"fmt"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

// The statements of FailOrder.
const (
	// orderExistsSQL is a plain, non-locking read; see FailOrder.
	orderExistsSQL = `SELECT EXISTS (SELECT 1 FROM orders WHERE id = ?)`
	// insertFailedOrderSQL is a plain INSERT, not INSERT IGNORE, which would
	// also hide a missing voucher; a duplicate id is told apart by its error.
	insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
VALUES (?, ?, ?, ?, ?, ?)`
)

// FailOrder records o as failed with o.Reason (see [orderbatch.Reason]),
// unless an order with its id is already recorded, created or failed: then
// it changes nothing, so that the first reason stays. It does not touch the
// stock: a failed order never took any in the database.
//
// It looks the id up in orders with a plain read before inserting, rather
// than in the INSERT … SELECT it could be: that would lock the gap of orders
// around the id (shared next-key locks, under REPEATABLE READ) while the
// insert's foreign key check waits for the voucher row, which SaveOrders
// holds while it inserts into that gap: a deadlock (the conformance suite's
// FailOrder/RacingSaveOrders met one in every run). A SaveOrders of the id
// committing between the two statements leaves the id in both tables,
// which reads as created.
func (s *Store) FailOrder(ctx context.Context, o *seckill.Order) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if o == nil {
		return fmt.Errorf("mysql: fail order: %w: nil order", seckill.ErrInvalidArgument)
	}
	var created bool
	if err := s.db.QueryRowContext(ctx, orderExistsSQL, o.ID).Scan(&created); err != nil {
		return fmt.Errorf("mysql: fail order %d: %w", o.ID, dbErr(err))
	}
	if created {
		return nil
	}
	_, err = s.db.ExecContext(ctx, insertFailedOrderSQL,
		o.ID, o.UserID, o.VoucherID, orderbatch.Reason(o.Reason), createdAt(o), now())
	switch {
	case err == nil, isUniqueViolation(err):
		// A duplicate id is an order failed before, or by a concurrent
		// call: the error comes once that call has committed.
		return nil
	case isForeignKeyViolation(err):
		return fmt.Errorf("mysql: fail order %d: voucher %d: %w: %w", o.ID, o.VoucherID, seckill.ErrVoucherNotFound, err)
	}
	return fmt.Errorf("mysql: fail order %d: %w", o.ID, dbErr(err))
}
