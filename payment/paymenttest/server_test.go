package paymenttest_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/paymenttest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("paymenttest-secret-0123456789abcdef")

// post sends a charge request and returns the answer's status.
func post(t *testing.T, srv *paymenttest.Server, key, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func TestServerKeepsOnePaymentPerKey(t *testing.T) {
	defer http.DefaultClient.CloseIdleConnections()
	srv := paymenttest.NewServer(t, secret)
	const body = `{"orderId":"1","userId":"2","voucherId":"3"}`
	for _, tt := range []struct {
		name, key, body string
		want            int
	}{
		{"first", "1", body, http.StatusCreated},
		{"again", "1", body, http.StatusOK},
		{"another request under the key", "1", `{"orderId":"1","userId":"9","voucherId":"3"}`, http.StatusUnprocessableEntity},
		{"no key", "", body, http.StatusBadRequest},
		{"no order", "2", `{}`, http.StatusBadRequest},
	} {
		if got := post(t, srv, tt.key, tt.body); got != tt.want {
			t.Errorf("%s: answered %d; want %d", tt.name, got, tt.want)
		}
	}
	srv.Fail(http.StatusServiceUnavailable, false)
	if got := post(t, srv, "3", `{"orderId":"3"}`); got != http.StatusServiceUnavailable {
		t.Errorf("failing: answered %d; want 503", got)
	}
	if got := srv.Charges(); len(got) != 1 || got[0].ID != "pay_1" || got[0].Requests != 2 {
		t.Errorf("Charges() = %+v; want pay_1, asked twice", got)
	}
	if got := srv.Requests(); got != 6 {
		t.Errorf("Requests() = %d; want 6", got)
	}
}

// verified is what a route made of Verify had.
type verified struct {
	ev  seckill.PaymentEvent
	err error
}

func TestSendSignsAsAProvider(t *testing.T) {
	srv := paymenttest.NewServer(t, secret)
	now := time.Now()
	w, err := payment.New(payment.Config{BaseURL: srv.URL, Secret: secret, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan verified, 1)
	route := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := w.Verify(r.Header.Get(payment.SignatureHeader), body)
		got <- verified{ev, err}
		rw.WriteHeader(http.StatusNoContent)
	}))
	defer route.Close()
	c, err := w.Charge(t.Context(), &seckill.Order{ID: 41, UserID: 1, VoucherID: 2, Amount: 1250, Currency: "CNY"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(ev paymenttest.Event, opts ...paymenttest.SendOption) verified {
		t.Helper()
		res, err := srv.Send(t.Context(), route.URL, ev, opts...)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return <-got
	}
	// By default the event says what the charge of its Ref took.
	want := seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 41, Ref: c.Ref, At: now.Truncate(time.Second), Currency: "CNY"}
	took := func(ev seckill.PaymentEvent, amount int64) bool {
		a := ev.Amount
		ev.Amount = nil
		return a != nil && *a == amount && ev == want
	}
	if v := send(paymenttest.Event{Ref: c.Ref}, paymenttest.SignedAt(now)); v.err != nil || !took(v.ev, 1250) {
		t.Errorf("Send(): the route verified %+v, %v; want %+v of 1250", v.ev, v.err, want)
	}
	res, err := srv.Replay(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if v := <-got; v.err != nil || !took(v.ev, 1250) {
		t.Errorf("Replay(): the route verified %+v, %v; want %+v again", v.ev, v.err, want)
	}
	// An event may say another amount than the charge's, or none.
	less := int64(1000)
	want.ID = "evt_2"
	if v := send(paymenttest.Event{Ref: c.Ref, Amount: &less}, paymenttest.SignedAt(now)); v.err != nil || !took(v.ev, 1000) {
		t.Errorf("Send(Amount 1000): the route verified %+v, %v; want %+v of 1000", v.ev, v.err, want)
	}
	if v := send(paymenttest.Event{Ref: c.Ref, Unsaid: true}, paymenttest.SignedAt(now)); v.err != nil || v.ev.Amount != nil || v.ev.Currency != "" {
		t.Errorf("Send(Unsaid): the route verified %+v, %v; want no amount nor currency", v.ev, v.err)
	}
	for name, opt := range map[string]paymenttest.SendOption{
		"Tampered":   paymenttest.Tampered(),
		"SignedWith": paymenttest.SignedWith([]byte("not-the-secret-0123456789abcdef-0123")),
		"SignedAt":   paymenttest.SignedAt(now.Add(-time.Hour)),
	} {
		if v := send(paymenttest.Event{Ref: c.Ref}, opt); !errors.Is(v.err, seckill.ErrBadSignature) {
			t.Errorf("Send(%s): the route verified %+v, %v; want ErrBadSignature", name, v.ev, v.err)
		}
	}
}
