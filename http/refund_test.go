package http

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// fakeRefunds answers w, or err.
type fakeRefunds struct {
	w     *seckill.RefundsWaiting
	err   error
	limit int
}

func (f *fakeRefunds) Waiting(_ context.Context, limit int) (*seckill.RefundsWaiting, error) {
	f.limit = limit
	return f.w, f.err
}

// TestAdminRefunds: the admin API lists the refunds not given back yet,
// accepted by the provider or not, ids as strings, times RFC 3339, with how many wait in all; a
// buyer is refused, and a server without refunds answers 503.
func TestAdminRefunds(t *testing.T) {
	t.Parallel()
	refunds := &fakeRefunds{w: &seckill.RefundsWaiting{Count: 3, Oldest: fakeNow.Add(-time.Hour), First: []*seckill.RefundRequest{
		{OrderID: 7, VoucherID: 2, UserID: 42, PaymentRef: "pay_7", PaidAt: fakeNow.Add(-time.Hour), Attempts: 3,
			NextAt: fakeNow.Add(time.Minute), LastError: "payment provider: answered 503"},
		{OrderID: 8, VoucherID: 2, UserID: 43, PaymentRef: "pay_8", PaidAt: fakeNow, Attempts: 1, NextAt: fakeNow.Add(time.Hour),
			AcceptedAt: fakeNow},
	}}}
	e := newFakeEnv(t, fakeOptions{edit: func(s *Services) { s.Refunds = refunds }})
	res := e.do("GET", "/api/admin/refunds", e.admin, nil)
	want := map[string]any{"waiting": 3.0, "oldest": "2026-12-01T11:00:00Z", "refunds": []any{
		map[string]any{"orderId": "7", "voucherId": "2", "userId": "42", "paymentRef": "pay_7", "paidAt": "2026-12-01T11:00:00Z",
			"attempts": 3.0, "nextAt": "2026-12-01T12:01:00Z", "lastError": "payment provider: answered 503"},
		map[string]any{"orderId": "8", "voucherId": "2", "userId": "43", "paymentRef": "pay_8", "paidAt": "2026-12-01T12:00:00Z",
			"attempts": 1.0, "nextAt": "2026-12-01T13:00:00Z", "acceptedAt": "2026-12-01T12:00:00Z"},
	}}
	if res.status != 200 {
		t.Fatalf("GET /api/admin/refunds = %d %s", res.status, res.raw)
	}
	if diff := cmp.Diff(want, res.body); diff != "" {
		t.Errorf("GET /api/admin/refunds (-want +got):\n%s", diff)
	}
	if refunds.limit != maxRefundsShown {
		t.Errorf("asked for %d refunds, want %d", refunds.limit, maxRefundsShown)
	}

	refunds.w = &seckill.RefundsWaiting{}
	if res := e.do("GET", "/api/admin/refunds", e.admin, nil); res.status != 200 || string(res.raw) != "{\"waiting\":0,\"refunds\":[]}\n" {
		t.Errorf("GET /api/admin/refunds with none = %d %s, want an empty list", res.status, res.raw)
	}
	if res := e.do("GET", "/api/admin/refunds", e.buyer, nil); res.status != 403 {
		t.Errorf("GET /api/admin/refunds as a buyer = %d, want 403", res.status)
	}
	refunds.err = fmt.Errorf("mysql: refunds waiting: %w", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "database down"})
	if res := e.do("GET", "/api/admin/refunds", e.admin, nil); res.status != 503 {
		t.Errorf("GET /api/admin/refunds with the database down = %d, want 503", res.status)
	}
	if res := newFakeEnv(t).do("GET", "/api/admin/refunds", e.admin, nil); res.status != 503 {
		t.Errorf("GET /api/admin/refunds without refunds = %d %s, want 503", res.status, res.raw)
	}
}
