package http

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// OrderService is what the buy and order routes call;
// *seckill.OrderService is one.
type OrderService interface {
	Buy(ctx context.Context, userID, voucherID int64) (*seckill.Order, error)
	// Order returns the user's order with the id: another buyer's order is
	// ErrOrderNotFound.
	Order(ctx context.Context, userID, id int64) (*seckill.Order, error)
	Orders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error)
}

var _ OrderService = (*seckill.OrderService)(nil)

// orderJSON is an order as the API shows it.
type orderJSON struct {
	OrderID   int64     `json:"orderId,string"`
	VoucherID int64     `json:"voucherId,string"`
	UserID    int64     `json:"userId,string"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
	Reason    string    `json:"reason,omitempty"`
	// PayBy is when a created order is cancelled unless paid; absent when
	// its voucher has no deadline.
	PayBy       *time.Time `json:"payBy,omitempty"`
	PaidAt      *time.Time `json:"paidAt,omitempty"`
	CancelledAt *time.Time `json:"cancelledAt,omitempty"`
	PaymentRef  string     `json:"paymentRef,omitempty"`
	// Amount is what the order owes, in Currency's minor units: its
	// voucher's price (a pending order's too, what it owes once written).
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func newOrderJSON(o *seckill.Order) orderJSON {
	return orderJSON{
		OrderID:     o.ID,
		VoucherID:   o.VoucherID,
		UserID:      o.UserID,
		Status:      string(o.Status),
		CreatedAt:   o.CreatedAt.UTC(),
		Reason:      o.Reason,
		PayBy:       optTime(o.PayBy),
		PaidAt:      optTime(o.PaidAt),
		CancelledAt: optTime(o.CancelledAt),
		PaymentRef:  o.PaymentRef,
		Amount:      o.Amount,
		Currency:    o.Currency,
	}
}

func (s *Server) seckill(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	voucherID, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	start := time.Now()
	if s.challenges != nil {
		// Before the buy: a voucher that takes a challenge admits no one
		// whose solution was not spent first.
		if err := s.challenges.Check(r.Context(), who.UserID, voucherID, r.Header.Get(solutionHeader)); err != nil {
			e := lookupError(err)
			s.admissions.record(e.code, time.Since(start))
			s.errorCode(w, r, err, e)
			return
		}
	}
	o, err := s.orders.Buy(r.Context(), who.UserID, voucherID)
	if err != nil {
		e := lookupError(err)
		s.admissions.record(e.code, time.Since(start))
		s.errorCode(w, r, err, e)
		return
	}
	s.admissions.record("admitted", time.Since(start))
	// {"orderId":"…","status":"…"}, as encoding/json writes it, by hand.
	buf := bodyBuffers.Get().(*[]byte)
	b := append((*buf)[:0], `{"orderId":"`...)
	b = strconv.AppendInt(b, o.ID, 10)
	b = append(b, `","status":`...)
	b = appendJSONString(b, string(o.Status))
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	*buf = b
	bodyBuffers.Put(buf)
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	id, err := parseID("order id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	o, err := s.orders.Order(r.Context(), who.UserID, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderJSON(o))
}

func (s *Server) listOrders(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	limit, err := listLimit(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	orders, err := s.orders.Orders(r.Context(), who.UserID, limit)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := struct {
		Orders []orderJSON `json:"orders"`
	}{Orders: make([]orderJSON, len(orders))}
	for i, o := range orders {
		out.Orders[i] = newOrderJSON(o)
	}
	writeJSON(w, http.StatusOK, out)
}
