package sqlstore

import (
	"context"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

// FailOrder records o as failed with o.Reason (see [orderbatch.Reason]),
// unless an order with its id is already recorded, created or failed: then
// it changes nothing, so that the first reason stays. It does not touch the
// stock: a failed order never took any in the database.
//
// A dialect that reads whether the order is created first (OrderExists)
// does so with a plain read, apart from its insert (see MySQL's
// orderExistsSQL); a SaveOrders of the id committing between the two
// statements leaves the id in both tables, which reads as created.
func (s *Store) FailOrder(ctx context.Context, o *seckill.Order) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if o == nil {
		return s.errorf("fail order: %w: nil order", seckill.ErrInvalidArgument)
	}
	if s.d.SQL.OrderExists != "" {
		var created bool
		if err := s.db.QueryRowContext(ctx, s.d.SQL.OrderExists, o.ID).Scan(&created); err != nil {
			return s.errorf("fail order %d: %w", o.ID, s.d.Err(err))
		}
		if created {
			return nil
		}
	}
	_, err = s.db.ExecContext(ctx, s.d.SQL.InsertFailedOrder,
		o.ID, o.UserID, o.VoucherID, orderbatch.Reason(o.Reason), s.at(createdAt(o)), s.at(now()))
	switch {
	case err == nil, s.d.IsUnique(err):
		// A duplicate id is an order failed before, or by a concurrent
		// call: the error comes once that call has committed.
		return nil
	case s.d.IsForeignKey(err):
		return s.errorf("fail order %d: voucher %d: %w: %w", o.ID, o.VoucherID, seckill.ErrVoucherNotFound, err)
	}
	return s.errorf("fail order %d: %w", o.ID, s.d.Err(err))
}
