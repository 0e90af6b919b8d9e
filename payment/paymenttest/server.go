// Package paymenttest is a fake payment provider for tests: an HTTP server
// that takes charges as payment.Webhook makes them, keeping one payment per
// idempotency key, and sends webhook events signed as a real provider
// would, or forged, old or replayed, as an attacker would.
package paymenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
)

// Server is a fake payment provider. Its URL is a payment.Config's BaseURL;
// it signs events with the secret it was made with.
type Server struct {
	// URL is the provider's API, for payment.Config.BaseURL.
	URL string

	srv       *httptest.Server
	secret    []byte
	transport *http.Transport
	client    *http.Client

	mu       sync.Mutex
	byKey    map[string]*Charge
	refunds  map[string]string // Idempotency-Key → payment refunded
	charges  []*Charge
	requests int
	// refundRequests counts the refund requests, refused or not;
	// refuseRefunds is how many more to refuse.
	refundRequests, refuseRefunds int
	events                        int
	fail                          int
	failPaid                      bool
	last                          *http.Request
	lastBody                      []byte
}

// Charge is a payment the server took.
type Charge struct {
	// Key is the request's Idempotency-Key.
	Key string
	// ID is the payment's id, "pay_<n>", and URL where the buyer pays.
	ID, URL string
	// The ids of the charge's body, as sent.
	OrderID, UserID, VoucherID string
	// Amount and Currency are what the charge asked to take, as sent.
	Amount   int64
	Currency string
	// Authorization is the first request's Authorization header.
	Authorization string
	// Requests counts the requests that carried Key: 1, and one more for
	// each charge again of the same payment.
	Requests int
}

// NewServer starts a fake provider that signs its events with secret. It
// is closed when tb's test ends.
func NewServer(tb testing.TB, secret []byte) *Server {
	tb.Helper()
	s := &Server{secret: bytes.Clone(secret), byKey: make(map[string]*Charge), refunds: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL
	// A transport of its own, whose idle connections Close closes, so that
	// tests checking for leaked goroutines find none.
	s.transport = http.DefaultTransport.(*http.Transport).Clone()
	s.client = &http.Client{Transport: s.transport, Timeout: 30 * time.Second}
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server. It is safe to call twice.
func (s *Server) Close() {
	s.srv.Close()
	s.transport.CloseIdleConnections()
}

// Fail makes the server answer every charge from now on with status (0:
// charge again as usual). With charged, it takes the payment first, as a
// provider whose answer is lost on the way; without, it takes nothing.
func (s *Server) Fail(status int, charged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail, s.failPaid = status, charged
}

// Charges returns the payments taken, in the order they were first made.
func (s *Server) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Charge, len(s.charges))
	for i, c := range s.charges {
		out[i] = *c
	}
	return out
}

// Requests returns how many charge requests the server had, including
// those it failed and those that charged the same payment again.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// chargeBody is the body of a charge, as payment.Webhook sends it.
type chargeBody struct {
	OrderID   string `json:"orderId"`
	UserID    string `json:"userId"`
	VoucherID string `json:"voucherId"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if ref, ok := strings.CutPrefix(r.URL.Path, "/payments/"); ok && strings.HasSuffix(ref, "/refunds") && r.Method == http.MethodPost {
		s.refund(w, r, strings.TrimSuffix(ref, "/refunds"))
		return
	}
	if r.URL.Path != "/payments" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	var body chargeBody
	if r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&body); err != nil || body.OrderID == "" {
		http.Error(w, "the body must be a JSON object with an orderId", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "an Idempotency-Key header is required", http.StatusBadRequest)
		return
	}
	if s.fail != 0 && !s.failPaid {
		http.Error(w, "failing as told", s.fail)
		return
	}
	c, seen := s.byKey[key]
	status := http.StatusOK
	switch {
	case !seen:
		n := len(s.charges) + 1
		c = &Charge{
			Key:           key,
			ID:            "pay_" + strconv.Itoa(n),
			OrderID:       body.OrderID,
			UserID:        body.UserID,
			VoucherID:     body.VoucherID,
			Amount:        body.Amount,
			Currency:      body.Currency,
			Authorization: r.Header.Get("Authorization"),
		}
		c.URL = s.URL + "/checkout/" + c.ID
		s.byKey[key] = c
		s.charges = append(s.charges, c)
		status = http.StatusCreated
	case c.OrderID != body.OrderID || c.UserID != body.UserID || c.VoucherID != body.VoucherID ||
		c.Amount != body.Amount || c.Currency != body.Currency:
		// As Stripe does: a key names one request, and another request
		// under it is a client's bug, not a second payment.
		http.Error(w, "the Idempotency-Key was used with another request", http.StatusUnprocessableEntity)
		return
	}
	c.Requests++
	if s.fail != 0 {
		http.Error(w, "charged, then failing as told", s.fail)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"id": c.ID, "url": c.URL})
}

// refund takes a refund of the payment ref (any reference: a late
// payment's was made elsewhere), once per Idempotency-Key.
func (s *Server) refund(w http.ResponseWriter, r *http.Request, ref string) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "an Idempotency-Key header is required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundRequests++
	if s.refuseRefunds > 0 {
		s.refuseRefunds--
		http.Error(w, "refusing as told", http.StatusServiceUnavailable)
		return
	}
	status := http.StatusOK
	if _, seen := s.refunds[key]; !seen {
		s.refunds[key] = ref
		status = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"id": "re_" + ref, "payment": ref})
}

// RefuseRefunds makes the server answer the next n refund requests 503,
// refunding nothing: a provider that cannot take them now.
func (s *Server) RefuseRefunds(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseRefunds = n
}

// RefundRequests returns how many refund requests the server had,
// including those it refused and those that refunded the same payment
// again.
func (s *Server) RefundRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refundRequests
}

// Refunds returns the refunds the server took: Idempotency-Key → the
// payment refunded.
func (s *Server) Refunds() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.refunds)
}

// Event is a webhook event to send.
type Event struct {
	// ID is the event's id. Default "evt_<n>", a new one each send; give
	// one again to send a provider's retry of an event, signed anew.
	ID string
	// Type is seckill.PaymentSucceeded (the default) or
	// seckill.RefundSucceeded, or any other to test refusals.
	Type string
	// OrderID is the order paid. Default: that of the payment Ref, if
	// the server took it.
	OrderID int64
	// Ref is the payment's id.
	Ref string
	// Amount and Currency are what the payment took, as the event says.
	// Default: what the charge of Ref asked for, if the server took it.
	Amount   *int64
	Currency string
	// Unsaid sends the event without an amount or a currency, as a
	// provider that does not say them.
	Unsaid bool
}

// sendOptions are how a Send departs from a provider's signed event.
type sendOptions struct {
	at       time.Time
	secret   []byte
	tampered bool
}

// A SendOption makes a Send depart from what a provider sends.
type SendOption func(*sendOptions)

// SignedAt signs the event at t rather than now: an old timestamp.
func SignedAt(t time.Time) SendOption { return func(o *sendOptions) { o.at = t } }

// SignedWith signs the event with secret rather than the server's: a
// forger's signature.
func SignedWith(secret []byte) SendOption { return func(o *sendOptions) { o.secret = secret } }

// Tampered signs the event, then sends it for the next order id instead
// (OrderID + 1): a body changed on the way.
func Tampered() SendOption { return func(o *sendOptions) { o.tampered = true } }

// eventBody is a webhook's body, as payment.Webhook.Verify reads it.
type eventBody struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		OrderID  string `json:"orderId"`
		Ref      string `json:"ref"`
		Amount   *int64 `json:"amount,omitempty"`
		Currency string `json:"currency,omitempty"`
	} `json:"data"`
}

// Send posts ev, signed, to targetURL (the webhook route), as the
// provider would unless opts say otherwise, and returns the answer, whose
// Body the caller closes.
func (s *Server) Send(ctx context.Context, targetURL string, ev Event, opts ...SendOption) (*http.Response, error) {
	o := sendOptions{at: time.Now(), secret: s.secret}
	for _, opt := range opts {
		opt(&o)
	}
	s.mu.Lock()
	s.events++
	if ev.ID == "" {
		ev.ID = "evt_" + strconv.Itoa(s.events)
	}
	for _, c := range s.charges {
		if c.ID != ev.Ref {
			continue
		}
		if ev.OrderID == 0 {
			ev.OrderID, _ = strconv.ParseInt(c.OrderID, 10, 64)
		}
		if ev.Amount == nil {
			amount := c.Amount
			ev.Amount = &amount
		}
		if ev.Currency == "" {
			ev.Currency = c.Currency
		}
	}
	if ev.Unsaid {
		ev.Amount, ev.Currency = nil, ""
	}
	s.mu.Unlock()
	if ev.Type == "" {
		ev.Type = seckill.PaymentSucceeded
	}
	b := eventBody{ID: ev.ID, Type: ev.Type, Created: o.at.Unix()}
	b.Data.OrderID, b.Data.Ref = strconv.FormatInt(ev.OrderID, 10), ev.Ref
	b.Data.Amount, b.Data.Currency = ev.Amount, ev.Currency
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("paymenttest: %w", err)
	}
	sig := payment.Sign(o.secret, o.at, body)
	if o.tampered {
		b.Data.OrderID = strconv.FormatInt(ev.OrderID+1, 10)
		if body, err = json.Marshal(b); err != nil {
			return nil, fmt.Errorf("paymenttest: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, targetURL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("paymenttest: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, sig)
	s.mu.Lock()
	s.last, s.lastBody = req, body
	s.mu.Unlock()
	return s.do(req)
}

// Replay posts the last request Send made again, byte for byte, signature
// and all: a captured request replayed within the tolerance. The caller
// closes the answer's Body.
func (s *Server) Replay(ctx context.Context) (*http.Response, error) {
	s.mu.Lock()
	last, body := s.last, s.lastBody
	s.mu.Unlock()
	if last == nil {
		return nil, fmt.Errorf("paymenttest: Replay before any Send")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, last.URL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("paymenttest: %w", err)
	}
	req.Header = last.Header.Clone()
	return s.do(req)
}

func (s *Server) do(req *http.Request) (*http.Response, error) {
	res, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("paymenttest: sending the event: %w", err)
	}
	return res, nil
}
