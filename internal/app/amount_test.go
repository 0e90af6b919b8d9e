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
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/paymenttest"
)

// TestPaymentAmounts runs the whole service against the fake provider's
// server: an order of a voucher priced 1250 CNY owes 1250 CNY, and pay
// asks the provider for that; an event that says the provider took 1000
// does not pay it, and is recorded, counted and listed for the admin; the
// right event pays it. A free voucher's order is paid when its buyer pays,
// and the provider is not asked.
func TestPaymentAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBackend(t)
	cfg := b.config(t, seckill.ModeSync)
	secret := []byte("amount-test-secret-of-32-bytes-at-least")
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
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	admin := mint(t, cfg.Tokens, auth.Identity{UserID: 1, Admin: true})
	buyer := mint(t, cfg.Tokens, auth.Identity{UserID: 42})
	now := time.Now().UTC()
	voucher := func(title string, price int64) string {
		var v struct{ ID string }
		call(t, a, http.MethodPost, "/api/admin/vouchers", admin, map[string]any{
			"title": title, "stock": 1, "beginTime": now.Add(-time.Minute), "endTime": now.Add(time.Hour), "payWithinSeconds": 600,
			"price": price, "currency": "CNY",
		}, http.StatusCreated, &v)
		return v.ID
	}
	type order struct {
		OrderID, Status, Currency, PaymentRef string
		Amount                                int64
	}
	var o order
	call(t, a, http.MethodPost, "/api/vouchers/"+voucher("priced", 1250)+"/seckill", buyer, nil, http.StatusOK, &o)
	call(t, a, http.MethodGet, "/api/orders/"+o.OrderID, buyer, nil, http.StatusOK, &o)
	if o.Amount != 1250 || o.Currency != "CNY" {
		t.Fatalf("the order owes %d %s; want 1250 CNY", o.Amount, o.Currency)
	}
	call(t, a, http.MethodPost, "/api/orders/"+o.OrderID+"/pay", buyer, nil, http.StatusAccepted, nil)
	charges := provider.Charges()
	if len(charges) != 1 || charges[0].OrderID != o.OrderID || charges[0].Amount != 1250 || charges[0].Currency != "CNY" {
		t.Fatalf("the provider took %+v; want one charge of order %s for 1250 CNY", charges, o.OrderID)
	}

	send := func(ev paymenttest.Event, want seckill.OrderStatus) {
		t.Helper()
		res, err := provider.Send(ctx, srv.URL+"/api/payments/webhook", ev)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got order
		json.NewDecoder(res.Body).Decode(&got)
		if res.StatusCode != http.StatusOK || got.Status != string(want) {
			t.Errorf("event %s = %d %s; want 200 %s", ev.ID, res.StatusCode, got.Status, want)
		}
	}
	less := int64(1000)
	send(paymenttest.Event{ID: "evt_less", Ref: charges[0].ID, Amount: &less}, seckill.OrderCreated)
	send(paymenttest.Event{ID: "evt_unsaid", Ref: charges[0].ID, Unsaid: true}, seckill.OrderCreated)
	call(t, a, http.MethodGet, "/api/orders/"+o.OrderID, buyer, nil, http.StatusOK, &o)
	if o.Status != string(seckill.OrderCreated) {
		t.Fatalf("after the refused events the order is %s; want created", o.Status)
	}
	var refused struct {
		Refused []struct {
			EventID, OrderID, Expected, Received, Reason string
		}
	}
	call(t, a, http.MethodGet, "/api/admin/payments/refused", admin, nil, http.StatusOK, &refused)
	got := map[string]string{}
	for _, r := range refused.Refused {
		got[r.EventID] = r.OrderID + " " + r.Reason + " expected " + r.Expected + ", received " + r.Received
	}
	want := map[string]string{
		"evt_less":   o.OrderID + " amount_mismatch expected 12.50 CNY, received 10.00 CNY",
		"evt_unsaid": o.OrderID + " amount_missing expected 12.50 CNY, received ",
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("refused %s: %q; want %q", id, got[id], w)
		}
	}
	if n, _ := gauge(t, a, "seckill_payment_events_refused_total"); n != 2 {
		t.Errorf("seckill_payment_events_refused_total = %v; want 2", n)
	}
	send(paymenttest.Event{ID: "evt_right", Ref: charges[0].ID}, seckill.OrderPaid)

	requests := provider.Requests()
	call(t, a, http.MethodPost, "/api/vouchers/"+voucher("free", 0)+"/seckill", buyer, nil, http.StatusOK, &o)
	call(t, a, http.MethodPost, "/api/orders/"+o.OrderID+"/pay", buyer, nil, http.StatusOK, &o)
	if o.Status != string(seckill.OrderPaid) || o.Amount != 0 || o.Currency != "CNY" || o.PaymentRef != seckill.FreeRefPrefix+o.OrderID {
		t.Errorf("the free order paid = %+v; want paid, 0 CNY, ref %s%s", o, seckill.FreeRefPrefix, o.OrderID)
	}
	if n := provider.Requests(); n != requests {
		t.Errorf("paying the free order sent the provider %d requests; want none", n-requests)
	}
}
