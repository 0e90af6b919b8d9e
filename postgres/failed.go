package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/orderbatch"
)

// insertFailedOrderSQL records a failed order unless its id is in either
// table. The conflict names the primary key, so that any other violation
// still fails; it never waits for or hides a row of orders (MVCC), and a
// concurrent insert of the id makes it wait for that insert to commit,
// then do nothing. The reason is text, not cast to varchar(500), which
// would cut it silently.
const insertFailedOrderSQL = `INSERT INTO failed_orders (id, user_id, voucher_id, reason, created_at, failed_at)
SELECT $1::bigint, $2::bigint, $3::bigint, $4::text, $5::timestamptz, $6::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = $1)
ON CONFLICT (id) DO NOTHING`

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
