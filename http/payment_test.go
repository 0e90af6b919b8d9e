package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// fakePayments is the payment service: orders by id, with their owner.
type fakePayments struct {
	calls
	orders map[int64]*seckill.Order
	// started makes Pay start the payment (202) rather than pay.
	started bool
	// err, if set, is every call's answer.
	err error
}

func (f *fakePayments) own(userID, id int64) (*seckill.Order, error) {
	if f.err != nil {
		return nil, f.err
	}
	o, ok := f.orders[id]
	if !ok || o.UserID != userID {
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", id)
	}
	return o, nil
}

func (f *fakePayments) Pay(_ context.Context, userID, id int64) (*seckill.PayResult, error) {
	f.add(fmt.Sprintf("pay %d %d", userID, id))
	o, err := f.own(userID, id)
	switch {
	case err != nil:
		return nil, err
	case o.Status.Cancelled():
		return nil, &seckill.Error{Kind: seckill.ErrOrderCancelled, Message: "cancelled", OrderID: id}
	case f.started:
		return &seckill.PayResult{Order: o, Started: true, Charge: seckill.Charge{Ref: "pay_1", URL: "https://pay.example/pay_1"}}, nil
	}
	o.Status, o.PaidAt, o.PaymentRef = seckill.OrderPaid, fakeNow, "fake_1"
	return &seckill.PayResult{Order: o}, nil
}

func (f *fakePayments) Cancel(_ context.Context, userID, id int64) (*seckill.Order, error) {
	f.add(fmt.Sprintf("cancel %d %d", userID, id))
	o, err := f.own(userID, id)
	switch {
	case err != nil:
		return nil, err
	case o.Status == seckill.OrderPaid:
		return nil, &seckill.Error{Kind: seckill.ErrOrderPaid, Message: "paid", OrderID: id}
	}
	o.Status, o.CancelledAt, o.Reason = seckill.OrderCancelled, fakeNow, seckill.ReasonBuyerCancelled
	return o, nil
}

func (f *fakePayments) Confirm(_ context.Context, ev seckill.PaymentEvent) (*seckill.Order, error) {
	f.add("confirm " + ev.ID)
	o, ok := f.orders[ev.OrderID]
	if !ok {
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", ev.OrderID)
	}
	o.Status = seckill.OrderPaid
	return o, nil
}

// fakeWebhook takes a signature "good" and nothing else.
type fakeWebhook struct{ orderID int64 }

func (f fakeWebhook) Verify(header string, body []byte) (seckill.PaymentEvent, error) {
	if header != "good" {
		return seckill.PaymentEvent{}, fmt.Errorf("signature %q: %w", header, seckill.ErrBadSignature)
	}
	return seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: f.orderID, Ref: string(body)}, nil
}

// paymentEnv is a fakeEnv whose buyer (user 2) holds order 7, created with
// a deadline, and user 3 order 8.
func paymentEnv(t *testing.T, started bool) (*fakeEnv, *fakePayments) {
	t.Helper()
	pays := &fakePayments{started: started, orders: map[int64]*seckill.Order{
		7: {ID: 7, UserID: 2, VoucherID: 1, Status: seckill.OrderCreated, CreatedAt: fakeNow, PayBy: fakeNow.Add(20 * time.Second), Amount: 1250, Currency: "CNY"},
		8: {ID: 8, UserID: 3, VoucherID: 1, Status: seckill.OrderCreated, CreatedAt: fakeNow, Amount: 1250, Currency: "CNY"},
	}}
	e := newFakeEnv(t, fakeOptions{edit: func(s *Services) {
		s.Payments = pays
		s.Webhook = fakeWebhook{orderID: 7}
	}})
	return e, pays
}

func TestPayAndCancelRoutes(t *testing.T) {
	t.Parallel()
	t.Run("pay", func(t *testing.T) {
		e, _ := paymentEnv(t, false)
		res := e.do("POST", "/api/orders/7/pay", e.buyer, nil)
		if res.status != 200 || res.body["status"] != "paid" || res.body["paymentRef"] != "fake_1" || res.body["payBy"] == nil {
			t.Fatalf("pay = %d %s, want 200 paid with its ref and payBy", res.status, res.raw)
		}
		e.wantError(e.do("POST", "/api/orders/7/cancel", e.buyer, nil), 409, "order_paid")
	})
	t.Run("started", func(t *testing.T) {
		e, _ := paymentEnv(t, true)
		res := e.do("POST", "/api/orders/7/pay", e.buyer, nil)
		if res.status != 202 || res.body["status"] != "created" || res.body["paymentRef"] != "pay_1" || res.body["payUrl"] != "https://pay.example/pay_1" {
			t.Fatalf("pay = %d %s, want 202 with the provider's reference and URL", res.status, res.raw)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		e, _ := paymentEnv(t, false)
		res := e.do("POST", "/api/orders/7/cancel", e.buyer, nil)
		if res.status != 200 || res.body["status"] != "cancelled" || res.body["cancelledAt"] == nil || res.body["reason"] != seckill.ReasonBuyerCancelled {
			t.Fatalf("cancel = %d %s, want 200 cancelled", res.status, res.raw)
		}
		res = e.do("POST", "/api/orders/7/pay", e.buyer, nil)
		e.wantError(res, 409, "order_cancelled")
		if res.body["orderId"] != "7" {
			t.Errorf("order_cancelled names order %v, want 7", res.body["orderId"])
		}
	})
	t.Run("another buyer's order", func(t *testing.T) {
		e, pays := paymentEnv(t, false)
		e.wantError(e.do("POST", "/api/orders/8/pay", e.buyer, nil), 404, "order_not_found")
		e.wantError(e.do("POST", "/api/orders/8/cancel", e.buyer, nil), 404, "order_not_found")
		if pays.orders[8].Status != seckill.OrderCreated {
			t.Errorf("another buyer's order became %s", pays.orders[8].Status)
		}
	})
	t.Run("no token", func(t *testing.T) {
		e, pays := paymentEnv(t, false)
		e.wantError(e.do("POST", "/api/orders/7/pay", "", nil), 401, "unauthorized")
		if got := pays.all(); len(got) > 0 {
			t.Errorf("a request without a token reached the payments: %q", got)
		}
	})
	for _, c := range []struct {
		err    error
		status int
		code   string
		retry  bool
	}{
		{&seckill.Error{Kind: seckill.ErrOrderPending, Message: "not yet", RetryAfter: time.Second}, 409, "order_pending", true},
		{seckill.Errorf(seckill.ErrOrderFailed, "failed"), 409, "order_failed", false},
		{seckill.Errorf(seckill.ErrNoDeadline, "none"), 409, "no_payment_deadline", false},
		{fmt.Errorf("charge: %w", seckill.ErrUnavailable), 503, "unavailable", true},
		{errors.New("boom"), 500, "internal", false},
	} {
		t.Run(c.code, func(t *testing.T) {
			e, pays := paymentEnv(t, false)
			pays.err = c.err
			res := e.do("POST", "/api/orders/7/pay", e.buyer, nil)
			e.wantError(res, c.status, c.code)
			if got := res.header.Get("Retry-After") != ""; got != c.retry {
				t.Errorf("Retry-After %q, want one: %v", res.header.Get("Retry-After"), c.retry)
			}
		})
	}
}

func TestPaymentWebhookRoute(t *testing.T) {
	t.Parallel()
	e, pays := paymentEnv(t, false)
	req := func(signature string) response {
		t.Helper()
		return e.doSigned("/api/payments/webhook", signature, `{"id":"evt_1","type":"payment.succeeded","created":1,"data":{"orderId":"7","ref":"pay_1"}}`)
	}
	e.wantError(req(""), 401, "bad_signature")
	e.wantError(req("forged"), 401, "bad_signature")
	if got := pays.all(); len(got) > 0 {
		t.Errorf("refused events reached the payments: %q", got)
	}
	if res := req("good"); res.status != 200 || res.body["status"] != "paid" || res.body["orderId"] != "7" {
		t.Fatalf("a signed event = %d %s, want 200 with the order paid", res.status, res.raw)
	}
	if got := pays.all(); len(got) != 1 || got[0] != "confirm evt_1" {
		t.Errorf("payments saw %q, want the one event", got)
	}
	off := newFakeEnv(t)
	off.wantError(off.doSigned("/api/payments/webhook", "good", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":"7"}}`), http.StatusServiceUnavailable, "unavailable")
}
