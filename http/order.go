package http

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/seckill/seckill"
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
}

func newOrderJSON(o *seckill.Order) orderJSON {
	return orderJSON{
		OrderID:   o.ID,
		VoucherID: o.VoucherID,
		UserID:    o.UserID,
		Status:    string(o.Status),
		CreatedAt: o.CreatedAt.UTC(),
		Reason:    o.Reason,
	}
}

func (s *Server) seckill(w http.ResponseWriter, r *http.Request) {
	voucherID, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	start := time.Now()
	o, err := s.orders.Buy(r.Context(), identity(r).UserID, voucherID)
	s.admissions.record(admissionResult(err), time.Since(start))
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		OrderID int64  `json:"orderId,string"`
		Status  string `json:"status"`
	}{o.ID, string(o.Status)})
}

// admissionResult names the result of a buy for the metrics: admitted, or
// the error code of the refusal.
func admissionResult(err error) string {
	if err == nil {
		return "admitted"
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return "internal"
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	id, err := parseID("order id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	o, err := s.orders.Order(r.Context(), identity(r).UserID, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderJSON(o))
}

func (s *Server) listOrders(w http.ResponseWriter, r *http.Request) {
	limit, err := listLimit(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	orders, err := s.orders.Orders(r.Context(), identity(r).UserID, limit)
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
