package payment_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
)

var (
	secret      = []byte("payment-webhook-secret-0123456789abcdef")
	otherSecret = []byte("another-webhook-secret-0123456789abcdef")
	// now is the frozen clock of the Verify tests.
	now = time.Unix(1_800_000_000, 0)
)

// newVerifier returns a Webhook whose clock stands at now.
func newVerifier(t testing.TB, tolerance time.Duration) *payment.Webhook {
	t.Helper()
	w, err := payment.New(payment.Config{
		BaseURL:   "https://pay.example/v1",
		Secret:    secret,
		Tolerance: tolerance,
		Now:       func() time.Time { return now },
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

// eventJSON is a webhook body.
func eventJSON(id, typ, orderID, ref string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":%q,"created":%d,"data":{"orderId":%q,"ref":%q}}`,
		id, typ, now.Unix(), orderID, ref)
}

// v1 is the hex signature of body at t with key.
func v1(key []byte, t time.Time, body []byte) string {
	_, sig, _ := strings.Cut(payment.Sign(key, t, body), ",v1=")
	return sig
}

func TestSignFormat(t *testing.T) {
	// The HMAC-SHA256 of "1800000000.{}" keyed with secret, computed by
	// openssl: printf '1800000000.{}' | openssl dgst -sha256 -hmac "$secret".
	const want = "t=1800000000,v1=d308cff4c13711842013771148eba038fc4187a63b76fc729c28781068cb92f4"
	if got := payment.Sign(secret, now, []byte("{}")); got != want {
		t.Errorf("Sign() = %q, want %q", got, want)
	}
}

func TestVerifyAcceptsASignedEvent(t *testing.T) {
	w := newVerifier(t, 0)
	body := eventJSON("evt_1", seckill.PaymentSucceeded, "123456789012345678", "pay_1")
	refund := eventJSON("evt_2", seckill.RefundSucceeded, "5", "pay_2")
	priced := []byte(`{"id":"evt_3","type":"payment.succeeded","data":{"orderId":"5","ref":"pay_3","amount":1250,"currency":"CNY"}}`)
	amount := int64(1250)
	ts := strconv.FormatInt(now.Unix(), 10)
	tests := []struct {
		name   string
		header string
		body   []byte
		want   seckill.PaymentEvent
	}{
		{"as signed", payment.Sign(secret, now, body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now}},
		{"a refund", payment.Sign(secret, now, refund), refund,
			seckill.PaymentEvent{ID: "evt_2", Type: seckill.RefundSucceeded, OrderID: 5, Ref: "pay_2", At: now}},
		{"with what it took", payment.Sign(secret, now, priced), priced,
			seckill.PaymentEvent{ID: "evt_3", Type: seckill.PaymentSucceeded, OrderID: 5, Ref: "pay_3", At: now, Amount: &amount, Currency: "CNY"}},
		{"signed at the tolerance's start", payment.Sign(secret, now.Add(-payment.DefaultTolerance), body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now.Add(-payment.DefaultTolerance)}},
		{"signed at the tolerance's end", payment.Sign(secret, now.Add(payment.DefaultTolerance), body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now.Add(payment.DefaultTolerance)}},
		{"the valid v1 after an old secret's", "t=" + ts + ",v1=" + v1(otherSecret, now, body) + ",v1=" + v1(secret, now, body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now}},
		{"the valid v1 before a new secret's", "t=" + ts + ",v1=" + v1(secret, now, body) + ",v1=" + v1(otherSecret, now, body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now}},
		{"unknown schemes and spaces", "v0=abc, t=" + ts + " , v2=def,v1=" + v1(secret, now, body), body,
			seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: 123456789012345678, Ref: "pay_1", At: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := w.Verify(tt.header, tt.body)
			if err != nil {
				t.Fatalf("Verify(%q): %v", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Verify(): event differs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVerifyRefusesABadSignature(t *testing.T) {
	w := newVerifier(t, 0)
	body := eventJSON("evt_1", seckill.PaymentSucceeded, "42", "pay_1")
	ts := strconv.FormatInt(now.Unix(), 10)
	tampered := eventJSON("evt_1", seckill.PaymentSucceeded, "43", "pay_1")
	tooOld := now.Add(-payment.DefaultTolerance - time.Second)
	tooNew := now.Add(payment.DefaultTolerance + time.Second)
	tests := []struct {
		name   string
		header string
		body   []byte
	}{
		{"missing header", "", body},
		{"another secret", payment.Sign(otherSecret, now, body), body},
		{"tampered body", payment.Sign(secret, now, body), tampered},
		{"body with a byte more", payment.Sign(secret, now, body), append(body[:len(body):len(body)], ' ')},
		{"timestamp changed", "t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + v1(secret, now, body), body},
		{"older than the tolerance", payment.Sign(secret, tooOld, body), body},
		{"newer than the tolerance", payment.Sign(secret, tooNew, body), body},
		{"no timestamp", "v1=" + v1(secret, now, body), body},
		{"two timestamps", "t=" + ts + ",t=" + ts + ",v1=" + v1(secret, now, body), body},
		{"no v1", "t=" + ts, body},
		{"the signature under another scheme only", "t=" + ts + ",v0=" + v1(secret, now, body), body},
		{"v1 not hex", "t=" + ts + ",v1=zz" + v1(secret, now, body)[2:], body},
		{"v1 truncated", "t=" + ts + ",v1=" + v1(secret, now, body)[:62], body},
		{"v1 empty", "t=" + ts + ",v1=", body},
		{"timestamp not a number", "t=now,v1=" + v1(secret, now, body), body},
		{"timestamp negative", "t=-1,v1=" + v1(secret, time.Unix(-1, 0), body), body},
		{"timestamp beyond time's range", "t=9223372036854775807,v1=", body},
		{"not the scheme at all", "sha256=" + v1(secret, now, body), body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := w.Verify(tt.header, tt.body)
			if !errors.Is(err, seckill.ErrBadSignature) {
				t.Fatalf("Verify(%q) = %+v, %v; want an error wrapping ErrBadSignature", tt.header, ev, err)
			}
			if errors.Is(err, seckill.ErrInvalidArgument) {
				t.Errorf("Verify(): %v wraps ErrInvalidArgument too", err)
			}
			// The reason is for the log: a client is told the sentinel's
			// text, which it gets from no *seckill.Error.
			if de := (*seckill.Error)(nil); errors.As(err, &de) {
				t.Errorf("Verify(): %v carries a client message %q", err, de.Message)
			}
		})
	}
}

func TestVerifyRefusesASignedBadEvent(t *testing.T) {
	w := newVerifier(t, 0)
	tests := []struct {
		name string
		body string
	}{
		{"unknown type", string(eventJSON("evt_1", "charge.refunded", "42", "pay_1"))},
		{"no type", `{"id":"evt_1","data":{"orderId":"42","ref":"pay_1"}}`},
		{"not JSON", `id=evt_1`},
		{"not an object", `["evt_1"]`},
		{"trailing data", string(eventJSON("evt_1", seckill.PaymentSucceeded, "42", "pay_1")) + `{}`},
		{"no id", string(eventJSON("", seckill.PaymentSucceeded, "42", "pay_1"))},
		{"id with a space", string(eventJSON("evt 1", seckill.PaymentSucceeded, "42", "pay_1"))},
		{"order id a number", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":42,"ref":"pay_1"}}`},
		{"order id zero", string(eventJSON("evt_1", seckill.PaymentSucceeded, "0", "pay_1"))},
		{"order id negative", string(eventJSON("evt_1", seckill.PaymentSucceeded, "-42", "pay_1"))},
		{"order id with a sign", string(eventJSON("evt_1", seckill.PaymentSucceeded, "+42", "pay_1"))},
		{"order id with a leading zero", string(eventJSON("evt_1", seckill.PaymentSucceeded, "042", "pay_1"))},
		{"order id too big", string(eventJSON("evt_1", seckill.PaymentSucceeded, "9223372036854775808", "pay_1"))},
		{"no order id", `{"id":"evt_1","type":"payment.succeeded","data":{"ref":"pay_1"}}`},
		{"no ref", string(eventJSON("evt_1", seckill.PaymentSucceeded, "42", ""))},
		{"ref too long", string(eventJSON("evt_1", seckill.PaymentSucceeded, "42", strings.Repeat("p", payment.MaxRefLen+1)))},
		{"created a string", `{"id":"evt_1","type":"payment.succeeded","created":"now","data":{"orderId":"42","ref":"pay_1"}}`},
		{"amount a fraction", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":"42","ref":"pay_1","amount":12.5,"currency":"CNY"}}`},
		{"amount a string", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":"42","ref":"pay_1","amount":"1250","currency":"CNY"}}`},
		{"currency too long", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":"42","ref":"pay_1","amount":1250,"currency":"` + strings.Repeat("C", 17) + `"}}`},
		{"currency with a space", `{"id":"evt_1","type":"payment.succeeded","data":{"orderId":"42","ref":"pay_1","amount":1250,"currency":"C NY"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := w.Verify(payment.Sign(secret, now, []byte(tt.body)), []byte(tt.body))
			if !errors.Is(err, seckill.ErrInvalidArgument) {
				t.Fatalf("Verify(%s) = %+v, %v; want an error wrapping ErrInvalidArgument", tt.body, ev, err)
			}
			if errors.Is(err, seckill.ErrBadSignature) {
				t.Errorf("Verify(): %v wraps ErrBadSignature too", err)
			}
		})
	}
}

func TestVerifyTolerance(t *testing.T) {
	body := eventJSON("evt_1", seckill.PaymentSucceeded, "42", "pay_1")
	w := newVerifier(t, time.Minute)
	for _, tt := range []struct {
		at time.Time
		ok bool
	}{
		{now.Add(-time.Minute), true},
		{now.Add(time.Minute), true},
		{now.Add(-time.Minute - time.Second), false},
		{now.Add(time.Minute + time.Second), false},
		{now.Add(-payment.DefaultTolerance), false},
	} {
		_, err := w.Verify(payment.Sign(secret, tt.at, body), body)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, seckill.ErrBadSignature)) {
			t.Errorf("signed %v from now, tolerance 1m: Verify() = %v; want ok %v", tt.at.Sub(now), err, tt.ok)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := payment.New(payment.Config{BaseURL: "https://pay.example", Secret: secret[:payment.MinSecretLen]}); err != nil {
		t.Errorf("New with a %d-byte secret: %v", payment.MinSecretLen, err)
	}
	for name, c := range map[string]payment.Config{
		"short secret":       {BaseURL: "https://pay.example", Secret: secret[:payment.MinSecretLen-1]},
		"no secret":          {BaseURL: "https://pay.example"},
		"no base URL":        {Secret: secret},
		"relative base URL":  {BaseURL: "/v1", Secret: secret},
		"other scheme":       {BaseURL: "ftp://pay.example", Secret: secret},
		"negative tolerance": {BaseURL: "https://pay.example", Secret: secret, Tolerance: -time.Second},
	} {
		if w, err := payment.New(c); err == nil {
			t.Errorf("%s: New() = %v, nil; want an error", name, w)
		}
	}
}

// FuzzVerify checks that Verify never panics, refuses what it cannot
// read as one of its two errors, accepts only valid events, and that a
// body's own signature is never refused as bad while any change to the
// body is.
func FuzzVerify(f *testing.F) {
	body := eventJSON("evt_1", seckill.PaymentSucceeded, "42", "pay_1")
	ts := strconv.FormatInt(now.Unix(), 10)
	f.Add(payment.Sign(secret, now, body), body)
	f.Add("t="+ts+",v1="+v1(otherSecret, now, body)+",v1="+v1(secret, now, body), body)
	f.Add(payment.Sign(secret, now, body), eventJSON("evt_1", "x", "42", "pay_1"))
	f.Add("t=,v1=", []byte(`{}`))
	f.Add("t=1,t=2", []byte(`{"data":{"orderId":"-0"}}`))
	f.Add(",,,=,==", []byte(nil))
	f.Add("t=99999999999999999999,v1=00", []byte(`null`))
	w := newVerifier(f, 0)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		ev, err := w.Verify(header, body)
		switch {
		case err == nil:
			if ev.ID == "" || ev.OrderID <= 0 || ev.Ref == "" || (ev.Type != seckill.PaymentSucceeded && ev.Type != seckill.RefundSucceeded) {
				t.Errorf("Verify(%q, %q) accepted %+v", header, body, ev)
			}
		case errors.Is(err, seckill.ErrBadSignature) == errors.Is(err, seckill.ErrInvalidArgument):
			t.Errorf("Verify(%q, %q) = %v: wants exactly one of ErrBadSignature, ErrInvalidArgument", header, body, err)
		}
		_, err = w.Verify(payment.Sign(secret, now, body), body)
		if errors.Is(err, seckill.ErrBadSignature) {
			t.Errorf("Verify(its own signature, %q) = %v", body, err)
		}
		changed := append([]byte{'x'}, body...)
		if _, err := w.Verify(payment.Sign(secret, now, body), changed); !errors.Is(err, seckill.ErrBadSignature) {
			t.Errorf("Verify(the signature of %q, %q) = %v; want ErrBadSignature", body, changed, err)
		}
	})
}
