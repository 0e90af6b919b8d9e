package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
)

// SignatureHeader is the header of a webhook request that carries its
// signature: "t=<unix seconds>,v1=<hex HMAC-SHA256>", Stripe's scheme.
const SignatureHeader = "Payment-Signature"

// maxTimestamp bounds a signed timestamp (year 36812): time arithmetic on
// larger ones would overflow.
const maxTimestamp = 1 << 40

// Sign returns the value of SignatureHeader for body signed with secret at
// t: "t=<t in Unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">". The
// timestamp is signed with the body so that a receiver that refuses old
// timestamps refuses old requests replayed.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is the HMAC-SHA256, keyed with secret, of ts, ".", and body.
func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// eventBody is a webhook's body.
type eventBody struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Created is when the provider made the event; PaymentEvent.At is
	// when it signed it, which Verify has checked.
	Created int64 `json:"created"`
	Data    struct {
		OrderID string `json:"orderId"`
		Ref     string `json:"ref"`
		// Amount and Currency are what a payment took, in the currency's
		// minor units: the service refuses a payment that does not say
		// them, or took other than its order owes.
		Amount   *int64 `json:"amount"`
		Currency string `json:"currency"`
	} `json:"data"`
}

// maxCurrencyLen bounds an event's currency: longer is no ISO 4217 code,
// and is refused as unreadable rather than recorded.
const maxCurrencyLen = 16

// Verify checks a webhook request's signature, the value of its
// SignatureHeader header, against its body, and returns the event the body
// holds, its At the signed time.
//
// The header must hold one timestamp t and at least one v1 signature (a
// provider rotating its secret sends one for each); other schemes are
// ignored. One v1 must be the HMAC-SHA256 of "<t>.<body>" keyed with the
// secret, compared in constant time, and t must be within the Tolerance of
// now, either way. Every failure of these wraps seckill.ErrBadSignature,
// with the reason for the log (a client is told only "bad signature").
//
// A signed body that is not an event this service takes (malformed JSON,
// an unknown type, a missing id, order id or reference) wraps
// seckill.ErrInvalidArgument.
func (w *Webhook) Verify(header string, body []byte) (seckill.PaymentEvent, error) {
	ts, sigs, err := parseSignature(header)
	if err != nil {
		return seckill.PaymentEvent{}, fmt.Errorf("payment webhook: %w: %s", seckill.ErrBadSignature, err)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 || sec > maxTimestamp {
		return seckill.PaymentEvent{}, fmt.Errorf("payment webhook: %w: timestamp %.32q is not a time in Unix seconds", seckill.ErrBadSignature, ts)
	}
	want := mac(w.secret, ts, body)
	ok := false
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return seckill.PaymentEvent{}, fmt.Errorf("payment webhook: %w: no v1 signature of the %d matches the body", seckill.ErrBadSignature, len(sigs))
	}
	// Checked after the signature, so that the log tells a forged request
	// from an old one.
	at := time.Unix(sec, 0)
	if d := w.now().Sub(at); d.Abs() > w.tolerance {
		return seckill.PaymentEvent{}, fmt.Errorf("payment webhook: %w: signed at %v, %v from now, beyond the tolerance of %v", seckill.ErrBadSignature, at.UTC(), d.Round(time.Second), w.tolerance)
	}
	return parseEvent(body, at)
}

// parseSignature returns the timestamp and the v1 signatures of a
// SignatureHeader value.
func parseSignature(header string) (ts string, sigs []string, err error) {
	if header == "" {
		return "", nil, fmt.Errorf("no %s header", SignatureHeader)
	}
	haveTS := false
	for item := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
		switch k {
		case "t":
			if haveTS {
				return "", nil, fmt.Errorf("%s has more than one timestamp", SignatureHeader)
			}
			ts, haveTS = v, true
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if !haveTS {
		return "", nil, fmt.Errorf("%s has no timestamp", SignatureHeader)
	}
	if len(sigs) == 0 {
		return "", nil, fmt.Errorf("%s has no v1 signature", SignatureHeader)
	}
	return ts, sigs, nil
}

// parseEvent returns the event of a webhook's body, signed at at.
func parseEvent(body []byte, at time.Time) (seckill.PaymentEvent, error) {
	var b eventBody
	if err := json.Unmarshal(body, &b); err != nil {
		return seckill.PaymentEvent{}, fmt.Errorf("payment webhook: %w: %w",
			seckill.Errorf(seckill.ErrInvalidArgument, "the event is not a JSON object of the expected shape"), err)
	}
	if !validRef(b.ID) {
		return seckill.PaymentEvent{}, seckill.Errorf(seckill.ErrInvalidArgument, "the event's id must be 1 to %d printable ASCII bytes", MaxRefLen)
	}
	if b.Type != seckill.PaymentSucceeded && b.Type != seckill.RefundSucceeded {
		return seckill.PaymentEvent{}, seckill.Errorf(seckill.ErrInvalidArgument, "event %s: type %.64q is not %s or %s", b.ID, b.Type, seckill.PaymentSucceeded, seckill.RefundSucceeded)
	}
	id, err := strconv.ParseInt(b.Data.OrderID, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != b.Data.OrderID {
		return seckill.PaymentEvent{}, seckill.Errorf(seckill.ErrInvalidArgument, "event %s: data.orderId %.32q is not an order id", b.ID, b.Data.OrderID)
	}
	if !validRef(b.Data.Ref) {
		return seckill.PaymentEvent{}, seckill.Errorf(seckill.ErrInvalidArgument, "event %s: data.ref must be 1 to %d printable ASCII bytes", b.ID, MaxRefLen)
	}
	if c := b.Data.Currency; c != "" && (len(c) > maxCurrencyLen || !validRef(c)) {
		return seckill.PaymentEvent{}, seckill.Errorf(seckill.ErrInvalidArgument, "event %s: data.currency must be at most %d printable ASCII bytes", b.ID, maxCurrencyLen)
	}
	return seckill.PaymentEvent{ID: b.ID, Type: b.Type, OrderID: id, Ref: b.Data.Ref, At: at, Amount: b.Data.Amount, Currency: b.Data.Currency}, nil
}
