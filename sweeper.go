package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/startstop"
)

// Sweeper cancels the orders whose buyers did not pay by their PayBy, and
// puts their units back on sale; and it finishes giving back the units of
// cancelled orders that a crash left unreturned in the cache. Any number of
// instances may sweep at once: the database hands each order to one
// (LifecycleStore.CancelDue), and a unit goes back to the cache once per
// order id (UnitReturner.ReturnUnit).
type Sweeper struct {
	Store LifecycleStore
	// Ledger takes the units back; nil: the database took them back
	// with the cancellations, and nothing else holds them.
	Ledger UnitReturner
	Logger *slog.Logger
	// Every is how often it sweeps. Default 1s: a unit is back on sale
	// within about that long after its order's PayBy.
	Every time.Duration
	// Batch is how many orders one transaction cancels. Default 500.
	Batch int
	// ReturnAfter is how long a cancelled order's unit may stay unreturned
	// before the sweeper gives it back itself: longer than the request that
	// cancelled it takes to. Default 5s.
	ReturnAfter time.Duration
	// Grace is how long after its PayBy an order whose payment was started
	// before it is held for the provider's confirmation before the sweeper
	// cancels it (PaymentService.Grace). Default DefaultPaymentGrace.
	Grace time.Duration
	// Clock tells the time. Default (nil) time.Now.
	Clock Clock
	// Crash is PaymentService.Crash, for the sweeper's cancellations.
	Crash func(point string)

	stats sweepStats

	loop startstop.Service
}

// sweepStats are the sweeper's counts since it started, for metrics.
type sweepStats struct {
	sweeps, failures, cancelled, returned atomic.Int64
	// lastOK is when the last sweep that failed nowhere began, Unix ns.
	lastOK atomic.Int64
}

// SweepStats are a Sweeper's counts since it started.
type SweepStats struct {
	Sweeps, Failures int64
	// Cancelled counts the orders it cancelled, Returned the units it gave
	// back to the cache (its own cancellations' and unreturned ones').
	Cancelled, Returned int64
	// LastSuccess is when the last sweep that failed nowhere began; zero
	// before one did. A sweeper that falls behind shows here first.
	LastSuccess time.Time
}

// Stats returns the sweeper's counts.
func (s *Sweeper) Stats() SweepStats {
	st := SweepStats{
		Sweeps:    s.stats.sweeps.Load(),
		Failures:  s.stats.failures.Load(),
		Cancelled: s.stats.cancelled.Load(),
		Returned:  s.stats.returned.Load(),
	}
	if ns := s.stats.lastOK.Load(); ns != 0 {
		st.LastSuccess = time.Unix(0, ns)
	}
	return st
}

// Sweep is one sweep: the vouchers that can still have due orders or
// unreturned units (LifecycleStore.DeadlineVouchers: not those whose
// orders are all settled, however many), their due orders cancelled and
// then their unreturned units given back. Each voucher is swept a batch
// at a time in turn, so that a voucher with many due orders does not hold
// up another's: a new sale's first batch waits for one batch of each
// other voucher, not for all of them. It returns how many orders it
// cancelled and units it gave back.
func (s *Sweeper) Sweep(ctx context.Context) (cancelled, returned int, err error) {
	now := s.Clock.Now()
	vs, err := s.Store.DeadlineVouchers(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("sweep: %w", err)
	}
	var errs []error
	for _, step := range []func(context.Context, *Voucher, time.Time) (int, int, bool, error){s.cancelDue, s.returnUnreturned} {
		for left := vs; len(left) > 0 && ctx.Err() == nil; {
			var more []*Voucher
			for _, v := range left {
				c, r, full, err := step(ctx, v, now)
				cancelled += c
				returned += r
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("sweep voucher %d: %w", v.ID, err))
				case full:
					more = append(more, v)
				}
			}
			left = more
		}
	}
	s.stats.sweeps.Add(1)
	s.stats.cancelled.Add(int64(cancelled))
	s.stats.returned.Add(int64(returned))
	if err := errors.Join(errs...); err != nil {
		s.stats.failures.Add(1)
		return cancelled, returned, err
	}
	s.stats.lastOK.Store(now.UnixNano())
	return cancelled, returned, nil
}

// cancelDue cancels a batch of the voucher's orders due at now and gives
// their units back; full says there may be more.
func (s *Sweeper) cancelDue(ctx context.Context, v *Voucher, now time.Time) (cancelled, returned int, full bool, err error) {
	batch := s.batch()
	before := now.Add(-v.PayWithin)
	os, err := s.Store.CancelDue(ctx, v.ID, before, before.Add(-paymentGrace(s.Grace)), now, batch)
	if err != nil {
		return 0, 0, false, err
	}
	n, err := returnUnits(ctx, s.Store, s.Ledger, v, os, s.Crash)
	if err != nil {
		// Left unreturned: given back by returnUnreturned, or the next sweep.
		s.Logger.Warn("could not give the units of cancelled orders back; trying again", "voucher", v.ID, "orders", len(os), "err", err)
	}
	return len(os), n, len(os) == batch, nil
}

// returnUnreturned gives back a batch of the units of the voucher's
// cancelled orders left unreturned for longer than ReturnAfter; full says
// there may be more.
func (s *Sweeper) returnUnreturned(ctx context.Context, v *Voucher, now time.Time) (cancelled, returned int, full bool, err error) {
	batch := s.batch()
	os, err := s.Store.Unreturned(ctx, v.ID, now.Add(-s.returnAfter()), batch)
	if err != nil || len(os) == 0 {
		return 0, 0, false, err
	}
	n, err := returnUnits(ctx, s.Store, s.Ledger, v, os, s.Crash)
	if err != nil {
		return 0, n, false, err
	}
	if n > 0 {
		s.Logger.Info("gave back the units of cancelled orders a crash left unreturned", "voucher", v.ID, "units", n, "orders", len(os))
	}
	return 0, n, len(os) == batch, nil
}

// FinishReturns gives back every unreturned unit of the voucher's
// cancelled orders at once, however young: reconcile's repair. A unit the
// request that cancelled it is giving back now is given once all the same.
func (s *Sweeper) FinishReturns(ctx context.Context, v *Voucher) (int, error) {
	returned := 0
	for {
		os, err := s.Store.Unreturned(ctx, v.ID, s.Clock.Now().Add(time.Second), s.batch())
		if err != nil || len(os) == 0 {
			return returned, err
		}
		n, err := returnUnits(ctx, s.Store, s.Ledger, v, os, s.Crash)
		returned += n
		if err != nil {
			return returned, err
		}
		if len(os) < s.batch() {
			return returned, nil
		}
	}
}

// Start begins sweeping every Every. It returns at once.
func (s *Sweeper) Start(ctx context.Context) error {
	s.loop.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, s.Logger, s.Every, startstop.PassLog{
			Doing:   "sweeping",
			Failing: "could not sweep the orders past their payment deadline; trying again",
			Again:   "sweeping the orders past their payment deadline again",
		}, func(ctx context.Context) error {
			_, _, err := s.Sweep(ctx)
			return err
		})
	})
	return nil
}

// Stop stops sweeping and waits for a sweep in flight. Safe to call twice.
func (s *Sweeper) Stop() { s.loop.Stop() }

// DefaultPaymentGrace is how long after its PayBy an order whose payment
// was started before it waits for the provider's confirmation, by default:
// longer than a provider takes to confirm, and than a short outage of its
// webhooks.
const DefaultPaymentGrace = 5 * time.Minute

// paymentGrace is d, or DefaultPaymentGrace if d is not positive.
func paymentGrace(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultPaymentGrace
}

func (s *Sweeper) batch() int {
	if s.Batch > 0 {
		return s.Batch
	}
	return 500
}

func (s *Sweeper) returnAfter() time.Duration {
	if s.ReturnAfter > 0 {
		return s.ReturnAfter
	}
	return 5 * time.Second
}
