package http

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// The admin API of dead letters and reconciliation.

// DeadLetterAdmin is what the dead-letter routes call;
// *redisledger.DeadLetterService is one.
type DeadLetterAdmin interface {
	DeadLetters(ctx context.Context) ([]seckill.DeadLetterEntry, error)
	RetryDeadLetter(ctx context.Context, id string, adminID int64) (*seckill.Order, error)
	DiscardDeadLetter(ctx context.Context, id string, adminID int64) error
}

// Reconciler is what the reconcile route calls; *redisledger.Reconciler is
// one.
type Reconciler interface {
	Reconcile(ctx context.Context, voucherID int64, repair bool) (*seckill.Reconciliation, error)
}

// deadLetterJSON is a dead letter as the admin API shows it.
type deadLetterJSON struct {
	ID            string    `json:"id"`
	VoucherID     int64     `json:"voucherId,string"`
	Shard         int       `json:"shard,omitempty"` // of a voucher with shards
	OrderID       int64     `json:"orderId,omitempty,string"`
	UserID        int64     `json:"userId,omitempty,string"`
	Reason        string    `json:"reason"`
	At            time.Time `json:"at"`
	StockReturned bool      `json:"stockReturned"`
}

// maxDeadLetterID bounds a dead letter id in a path:
// "<voucher>.<shard>:<ms>-<seq>" is at most 19+3+1+20+1+20 characters.
const maxDeadLetterID = 64

func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request, _ auth.Identity) {
	if s.ops.deadLetters == nil {
		s.error(w, r, errNoDeadLetters)
		return
	}
	entries, err := s.ops.deadLetters.DeadLetters(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]deadLetterJSON, len(entries))
	for i, e := range entries {
		out[i] = deadLetterJSON{ID: e.ID, VoucherID: e.VoucherID, Shard: e.Shard, OrderID: e.OrderID, UserID: e.UserID,
			Reason: e.Reason, At: e.At.UTC(), StockReturned: e.StockReturned}
	}
	writeJSON(w, http.StatusOK, struct {
		DeadLetters []deadLetterJSON `json:"deadLetters"`
	}{out})
}

func (s *Server) adminRetryDeadLetter(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	id, err := deadLetterID(r)
	if err == nil && s.ops.deadLetters == nil {
		err = errNoDeadLetters
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	o, err := s.ops.deadLetters.RetryDeadLetter(r.Context(), id, who.UserID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		OrderID int64  `json:"orderId,string"`
		Status  string `json:"status"`
	}{o.ID, string(o.Status)})
}

func (s *Server) adminDiscardDeadLetter(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	id, err := deadLetterID(r)
	if err == nil && s.ops.deadLetters == nil {
		err = errNoDeadLetters
	}
	if err == nil {
		err = s.ops.deadLetters.DiscardDeadLetter(r.Context(), id, who.UserID)
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Discarded bool `json:"discarded"`
	}{true})
}

// deadLetterID reads the {id} of a dead-letter route: an order id or
// "<voucher id>:<entry id>".
func deadLetterID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if len(id) > maxDeadLetterID {
		return "", seckill.Errorf(seckill.ErrInvalidArgument, "dead letter id: at most %d characters, got %d", maxDeadLetterID, len(id))
	}
	if _, _, _, err := seckill.ParseDeadLetterID(id); err != nil {
		return "", err
	}
	return id, nil
}

// errNoDeadLetters answers the dead-letter routes of a server built
// without the dead-letter service.
var errNoDeadLetters = seckill.Errorf(seckill.ErrUnavailable, "this server does not manage dead letters")

// reconciliationJSON is a voucher's reconciliation as the admin API shows
// it: the database's side, the cache's, and how far they disagree.
type reconciliationJSON struct {
	VoucherID    int64 `json:"voucherId,string"`
	InitialStock int64 `json:"initialStock"`
	DBStock      int64 `json:"dbStock"`
	DBOrders     int64 `json:"dbOrders"`
	Loaded       bool  `json:"loaded"`
	// Remaining is null when the voucher is not loaded in the cache, as
	// in the voucher API.
	Remaining   *int64 `json:"remaining"`
	Buyers      int64  `json:"buyers"`
	Pending     int64  `json:"pending"`
	DeadLetters int64  `json:"deadLetters"`
	Drift       int64  `json:"drift"`
	BuyerDrift  int64  `json:"buyerDrift"`
	OK          bool   `json:"ok"`
	Repaired    bool   `json:"repaired"`
}

func (s *Server) adminReconcile(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	voucherID, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	repair := false
	if v := r.URL.Query().Get("repair"); v != "" {
		if repair, err = strconv.ParseBool(v); err != nil {
			s.error(w, r, seckill.Errorf(seckill.ErrInvalidArgument, "repair: must be true or false, got %q", truncate(v, 40)))
			return
		}
	}
	if s.ops.reconciler == nil {
		s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "this server does not reconcile vouchers"))
		return
	}
	rec, err := s.ops.reconciler.Reconcile(r.Context(), voucherID, repair)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.logger.Info("voucher reconciled", "admin", who.UserID, "voucher", voucherID, "repair", repair,
		"repaired", rec.Repaired, "ok", rec.OK(), "drift", rec.Drift, "buyer_drift", rec.BuyerDrift)
	out := reconciliationJSON{
		VoucherID:    voucherID,
		InitialStock: rec.Voucher.InitialStock,
		DBStock:      rec.Voucher.Stock,
		DBOrders:     rec.Orders,
		Loaded:       rec.Loaded,
		Buyers:       rec.Buyers,
		Pending:      rec.Pending,
		DeadLetters:  rec.DeadLetters,
		Drift:        rec.Drift,
		BuyerDrift:   rec.BuyerDrift,
		OK:           rec.OK(),
		Repaired:     rec.Repaired,
	}
	if rec.Loaded {
		out.Remaining = &rec.Remaining
	}
	writeJSON(w, http.StatusOK, out)
}
