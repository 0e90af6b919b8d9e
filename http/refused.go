package http

import (
	"context"
	"net/http"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// RefusedPaymentAdmin lists the payment events refused for their amount or
// currency; *seckill.PaymentService is one.
type RefusedPaymentAdmin interface {
	RefusedPayments(ctx context.Context, limit int) ([]*seckill.RefusedPayment, error)
}

var _ RefusedPaymentAdmin = (*seckill.PaymentService)(nil)

// maxRefusedShown bounds the refused payment events listed.
const maxRefusedShown = 100

// refusedPaymentJSON is a refused payment event as the admin API shows it:
// the amounts in minor units, and as text in the currency's units.
type refusedPaymentJSON struct {
	EventID          string `json:"eventId"`
	OrderID          int64  `json:"orderId,string"`
	PaymentRef       string `json:"paymentRef"`
	ExpectedAmount   int64  `json:"expectedAmount"`
	ExpectedCurrency string `json:"expectedCurrency"`
	Expected         string `json:"expected"`
	// ReceivedAmount is null, and ReceivedCurrency "", when the event did
	// not say them; Received is then "".
	ReceivedAmount   *int64    `json:"receivedAmount"`
	ReceivedCurrency string    `json:"receivedCurrency"`
	Received         string    `json:"received"`
	Reason           string    `json:"reason"`
	At               time.Time `json:"at"`
}

func (s *Server) adminRefusedPayments(w http.ResponseWriter, r *http.Request, _ auth.Identity) {
	if s.ops.refused == nil {
		s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "refused payment events are not served here"))
		return
	}
	rs, err := s.ops.refused.RefusedPayments(r.Context(), maxRefusedShown)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]refusedPaymentJSON, len(rs))
	for i, p := range rs {
		out[i] = refusedPaymentJSON{EventID: p.EventID, OrderID: p.OrderID, PaymentRef: p.Ref,
			ExpectedAmount: p.ExpectedAmount, ExpectedCurrency: p.ExpectedCurrency, Expected: seckill.FormatMoney(p.ExpectedAmount, p.ExpectedCurrency),
			ReceivedAmount: p.ReceivedAmount, ReceivedCurrency: p.ReceivedCurrency, Reason: p.Reason, At: p.At.UTC()}
		if p.ReceivedAmount != nil {
			out[i].Received = seckill.FormatMoney(*p.ReceivedAmount, p.ReceivedCurrency)
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Refused []refusedPaymentJSON `json:"refused"`
	}{out})
}
