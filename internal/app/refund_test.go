package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/paymenttest"
)

// TestRefusedRefundAskedAgain: a payment that comes after its order was
// cancelled makes it refunding and asks the provider for the refund; the
// provider refuses that first request, and the service asks again by
// itself until the provider accepts, with nobody acting and no event sent
// again. A replay of the payment's event then sends no request more. The
// refund waits, accepted, until the provider's refund.succeeded.
func TestRefusedRefundAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBackend(t)
	cfg := b.config(t, seckill.ModeSync)
	secret := []byte("refund-test-secret-of-32-bytes-at-least")
	provider := paymenttest.NewServer(t, secret)
	w, err := payment.New(payment.Config{BaseURL: provider.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Payments, cfg.Webhook = w, w
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.StartWorkers(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	admin := mint(t, cfg.Tokens, auth.Identity{UserID: 1, Admin: true})
	buyer := mint(t, cfg.Tokens, auth.Identity{UserID: 42})
	now := time.Now().UTC()
	var v struct{ ID string }
	call(t, a, http.MethodPost, "/api/admin/vouchers", admin, map[string]any{
		"title": "refund test", "stock": 1, "beginTime": now.Add(-time.Minute), "endTime": now.Add(time.Hour), "payWithinSeconds": 600,
		"price": 1250,
	}, http.StatusCreated, &v)
	var o struct{ OrderID, Status string }
	call(t, a, http.MethodPost, "/api/vouchers/"+v.ID+"/seckill", buyer, nil, http.StatusOK, &o)
	call(t, a, http.MethodPost, "/api/orders/"+o.OrderID+"/cancel", buyer, nil, http.StatusOK, nil)

	provider.RefuseRefunds(1)
	lateAmount := int64(1250)
	send := func(what string, res *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer res.Body.Close()
		var got struct{ Status string }
		json.NewDecoder(res.Body).Decode(&got)
		if res.StatusCode != http.StatusOK || got.Status != string(seckill.OrderRefunding) {
			t.Errorf("%s = %d %s; want 200 refunding", what, res.StatusCode, got.Status)
		}
	}
	res, err := provider.Send(ctx, srv.URL+"/api/payments/webhook", paymenttest.Event{ID: "evt_late", OrderID: mustInt(t, o.OrderID), Ref: "pay_late",
		Amount: &lateAmount, Currency: "CNY"})
	send("the late payment", res, err)
	if n, refunds := provider.RefundRequests(), provider.Refunds(); n != 1 || len(refunds) != 0 {
		t.Fatalf("after the late payment the provider had %d refund requests and took %v; want 1 refused", n, refunds)
	}

	testenv.WaitFor(t, 30*time.Second, "the refund asked for again and accepted", func() bool {
		return provider.Refunds()["refund_"+o.OrderID] == "pay_late"
	})
	testenv.WaitFor(t, 30*time.Second, "the metrics saying the refund accepted waits for its event", func() bool {
		waiting, ok := gauge(t, a, "seckill_refunds_waiting")
		requests, _ := gauge(t, a, "seckill_refund_requests_total")
		return ok && waiting == 1 && requests == 2
	})
	if failures, _ := gauge(t, a, "seckill_refund_request_failures_total"); failures != 1 {
		t.Errorf("seckill_refund_request_failures_total = %v; want 1", failures)
	}
	if n := provider.RefundRequests(); n != 2 {
		t.Errorf("the provider had %d refund requests; want 2: the refused one and the one accepted", n)
	}

	// A replay answered, its refund request would have been sent.
	res, err = provider.Replay(ctx)
	send("the late payment replayed", res, err)
	if n := provider.RefundRequests(); n != 2 {
		t.Errorf("after a replay the provider had %d refund requests; want still 2", n)
	}

	res, err = provider.Send(ctx, srv.URL+"/api/payments/webhook",
		paymenttest.Event{ID: "evt_refund", Type: seckill.RefundSucceeded, OrderID: mustInt(t, o.OrderID), Ref: "pay_late"})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("the refund's event = %d; want 200", res.StatusCode)
	}
	testenv.WaitFor(t, 30*time.Second, "the metrics saying no refund waits", func() bool {
		waiting, ok := gauge(t, a, "seckill_refunds_waiting")
		return ok && waiting == 0
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("order id %q: %v", s, err)
	}
	return n
}

// gauge returns the value of the metric name (a gauge or counter without
// labels) in a's registry, and whether it is there.
func gauge(t *testing.T, a *App, name string) (float64, bool) {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue(), true
		}
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}
