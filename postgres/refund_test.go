package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ClearRefundNextAt implements storetest.RefundNextAtClearer.
func (s *Store) ClearRefundNextAt(ctx context.Context, id int64) error {
	return s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `UPDATE orders SET refund_next_at = NULL WHERE id = $1`, id)
		return err
	})
}
