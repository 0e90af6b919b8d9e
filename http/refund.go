package http

import (
	"context"
	"net/http"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// RefundAdmin is what the refunds route calls; *seckill.RefundRequester
// is one.
type RefundAdmin interface {
	// Waiting counts the refunds of late payments not given back yet
	// (refunding orders, accepted by the provider or not), and returns up
	// to limit of them, the longest waiting first.
	Waiting(ctx context.Context, limit int) (*seckill.RefundsWaiting, error)
}

var _ RefundAdmin = (*seckill.RefundRequester)(nil)

// maxRefundsShown bounds the refunds the admin API lists; the count says
// how many more wait.
const maxRefundsShown = 100

// refundJSON is a refund not given back yet, as the admin API shows it.
type refundJSON struct {
	OrderID    int64      `json:"orderId,string"`
	VoucherID  int64      `json:"voucherId,string"`
	UserID     int64      `json:"userId,string"`
	PaymentRef string     `json:"paymentRef"`
	PaidAt     *time.Time `json:"paidAt,omitempty"`
	Attempts   int        `json:"attempts"`
	NextAt     *time.Time `json:"nextAt,omitempty"`
	LastError  string     `json:"lastError,omitempty"`
	AcceptedAt *time.Time `json:"acceptedAt,omitempty"`
}

var errNoRefunds = seckill.Errorf(seckill.ErrUnavailable, "this server does not ask for refunds")

func (s *Server) adminRefunds(w http.ResponseWriter, r *http.Request, _ auth.Identity) {
	if s.ops.refunds == nil {
		s.error(w, r, errNoRefunds)
		return
	}
	waiting, err := s.ops.refunds.Waiting(r.Context(), maxRefundsShown)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]refundJSON, len(waiting.First))
	for i, rq := range waiting.First {
		out[i] = refundJSON{OrderID: rq.OrderID, VoucherID: rq.VoucherID, UserID: rq.UserID, PaymentRef: rq.PaymentRef,
			PaidAt: optTime(rq.PaidAt), Attempts: rq.Attempts, NextAt: optTime(rq.NextAt), LastError: rq.LastError,
			AcceptedAt: optTime(rq.AcceptedAt)}
	}
	writeJSON(w, http.StatusOK, struct {
		Waiting int64        `json:"waiting"`
		Oldest  *time.Time   `json:"oldest,omitempty"`
		Refunds []refundJSON `json:"refunds"`
	}{waiting.Count, optTime(waiting.Oldest), out})
}
