package mysql

import (
	"context"
	"net/url"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// Under MariaDB's SIMULTANEOUS_ASSIGNMENT, an UPDATE's SET reads every
// column's old value: a late payment's refund is due from its payment all
// the same (refund_next_at is not set from paid_at's old NULL), so a claim
// finds it and it counts as waiting.
func TestLatePaymentRefundDueUnderSimultaneousAssignment(t *testing.T) {
	u, err := url.Parse(testenv.MySQLURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sql_mode", "'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION,SIMULTANEOUS_ASSIGNMENT'")
	u.RawQuery = q.Encode()
	s, err := Open(t.Context(), u.String(), 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, `SELECT @@SESSION.sql_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	t.Logf("sql_mode %s", mode)

	v := &seckill.Voucher{Title: "v", Stock: 1, InitialStock: 1, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	if err := s.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveOrders(ctx, []*seckill.Order{{ID: 1, UserID: 1, VoucherID: v.ID, CreatedAt: now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelOrder(ctx, 1, seckill.ReasonBuyerCancelled, now()); err != nil {
		t.Fatal(err)
	}
	paid := now()
	if o, err := s.PayOrder(ctx, 1, seckill.Payment{Ref: "late", At: paid}); err != nil || o.Status != seckill.OrderRefunding {
		t.Fatalf("PayOrder of a cancelled order = %+v, %v; want refunding", o, err)
	}
	if w, err := s.RefundsWaiting(ctx, 1); err != nil || w.Count != 1 || !w.First[0].NextAt.Equal(paid) {
		t.Errorf("RefundsWaiting = %+v, %v; want 1, due at its payment %v", w, err, paid)
	}
	rq, err := s.ClaimRefund(ctx, 1, paid, paid.Add(time.Minute))
	if err != nil || rq == nil {
		t.Fatalf("ClaimRefund of the late payment = %+v, %v; want its request", rq, err)
	}
	if !rq.PaidAt.Equal(paid) {
		t.Errorf("claimed request paid at %v; want %v", rq.PaidAt, paid)
	}
}

// ClearRefundNextAt implements storetest.RefundNextAtClearer.
func (s *Store) ClearRefundNextAt(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE orders SET refund_next_at = NULL WHERE id = ?`, id)
	return err
}
