package http

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// VoucherService is what the voucher routes call; *seckill.VoucherService
// is one.
type VoucherService interface {
	// Create validates v against the service's clock (a failure is
	// ErrInvalidArgument naming the fields), stores it and puts it on sale.
	Create(ctx context.Context, v *seckill.Voucher) (*seckill.VoucherView, error)
	Get(ctx context.Context, id int64) (*seckill.VoucherView, error)
	List(ctx context.Context, limit int) ([]*seckill.VoucherView, error)
	// Pause, End and AddStock are the operator's controls of a voucher on
	// sale (control.go): each answers the voucher as it is once admission
	// everywhere sees the change (docs/design/controls.md, Operator controls).
	Pause(ctx context.Context, id int64, paused bool) (*seckill.VoucherView, error)
	End(ctx context.Context, id int64) (*seckill.VoucherView, error)
	AddStock(ctx context.Context, id int64, key string, units int64) (*seckill.VoucherView, error)
}

var _ VoucherService = (*seckill.VoucherService)(nil)

// voucherJSON is a voucher as the API shows it.
type voucherJSON struct {
	ID    int64  `json:"id,string"`
	Title string `json:"title"`
	Stock int64  `json:"stock"`
	// Remaining is null while the voucher's stock is not loaded in Redis.
	Remaining *int64    `json:"remaining"`
	BeginTime time.Time `json:"beginTime"`
	EndTime   time.Time `json:"endTime"`
	// Shards is how many shards the voucher's stock is split into in the
	// cache: 1 for an unsharded voucher.
	Shards int `json:"shards"`
	// PayWithinSeconds is how long a buyer has to pay an order; 0, no
	// deadline: orders end created.
	PayWithinSeconds int64 `json:"payWithinSeconds"`
	// RebuyAfterCancel lets a buyer whose order was cancelled buy again.
	RebuyAfterCancel bool `json:"rebuyAfterCancel"`
	// Challenge says a buy must carry a solved challenge (X-Altcha), got
	// from GET /api/vouchers/{id}/challenge from ChallengeLeadSeconds
	// before beginTime.
	Challenge            bool  `json:"challenge"`
	ChallengeLeadSeconds int64 `json:"challengeLeadSeconds"`
	// Paused says an operator paused the sale: buys answer 409 paused.
	Paused bool `json:"paused"`
	// Price and Value are in Currency's minor units (fen, cents): a price
	// of 1250 CNY is 12.50 CNY. Price 0 is free; Value 0 is not said.
	Price    int64  `json:"price"`
	Value    int64  `json:"value"`
	Currency string `json:"currency"`
	// Subtitle, Rules and ImageURL are "" when not given.
	Subtitle string `json:"subtitle"`
	Rules    string `json:"rules"`
	ImageURL string `json:"imageUrl"`
}

func newVoucherJSON(v *seckill.VoucherView) voucherJSON {
	return voucherJSON{
		ID:        v.ID,
		Title:     v.Title,
		Stock:     v.Stock,
		Remaining: v.Remaining,
		BeginTime: v.BeginTime.UTC(),
		EndTime:   v.EndTime.UTC(),
		Shards:    v.ShardCount(),

		PayWithinSeconds: int64(v.PayWithin / time.Second),
		RebuyAfterCancel: v.RebuyAfterCancel,

		Challenge:            v.Challenge,
		ChallengeLeadSeconds: int64(v.ChallengeLead / time.Second),
		Paused:               v.Paused,

		Price:    v.Price,
		Value:    v.Value,
		Currency: v.Currency,
		Subtitle: v.Subtitle,
		Rules:    v.Rules,
		ImageURL: v.ImageURL,
	}
}

// createVoucherRequest is the body of POST /api/admin/vouchers. Times are
// strings so that a bad one gets a message naming its field.
type createVoucherRequest struct {
	Title     *string `json:"title"`
	Stock     *int64  `json:"stock"`
	BeginTime *string `json:"beginTime"`
	EndTime   *string `json:"endTime"`
	// Shards is optional: 1, an unsharded voucher, when absent.
	Shards *int `json:"shards"`
	// PayWithinSeconds is optional: when absent, 0 (no deadline) for a
	// free voucher, seckill.DefaultPricedPayWithin for a priced one.
	PayWithinSeconds *int64 `json:"payWithinSeconds"`
	// RebuyAfterCancel is optional: false when absent.
	RebuyAfterCancel *bool `json:"rebuyAfterCancel"`
	// Challenge is optional: false when absent. ChallengeLeadSeconds is
	// optional: seckill.DefaultChallengeLead when absent with a challenge,
	// else 0.
	Challenge            *bool  `json:"challenge"`
	ChallengeLeadSeconds *int64 `json:"challengeLeadSeconds"`
	// Price and Value are optional: 0 when absent. Currency is optional:
	// the service's default (--currency) when absent. Subtitle, Rules and
	// ImageURL are optional: none when absent.
	Price    *int64  `json:"price"`
	Value    *int64  `json:"value"`
	Currency *string `json:"currency"`
	Subtitle *string `json:"subtitle"`
	Rules    *string `json:"rules"`
	ImageURL *string `json:"imageUrl"`
}

// decodeVoucher reads a voucher to create from body: every field present
// but shards, the times readable, shards (if there) at least 1. Every
// failure wraps ErrInvalidArgument, or errBodyTooLarge. The voucher's rules
// (stock, shards, window, the clock) are checked by VoucherService.Create,
// on the service's clock.
func decodeVoucher(body io.Reader) (*seckill.Voucher, error) {
	var req createVoucherRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	switch {
	case req.Title == nil:
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "title: is required")
	case req.Stock == nil:
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "stock: is required")
	case req.BeginTime == nil:
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "beginTime: is required")
	case req.EndTime == nil:
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "endTime: is required")
	}
	begin, err := parseTime("beginTime", *req.BeginTime)
	if err != nil {
		return nil, err
	}
	end, err := parseTime("endTime", *req.EndTime)
	if err != nil {
		return nil, err
	}
	shards := 1
	if req.Shards != nil {
		// 0 is how the service reads "unsharded" in rows made before
		// shards; a client that sends it has made a mistake.
		if *req.Shards < 1 || *req.Shards > seckill.MaxShards {
			return nil, seckill.Errorf(seckill.ErrInvalidArgument, "shards: must be between 1 and %d, got %d", seckill.MaxShards, *req.Shards)
		}
		shards = *req.Shards
	}
	v := &seckill.Voucher{Title: *req.Title, Stock: *req.Stock, BeginTime: begin, EndTime: end, Shards: shards}
	if p := req.PayWithinSeconds; p != nil {
		// Bounded here, before the multiplication can overflow; Validate
		// checks the bound again, on the Voucher.
		if *p < 0 || *p > int64(seckill.MaxPayWithin/time.Second) {
			return nil, seckill.Errorf(seckill.ErrInvalidArgument, "payWithinSeconds: must be between 0 and %d, got %d", int64(seckill.MaxPayWithin/time.Second), *p)
		}
		v.PayWithin = time.Duration(*p) * time.Second
	}
	if req.RebuyAfterCancel != nil {
		v.RebuyAfterCancel = *req.RebuyAfterCancel
	}
	if req.Challenge != nil {
		v.Challenge = *req.Challenge
	}
	if v.Challenge {
		// Absent: the default lead, for a challenge voucher alone (the
		// others issue no challenge, and keep 0 as made before).
		v.ChallengeLead = seckill.DefaultChallengeLead
	}
	if p := req.ChallengeLeadSeconds; p != nil {
		// Bounded here, before the multiplication can overflow; Validate
		// checks the bound again, on the Voucher.
		if *p < 0 || *p > int64(seckill.MaxChallengeLead/time.Second) {
			return nil, seckill.Errorf(seckill.ErrInvalidArgument, "challengeLeadSeconds: must be between 0 and %d, got %d", int64(seckill.MaxChallengeLead/time.Second), *p)
		}
		v.ChallengeLead = time.Duration(*p) * time.Second
	}
	// Their rules are Validate's, on the Voucher; a currency sent is
	// never "", which would stand for the default.
	if req.Currency != nil {
		if err := seckill.CheckCurrency("currency", *req.Currency); err != nil {
			return nil, err
		}
		v.Currency = *req.Currency
	}
	v.Price, v.Value = deref(req.Price), deref(req.Value)
	if v.Price > 0 && req.PayWithinSeconds == nil {
		// Absent: a priced voucher's orders still owe a deadline; 0 sent
		// is refused by Validate.
		v.PayWithin = seckill.DefaultPricedPayWithin
	}
	v.Subtitle, v.Rules, v.ImageURL = derefString(req.Subtitle), derefString(req.Rules), derefString(req.ImageURL)
	return v, nil
}

// derefString returns *p, or "" for nil.
func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// parseTime reads an RFC 3339 time, kept to the microsecond that every
// database stores.
func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, seckill.Errorf(seckill.ErrInvalidArgument, "%s: must be an RFC 3339 time such as 2026-12-01T20:00:00+08:00, got %q", field, truncate(s, 40))
	}
	if t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, seckill.Errorf(seckill.ErrInvalidArgument, "%s: year must be between 1970 and 9999", field)
	}
	return t.UTC().Truncate(time.Microsecond), nil
}

func (s *Server) createVoucher(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	v, err := decodeVoucher(r.Body)
	if err != nil {
		s.error(w, r, err)
		return
	}
	view, err := s.vouchers.Create(r.Context(), v)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.logger.Info("voucher created", "voucher", view.ID, "stock", view.Stock, "shards", view.ShardCount(),
		"price", seckill.FormatMoney(view.Price, view.Currency), "admin", who.UserID)
	w.Header().Set("Location", "/api/vouchers/"+strconv.FormatInt(view.ID, 10))
	writeJSON(w, http.StatusCreated, newVoucherJSON(view))
}

func (s *Server) getVoucher(w http.ResponseWriter, r *http.Request) {
	id, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	view, err := s.vouchers.Get(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newVoucherJSON(view))
}

// maxListLimit bounds GET /api/vouchers?limit=.
const maxListLimit = 1000

// listLimit reads the ?limit= of a list: default 100, at most maxListLimit.
func listLimit(r *http.Request) (int, error) {
	q := r.URL.Query().Get("limit")
	if q == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, seckill.Errorf(seckill.ErrInvalidArgument, "limit: must be an integer from 1 to %d", maxListLimit)
	}
	return n, nil
}

func (s *Server) listVouchers(w http.ResponseWriter, r *http.Request) {
	limit, err := listLimit(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	views, err := s.vouchers.List(r.Context(), limit)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := struct {
		Vouchers []voucherJSON `json:"vouchers"`
	}{Vouchers: make([]voucherJSON, len(views))}
	for i, v := range views {
		out.Vouchers[i] = newVoucherJSON(v)
	}
	writeJSON(w, http.StatusOK, out)
}
