package http

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

type fakeRefused struct {
	list  []*seckill.RefusedPayment
	limit int
}

func (f *fakeRefused) RefusedPayments(_ context.Context, limit int) ([]*seckill.RefusedPayment, error) {
	f.limit = limit
	return f.list, nil
}

// TestAdminRefusedPayments: the admin API lists the refused payment
// events with what was expected and received, in minor units and in the
// currency's units, null and "" for an amount not said; a buyer is
// refused, and a server without the list answers 503.
func TestAdminRefusedPayments(t *testing.T) {
	t.Parallel()
	less := int64(1000)
	refused := &fakeRefused{list: []*seckill.RefusedPayment{
		{EventID: "evt_2", OrderID: 9007199254740993, Ref: "pay_2", ExpectedAmount: 1200, ExpectedCurrency: "JPY",
			Reason: seckill.RefusedUnsaid, At: fakeNow.Add(time.Second).In(time.FixedZone("CST", 8*3600))},
		{EventID: "evt_1", OrderID: 7, Ref: "pay_1", ExpectedAmount: 1250, ExpectedCurrency: "CNY", ReceivedAmount: &less, ReceivedCurrency: "CNY",
			Reason: seckill.RefusedAmount, At: fakeNow},
	}}
	e := newFakeEnv(t, fakeOptions{edit: func(s *Services) { s.RefusedPayments = refused }})
	res := e.do("GET", "/api/admin/payments/refused", e.admin, nil)
	if res.status != 200 {
		t.Fatalf("GET /api/admin/payments/refused = %d %s", res.status, res.raw)
	}
	want := map[string]any{"refused": []any{
		map[string]any{"eventId": "evt_2", "orderId": "9007199254740993", "paymentRef": "pay_2", "expectedAmount": 1200.0, "expectedCurrency": "JPY",
			"expected": "1200 JPY", "receivedAmount": nil, "receivedCurrency": "", "received": "", "reason": "amount_missing", "at": "2026-12-01T12:00:01Z"},
		map[string]any{"eventId": "evt_1", "orderId": "7", "paymentRef": "pay_1", "expectedAmount": 1250.0, "expectedCurrency": "CNY",
			"expected": "12.50 CNY", "receivedAmount": 1000.0, "receivedCurrency": "CNY", "received": "10.00 CNY", "reason": "amount_mismatch", "at": "2026-12-01T12:00:00Z"},
	}}
	if diff := cmp.Diff(want, res.body); diff != "" {
		t.Errorf("GET /api/admin/payments/refused (-want +got):\n%s", diff)
	}
	if refused.limit != maxRefusedShown {
		t.Errorf("asked for %d, want %d", refused.limit, maxRefusedShown)
	}
	if res := e.do("GET", "/api/admin/payments/refused", e.buyer, nil); res.status != 403 {
		t.Errorf("GET /api/admin/payments/refused as a buyer = %d, want 403", res.status)
	}
	if res := newFakeEnv(t).do("GET", "/api/admin/payments/refused", e.admin, nil); res.status != 503 {
		t.Errorf("GET /api/admin/payments/refused without the list = %d %s, want 503", res.status, res.raw)
	}
}
