package http

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// PaymentService is what the pay, cancel and webhook routes call;
// *seckill.PaymentService is one.
type PaymentService interface {
	Pay(ctx context.Context, userID, orderID int64) (*seckill.PayResult, error)
	Cancel(ctx context.Context, userID, orderID int64) (*seckill.Order, error)
	Confirm(ctx context.Context, ev seckill.PaymentEvent) (*seckill.Order, error)
}

var _ PaymentService = (*seckill.PaymentService)(nil)

// PaymentWebhook checks a payment provider's signed request
// (payment.Webhook is one).
type PaymentWebhook interface {
	// Verify checks the signature header against the body, and returns the
	// event it carries: an error wrapping ErrBadSignature for a signature
	// missing, wrong or too old, ErrInvalidArgument for a body it cannot
	// read.
	Verify(header string, body []byte) (seckill.PaymentEvent, error)
}

// paymentSignatureHeader is the header of a payment provider's signature
// (payment.SignatureHeader).
const paymentSignatureHeader = "Payment-Signature"

// maxWebhookBody bounds a payment provider's event.
const maxWebhookBody = 64 << 10

// payJSON is the answer to a payment started with the provider (202).
type payJSON struct {
	orderJSON
	PaymentRef string `json:"paymentRef"`
	PayURL     string `json:"payUrl,omitempty"`
}

// orderToPay reads the order id of a pay or cancel route, and reports
// false, having answered, for a bad id or when payments are not served.
func (s *Server) orderToPay(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := parseID("order id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return 0, false
	}
	if s.payments == nil {
		s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "payments are not served here"))
		return 0, false
	}
	return id, true
}

func (s *Server) payOrder(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	id, ok := s.orderToPay(w, r)
	if !ok {
		return
	}
	res, err := s.payments.Pay(r.Context(), who.UserID, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if res.Started {
		writeJSON(w, http.StatusAccepted, payJSON{orderJSON: newOrderJSON(res.Order), PaymentRef: res.Charge.Ref, PayURL: res.Charge.URL})
		return
	}
	writeJSON(w, http.StatusOK, newOrderJSON(res.Order))
}

func (s *Server) cancelOrder(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	id, ok := s.orderToPay(w, r)
	if !ok {
		return
	}
	o, err := s.payments.Cancel(r.Context(), who.UserID, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderJSON(o))
}

// paymentWebhook takes a payment provider's signed event. It answers 200
// with the order once the event is acted on (or was already: a replay), so
// that the provider stops sending it; any other answer makes the provider
// send it again later (a pending order is not in the database yet: 404).
func (s *Server) paymentWebhook(w http.ResponseWriter, r *http.Request) {
	if s.payments == nil || s.webhook == nil {
		s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "payment webhooks are not served here"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		s.error(w, r, errBodyTooLarge)
		return
	}
	ev, err := s.webhook.Verify(r.Header.Get(paymentSignatureHeader), body)
	if err != nil {
		s.logger.Warn("payment webhook refused", "err", err, "remote", r.RemoteAddr)
		s.error(w, r, err)
		return
	}
	o, err := s.payments.Confirm(r.Context(), ev)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderJSON(o))
}

// optTime is t for JSON: nil when zero, so that omitempty leaves it out.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
