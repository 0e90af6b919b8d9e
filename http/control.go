package http

import (
	"net/http"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// addStockRequest is the body of POST /api/admin/vouchers/{id}/stock.
type addStockRequest struct {
	Add *int64 `json:"add"`
}

// pauseVoucher serves POST /api/admin/vouchers/{id}/pause (paused) and
// …/resume.
func (s *Server) pauseVoucher(paused bool) userHandler {
	return func(w http.ResponseWriter, r *http.Request, who auth.Identity) {
		s.control(w, r, who, func(id int64) (*seckill.VoucherView, error) {
			return s.vouchers.Pause(r.Context(), id, paused)
		})
	}
}

// endVoucher serves POST /api/admin/vouchers/{id}/end.
func (s *Server) endVoucher(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	s.control(w, r, who, func(id int64) (*seckill.VoucherView, error) {
		return s.vouchers.End(r.Context(), id)
	})
}

// addStock serves POST /api/admin/vouchers/{id}/stock: {"add": N} with
// an Idempotency-Key of 1 to 100 characters.
func (s *Server) addStock(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	s.control(w, r, who, func(id int64) (*seckill.VoucherView, error) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" || len([]rune(key)) > seckill.MaxIdempotencyKey {
			return nil, seckill.Errorf(seckill.ErrInvalidArgument, "Idempotency-Key: header of 1 to %d characters is required", seckill.MaxIdempotencyKey)
		}
		var req addStockRequest
		if err := decodeJSON(r.Body, &req); err != nil {
			return nil, err
		}
		if req.Add == nil {
			return nil, seckill.Errorf(seckill.ErrInvalidArgument, "add: is required")
		}
		return s.vouchers.AddStock(r.Context(), id, key, *req.Add)
	})
}

// control runs one control of the voucher named in the path and answers
// the voucher as it is after it.
func (s *Server) control(w http.ResponseWriter, r *http.Request, who auth.Identity, do func(int64) (*seckill.VoucherView, error)) {
	id, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	view, err := do(id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.logger.Info("voucher controlled", "voucher", id, "action", r.URL.Path, "paused", view.Paused,
		"end", view.EndTime, "stock", view.InitialStock, "admin", who.UserID)
	writeJSON(w, http.StatusOK, newVoucherJSON(view))
}
