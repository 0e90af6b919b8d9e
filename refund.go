package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/startstop"
)

// RefundRequester asks the payment provider for the refunds of payments
// that came after their orders were cancelled (refunding orders), until it
// accepts each, and again every ReAsk after until each is refunded
// (docs/design/lifecycle.md, Refunds). What is due and when lives in
// the database (LifecycleStore.ClaimRefunds), so that a refund refused, or
// whose asker crashed, is asked for again after a backoff, across restarts
// and by any of several instances at once: the database hands each due
// request to one at a time, and the provider's idempotency key (Webhook:
// "refund_" and the order's id) makes a request sent twice refund once.
type RefundRequester struct {
	Store LifecycleStore
	// Provider gives the payments back.
	Provider Refunder
	Logger   *slog.Logger
	// Every is how often it looks for due requests. Default 1s.
	Every time.Duration
	// Lease is how long a claimed request is left to its asker before
	// another may ask again: longer than a request to the provider takes
	// (payment.DefaultTimeout), times Batch. Default 5m.
	Lease time.Duration
	// MinBackoff is the wait after a first refused request, doubled after
	// each next one up to MaxBackoff. Defaults 1s and 5m.
	MinBackoff, MaxBackoff time.Duration
	// ReAsk is how long after the provider accepted a refund it is asked
	// for again, under the same idempotency key, while the order is not
	// refunded (the provider's refund event lost, or its refund stuck).
	// Default 1h.
	ReAsk time.Duration
	// Batch is how many due requests one claim takes. Default 10.
	Batch int
	// Clock tells the time. Default (nil) time.Now.
	Clock Clock

	stats refundStats

	loop startstop.Service
}

// refundStats are a RefundRequester's counts, for metrics.
type refundStats struct {
	requests, failures, accepted atomic.Int64
	// waiting and oldest (Unix ns, 0: none) are as the last pass found them.
	waiting, oldest atomic.Int64
}

// RefundStats are a RefundRequester's counts since it started.
type RefundStats struct {
	// Requests counts the refund requests it sent, Failures those that
	// failed (and are asked again later), Accepted those the provider
	// accepted.
	Requests, Failures, Accepted int64
	// Waiting counts the refunding orders (payments not given back,
	// accepted or not), as the last pass found them (every instance's
	// pass finds them all), and Oldest is when the longest waiting one
	// was paid; zero if none.
	Waiting int64
	Oldest  time.Time
}

// Stats returns the requester's counts.
func (r *RefundRequester) Stats() RefundStats {
	st := RefundStats{
		Requests: r.stats.requests.Load(),
		Failures: r.stats.failures.Load(),
		Accepted: r.stats.accepted.Load(),
		Waiting:  r.stats.waiting.Load(),
	}
	if ns := r.stats.oldest.Load(); ns != 0 {
		st.Oldest = time.Unix(0, ns)
	}
	return st
}

// maxRefundError bounds the reason of a failed request that is stored.
const maxRefundError = 500

// Request asks for the refund of the order now, if it is due and no other
// asker holds it (a request accepted already is not sent again). It
// returns the order refunded if the provider gave the payment back at once
// (the fake provider), else nil: the provider confirms later with a
// RefundSucceeded event, or a failed request is asked for again later.
func (r *RefundRequester) Request(ctx context.Context, id int64) (*Order, error) {
	now := r.Clock.Now()
	rq, err := r.Store.ClaimRefund(ctx, id, now, now.Add(r.lease()))
	if err != nil || rq == nil {
		return nil, err
	}
	return r.ask(ctx, rq)
}

// Retry is one pass: every due refund request claimed, a batch at a time,
// and asked for; then the requests waiting counted. It returns how many it
// asked for, and the database's errors: a request that failed is logged,
// and asked for again after its backoff.
func (r *RefundRequester) Retry(ctx context.Context) (asked int, err error) {
	var errs []error
	for ctx.Err() == nil {
		now := r.Clock.Now()
		rqs, err := r.Store.ClaimRefunds(ctx, now, now.Add(r.lease()), r.batch())
		if err != nil {
			errs = append(errs, err)
			break
		}
		for _, rq := range rqs {
			if ctx.Err() != nil {
				break // the rest are asked again once their claim lapses
			}
			asked++
			r.ask(ctx, rq)
		}
		if len(rqs) < r.batch() {
			break
		}
	}
	if w, err := r.Store.RefundsWaiting(ctx, 0); err != nil {
		errs = append(errs, err)
	} else {
		r.stats.waiting.Store(w.Count)
		var oldest int64
		if !w.Oldest.IsZero() {
			oldest = w.Oldest.UnixNano()
		}
		r.stats.oldest.Store(oldest)
	}
	return asked, errors.Join(errs...)
}

// ask sends the claimed request and records what came of it: refunded,
// accepted (asked again after ReAsk unless refunded by then), or due
// again after the backoff of its attempts.
func (r *RefundRequester) ask(ctx context.Context, rq *RefundRequest) (*Order, error) {
	r.stats.requests.Add(1)
	done, err := r.Provider.Refund(ctx, rq.Order())
	// Recorded even if ctx ended meanwhile: the provider answered.
	ctx = context.WithoutCancel(ctx)
	now := r.Clock.Now()
	if err != nil {
		r.stats.failures.Add(1)
		next := now.Add(r.backoff(rq.Attempts))
		r.Logger.Warn("could not ask the payment provider for a refund; asking again later", "order", rq.OrderID,
			"attempts", rq.Attempts, "next", next, "err", err)
		if ferr := r.Store.RefundFailed(ctx, rq.OrderID, next, cut(err.Error(), maxRefundError)); ferr != nil {
			// Asked again when the claim lapses.
			err = errors.Join(err, ferr)
		}
		return nil, fmt.Errorf("refund of order %d: %w", rq.OrderID, err)
	}
	r.stats.accepted.Add(1)
	if rq.Attempts > 1 {
		r.Logger.Info("the payment provider accepted a refund asked for again", "order", rq.OrderID, "attempts", rq.Attempts)
	}
	if done {
		// Given back: the order is refunded, and nothing is left to ask.
		// Recorded before anything that would make it due no more, so
		// that a failure here leaves it due again when the claim lapses
		// (asked again, which refunds once).
		o, err := r.Store.RefundOrder(ctx, rq.OrderID, now)
		if err != nil {
			return nil, fmt.Errorf("refund of order %d given back: %w", rq.OrderID, err)
		}
		return o, nil
	}
	if err := r.Store.RefundAccepted(ctx, rq.OrderID, now, now.Add(r.reAsk())); err != nil {
		// Asked again when the claim lapses, which refunds once.
		return nil, fmt.Errorf("refund of order %d accepted: %w", rq.OrderID, err)
	}
	return nil, nil
}

// Waiting counts the refunding orders, and returns up to limit of them,
// the longest waiting first: for the admin.
func (r *RefundRequester) Waiting(ctx context.Context, limit int) (*RefundsWaiting, error) {
	return r.Store.RefundsWaiting(ctx, limit)
}

// backoff is the wait after the attempts-th request failed: MinBackoff,
// doubled for each attempt after the first, up to MaxBackoff.
func (r *RefundRequester) backoff(attempts int) time.Duration {
	lo, hi := r.MinBackoff, r.MaxBackoff
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 5 * time.Minute
	}
	d := lo
	for i := 1; i < attempts && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// Start begins asking for the due refunds every Every. It returns at once.
func (r *RefundRequester) Start(ctx context.Context) error {
	r.loop.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, r.Logger, r.Every, startstop.PassLog{
			Doing:   "asking for refunds",
			Failing: "could not ask for every due refund; asking again",
			Again:   "asking for the due refunds again",
		}, func(ctx context.Context) error {
			_, err := r.Retry(ctx)
			return err
		})
	})
	return nil
}

// Stop stops asking and waits for a pass in flight. Safe to call twice.
func (r *RefundRequester) Stop() { r.loop.Stop() }

func (r *RefundRequester) lease() time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return 5 * time.Minute
}

func (r *RefundRequester) reAsk() time.Duration {
	if r.ReAsk > 0 {
		return r.ReAsk
	}
	return time.Hour
}

func (r *RefundRequester) batch() int {
	if r.Batch > 0 {
		return r.Batch
	}
	return 10
}

// cut cuts s to at most n bytes, on a rune's boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
