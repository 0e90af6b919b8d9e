package sqlite

import "context"

// ClearRefundNextAt implements storetest.RefundNextAtClearer.
func (s *Store) ClearRefundNextAt(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE orders SET refund_next_at = NULL WHERE id = ?`, id)
	return err
}
