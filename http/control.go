package http

import (
	"context"
	"net/http"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// VoucherControls are the operator's controls of a voucher on sale;
// *seckill.VoucherService is one. Each answers the voucher as it is once
// admission everywhere sees the change (docs/design.md, Operator controls).
type VoucherControls interface {
	// Pause pauses (paused true) or resumes the voucher's sale.
	Pause(ctx context.Context, id int64, paused bool) (*seckill.VoucherView, error)
	// End ends the voucher's sale now.
	End(ctx context.Context, id int64) (*seckill.VoucherView, error)
	// AddStock adds units to the voucher's stock once per key.
	AddStock(ctx context.Context, id int64, key string, units int64) (*seckill.VoucherView, error)
}

var _ VoucherControls = (*seckill.VoucherService)(nil)

// addStockRequest is the body of POST /api/admin/vouchers/{id}/stock.
type addStockRequest struct {
	Add *int64 `json:"add"`
}

// controls returns the server's voucher controls: its VoucherService's, if
// it has them.
func (s *Server) controls() (VoucherControls, error) {
	c, ok := s.vouchers.(VoucherControls)
	if !ok {
		return nil, seckill.Errorf(seckill.ErrUnavailable, "this server cannot control vouchers")
	}
	return c, nil
}

// pauseVoucher serves POST /api/admin/vouchers/{id}/pause (paused) and
// …/resume.
func (s *Server) pauseVoucher(paused bool) userHandler {
	return func(w http.ResponseWriter, r *http.Request, who auth.Identity) {
		s.control(w, r, who, func(c VoucherControls, id int64) (*seckill.VoucherView, error) {
			return c.Pause(r.Context(), id, paused)
		})
	}
}

// endVoucher serves POST /api/admin/vouchers/{id}/end.
func (s *Server) endVoucher(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	s.control(w, r, who, func(c VoucherControls, id int64) (*seckill.VoucherView, error) {
		return c.End(r.Context(), id)
	})
}

// addStock serves POST /api/admin/vouchers/{id}/stock: {"add": N} with
// an Idempotency-Key of 1 to 100 characters.
func (s *Server) addStock(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	s.control(w, r, who, func(c VoucherControls, id int64) (*seckill.VoucherView, error) {
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
		return c.AddStock(r.Context(), id, key, *req.Add)
	})
}

// control runs one control of the voucher named in the path and answers
// the voucher as it is after it.
func (s *Server) control(w http.ResponseWriter, r *http.Request, who auth.Identity, do func(VoucherControls, int64) (*seckill.VoucherView, error)) {
	id, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	c, err := s.controls()
	if err != nil {
		s.error(w, r, err)
		return
	}
	view, err := do(c, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.logger.Info("voucher controlled", "voucher", id, "action", r.URL.Path, "paused", view.Paused,
		"end", view.EndTime, "stock", view.InitialStock, "admin", who.UserID)
	writeJSON(w, http.StatusOK, newVoucherJSON(view))
}
