package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/paymenttest"
)

// newWebhook returns a Webhook for the provider at baseURL, on the clock.
func newWebhook(t testing.TB, baseURL string, c payment.Config) *payment.Webhook {
	t.Helper()
	c.BaseURL, c.Secret = baseURL, secret
	w, err := payment.New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

var order = &seckill.Order{ID: 123456789012345678, UserID: 1001, VoucherID: 7, Amount: 1250, Currency: "CNY"}

func TestChargeStartsAPayment(t *testing.T) {
	srv := paymenttest.NewServer(t, secret)
	w := newWebhook(t, srv.URL, payment.Config{APIKey: "sk_test_1"})
	if got := w.Name(); got != "webhook" {
		t.Errorf("Name() = %q, want webhook", got)
	}
	got, err := w.Charge(t.Context(), order)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	want := seckill.Charge{Ref: "pay_1", URL: srv.URL + "/checkout/pay_1"}
	if got != want {
		t.Errorf("Charge() = %+v, want %+v", got, want)
	}
	wantCharges := []paymenttest.Charge{{
		Key: "123456789012345678", ID: "pay_1", URL: want.URL,
		OrderID: "123456789012345678", UserID: "1001", VoucherID: "7", Amount: 1250, Currency: "CNY",
		Authorization: "Bearer sk_test_1", Requests: 1,
	}}
	if diff := cmp.Diff(wantCharges, srv.Charges()); diff != "" {
		t.Errorf("the provider's charges differ (-want +got):\n%s", diff)
	}
}

// TestChargeTwiceChargesOnce charges one order many times at once, and
// again after the provider charged it but its answer was lost: the
// provider takes one payment, and every charge that succeeds has its
// reference.
func TestChargeTwiceChargesOnce(t *testing.T) {
	srv := paymenttest.NewServer(t, secret)
	w := newWebhook(t, srv.URL, payment.Config{})

	srv.Fail(http.StatusBadGateway, true)
	if _, err := w.Charge(t.Context(), order); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("Charge with the answer lost = %v; want ErrUnavailable", err)
	}
	srv.Fail(0, false)

	const n = 16
	var wg sync.WaitGroup
	refs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var c seckill.Charge
			c, errs[i] = w.Charge(context.Background(), order)
			refs[i] = c.Ref
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || refs[i] != "pay_1" {
			t.Errorf("charge %d: Ref %q, %v; want pay_1, nil", i, refs[i], errs[i])
		}
	}
	other, err := w.Charge(t.Context(), &seckill.Order{ID: order.ID + 1, UserID: 1002, VoucherID: 7})
	if err != nil || other.Ref != "pay_2" {
		t.Errorf("Charge(another order) = %+v, %v; want pay_2", other, err)
	}
	charges := srv.Charges()
	if len(charges) != 2 || charges[0].Requests != n+1 || charges[1].Requests != 1 {
		t.Errorf("the provider took %+v; want pay_1 asked %d times and pay_2 once", charges, n+1)
	}
	if got := srv.Requests(); got != n+2 {
		t.Errorf("the provider had %d requests; want %d", got, n+2)
	}
}

// TestChargeFailures checks that every way a provider can fail a charge
// is ErrUnavailable, with a message for the buyer that tells nothing of
// the provider, and a message for the log that names its host but not
// the rest of its URL.
func TestChargeFailures(t *testing.T) {
	answers := map[string]struct {
		h http.HandlerFunc
		// log is what the error says, for the log.
		log string
	}{
		"500": {func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "oops", http.StatusInternalServerError)
		}, "answered 500 Internal Server Error"},
		"202": {func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"pay_1"}`)
		}, "answered 202 Accepted"},
		"not JSON": {func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `<html>maintenance</html>`)
		}, "not a payment"},
		"no id": {func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"url":"https://pay.example/checkout/1"}`)
		}, `payment id ""`},
		"id too long": {func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"id":%q}`, strings.Repeat("p", payment.MaxRefLen+1))
		}, "not 1 to 255 printable ASCII bytes"},
		"a script for a URL": {func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"id":"pay_1","url":"javascript:alert(1)"}`)
		}, "not an absolute http(s) URL"},
		"a relative URL": {func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"id":"pay_1","url":"/checkout/1"}`)
		}, "not an absolute http(s) URL"},
		"too long an answer": {func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"id":"pay_1","x":%q}`, strings.Repeat("x", 64<<10))
		}, "more than 65536 bytes"},
		"timeout": {func(w http.ResponseWriter, r *http.Request) {
			// Once the body is read, the server watches the connection,
			// and the request's context ends when the client gives up.
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, "Client.Timeout exceeded"},
	}
	for name, a := range answers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(a.h)
			defer srv.Close()
			client := &http.Client{Timeout: payment.DefaultTimeout}
			if name == "timeout" {
				client.Timeout = 200 * time.Millisecond
			}
			w := newWebhook(t, srv.URL+"/v1?token=s3cret", payment.Config{Client: client})
			if err := checkUnavailable(t, w, srv.Listener.Addr().String()); !strings.Contains(err.Error(), a.log) {
				t.Errorf("Charge(): %v; want it to say %q", err, a.log)
			}
			client.CloseIdleConnections()
		})
	}
	t.Run("redirect", func(t *testing.T) {
		// The default client follows no redirect: it would post the
		// charge, and the API key, elsewhere.
		elsewhere := paymenttest.NewServer(t, secret)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/payments", http.StatusTemporaryRedirect)
		}))
		defer srv.Close()
		w := newWebhook(t, srv.URL+"/v1?token=s3cret", payment.Config{APIKey: "sk_test_1"})
		checkUnavailable(t, w, srv.Listener.Addr().String())
		if n := elsewhere.Requests(); n != 0 {
			t.Errorf("the redirect's target had %d requests; want 0", n)
		}
	})
	t.Run("no server", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		w := newWebhook(t, srv.URL+"/v1?token=s3cret", payment.Config{})
		checkUnavailable(t, w, srv.Listener.Addr().String())
	})
	t.Run("context cancelled", func(t *testing.T) {
		srv := paymenttest.NewServer(t, secret)
		w := newWebhook(t, srv.URL+"/v1?token=s3cret", payment.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := w.Charge(ctx, order)
		if !errors.Is(err, seckill.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("Charge(cancelled) = %v; want ErrUnavailable and context.Canceled", err)
		}
		if n := srv.Requests(); n != 0 {
			t.Errorf("the provider had %d requests; want 0", n)
		}
	})
}

// checkUnavailable charges order with w, checks the error and returns it.
func checkUnavailable(t *testing.T, w *payment.Webhook, host string) error {
	t.Helper()
	c, err := w.Charge(t.Context(), order)
	if !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("Charge() = %+v, %v; want ErrUnavailable", c, err)
	}
	if c != (seckill.Charge{}) {
		t.Errorf("Charge() = %+v with its error; want no charge", c)
	}
	var de *seckill.Error
	if !errors.As(err, &de) || strings.Contains(de.Message, host) {
		t.Errorf("Charge(): %v: want a client message without the provider's host", err)
	}
	if msg := err.Error(); !strings.Contains(msg, host) || strings.Contains(msg, "s3cret") {
		t.Errorf("Charge(): %q; want the host %s and not the URL's token", msg, host)
	}
	return err
}

// receiver is a webhook route as the HTTP layer would write one: it
// believes only a verified body, and answers each error with its status.
type receiver struct {
	w *payment.Webhook

	mu     sync.Mutex
	events []seckill.PaymentEvent
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ev, err := rc.w.Verify(r.Header.Get(payment.SignatureHeader), body)
	switch {
	case errors.Is(err, seckill.ErrBadSignature):
		http.Error(w, err.Error(), http.StatusUnauthorized)
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		rc.mu.Lock()
		rc.events = append(rc.events, ev)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}

// TestWebhookFromTheProvider sends paymenttest's events, as a provider and
// as an attacker would, to a route that verifies them.
func TestWebhookFromTheProvider(t *testing.T) {
	srv := paymenttest.NewServer(t, secret)
	w := newWebhook(t, srv.URL, payment.Config{})
	rc := &receiver{w: w}
	route := httptest.NewServer(rc)
	defer route.Close()
	c, err := w.Charge(t.Context(), order)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}

	send := func(name string, want int, ev paymenttest.Event, opts ...paymenttest.SendOption) {
		t.Helper()
		res, err := srv.Send(t.Context(), route.URL, ev, opts...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		msg, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: answered %s %s; want %d", name, res.Status, msg, want)
		}
	}
	send("tampered", http.StatusUnauthorized, paymenttest.Event{Ref: c.Ref}, paymenttest.Tampered())
	send("forged", http.StatusUnauthorized, paymenttest.Event{Ref: c.Ref}, paymenttest.SignedWith(otherSecret))
	send("old", http.StatusUnauthorized, paymenttest.Event{Ref: c.Ref}, paymenttest.SignedAt(time.Now().Add(-payment.DefaultTolerance-time.Minute)))
	send("unknown type", http.StatusBadRequest, paymenttest.Event{Ref: c.Ref, Type: "payment.failed"})
	send("paid", http.StatusNoContent, paymenttest.Event{Ref: c.Ref})
	// A replay within the tolerance passes Verify: the event's id, the
	// same as the first's, is how the service tells it (RecordPaymentEvent).
	res, err := srv.Replay(t.Context())
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Errorf("Replay: answered %s; want 204", res.Status)
	}
	send("retried", http.StatusNoContent, paymenttest.Event{ID: "evt_5", Ref: c.Ref})
	send("refunded", http.StatusNoContent, paymenttest.Event{Type: seckill.RefundSucceeded, Ref: c.Ref})

	// The events say what the charge took, as the provider's server does.
	amount := order.Amount
	paid := seckill.PaymentEvent{ID: "evt_5", Type: seckill.PaymentSucceeded, OrderID: order.ID, Ref: "pay_1", Amount: &amount, Currency: "CNY"}
	refunded := seckill.PaymentEvent{ID: "evt_7", Type: seckill.RefundSucceeded, OrderID: order.ID, Ref: "pay_1", Amount: &amount, Currency: "CNY"}
	want := []seckill.PaymentEvent{paid, paid, paid, refunded}
	rc.mu.Lock()
	got := rc.events
	rc.mu.Unlock()
	// At is the time of signing, now give or take the test's run.
	ignoreAt := cmp.Comparer(func(a, b time.Time) bool { return a.Sub(b).Abs() < time.Minute })
	for i := range want {
		want[i].At = time.Now()
	}
	if diff := cmp.Diff(want, got, ignoreAt); diff != "" {
		t.Errorf("the route's events differ (-want +got):\n%s", diff)
	}
}

// TestRefundAsksOnce: a late payment's refund is asked of the provider
// under one idempotency key however often, is confirmed later (done
// false), and a provider that does not answer leaves it to be asked again.
func TestRefundAsksOnce(t *testing.T) {
	srv := paymenttest.NewServer(t, secret)
	w := newWebhook(t, srv.URL, payment.Config{})
	late := *order
	late.PaymentRef = "pay_late"
	for range 3 {
		done, err := w.Refund(t.Context(), &late)
		if err != nil || done {
			t.Fatalf("Refund = %v, %v; want asked, not done", done, err)
		}
	}
	if diff := cmp.Diff(map[string]string{"refund_123456789012345678": "pay_late"}, srv.Refunds()); diff != "" {
		t.Errorf("the provider's refunds (-want +got):\n%s", diff)
	}
	if _, err := w.Refund(t.Context(), order); err == nil {
		t.Error("Refund of an order without a payment reference: no error")
	}
	srv.Close()
	if _, err := w.Refund(t.Context(), &late); !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("Refund with the provider gone = %v, want ErrUnavailable", err)
	}
}
