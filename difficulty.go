package seckill

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/startstop"
)

// Backlog tells whether a voucher's order backlog is above its high-water
// mark: on any of its shards' streams (worker.Pool, the stream mode's
// backpressure).
type Backlog interface {
	Backlogged(voucherID int64) bool
}

// Difficulty holds the maxnumber of each voucher's challenges, which
// rises with load: each second (Step) it doubles while the voucher's
// backlog is above its high-water mark (Backlog) or more distinct buyers
// than ChallengeConfig.Rate asked here for its challenges or presented
// solutions, up to MaxNumber; and halves back otherwise, down to
// MinNumber. A buyer then pays for the peak in time spent solving on their
// own device, which spreads the peak's arrivals, while a quiet sale asks
// little.
//
// Buyers, not requests: one buyer asking as fast as they can counts once
// a second, so no one client raises everyone's work (it would take as
// many accounts as the rate). Each instance raises its own from its own
// load: behind a load balancer each sees its share. Its zero value is
// ready; the worker (Start) moves it.
type Difficulty struct {
	// vouchers holds, by voucher id, a *voucherDifficulty: of the vouchers
	// with a challenge asked for since they were last at rest.
	vouchers sync.Map

	loop startstop.Service
}

// voucherDifficulty is one voucher's: its maxnumber (0: MinNumber) and the
// buyers counted since the last step.
type voucherDifficulty struct {
	number atomic.Int64
	// full is set once buyers holds bound of them: the window is loaded,
	// and the later hits of the window cost one atomic read.
	full atomic.Bool
	mu   sync.Mutex
	// buyers are the distinct buyers since the last step, at most bound
	// (buyerBound): enough to tell the rate passed, and no more memory.
	buyers map[int64]struct{}
}

// buyerBound is how many distinct buyers a window keeps: one more than
// the rate, which is then passed; 1 when the rate raises nothing (a hit
// is all the window needs to know of).
func buyerBound(cfg ChallengeConfig) int {
	if cfg.Rate <= 0 {
		return 1
	}
	return int(min(cfg.Rate, 1<<30)) + 1
}

// Number returns the voucher's maxnumber now.
func (d *Difficulty) Number(voucherID int64, cfg ChallengeConfig) int64 {
	if e, ok := d.vouchers.Load(voucherID); ok {
		if n := e.(*voucherDifficulty).number.Load(); n > 0 {
			return n
		}
	}
	return cfg.MinNumber
}

// Highest returns the highest maxnumber of any voucher now: MinNumber
// when none is raised.
func (d *Difficulty) Highest(cfg ChallengeConfig) int64 {
	n := cfg.MinNumber
	d.vouchers.Range(func(_, e any) bool {
		n = max(n, e.(*voucherDifficulty).number.Load())
		return true
	})
	return n
}

// hit counts the buyer's request for the voucher's challenge: once a
// window, however many they make. cfg has its defaults.
func (d *Difficulty) hit(voucherID, userID int64, cfg ChallengeConfig) {
	v, ok := d.vouchers.Load(voucherID)
	if !ok {
		v, _ = d.vouchers.LoadOrStore(voucherID, new(voucherDifficulty))
	}
	e := v.(*voucherDifficulty)
	if e.full.Load() {
		return
	}
	bound := buyerBound(cfg)
	e.mu.Lock()
	if e.buyers == nil {
		e.buyers = make(map[int64]struct{})
	}
	if len(e.buyers) < bound {
		e.buyers[userID] = struct{}{}
	}
	if len(e.buyers) >= bound {
		e.full.Store(true)
	}
	e.mu.Unlock()
}

// take returns how many distinct buyers the window counted (at most its
// bound) and starts the next.
func (e *voucherDifficulty) take() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.buyers)
	if n > 0 {
		// A fresh map: clear would keep a peak's buckets for good.
		e.buyers = nil
	}
	e.full.Store(false)
	return n
}

// Step moves every voucher's maxnumber once, as a second has passed since
// the last step (the worker's tick): doubled under load, halved back
// otherwise, within [MinNumber, MaxNumber]. A voucher back at MinNumber
// with no buyer since the last step is forgotten.
func (d *Difficulty) Step(cfg ChallengeConfig, backlog Backlog) {
	cfg = cfg.withDefaults()
	d.vouchers.Range(func(k, v any) bool {
		id, e := k.(int64), v.(*voucherDifficulty)
		buyers := e.take()
		loaded := (cfg.Rate > 0 && float64(buyers) > cfg.Rate) || (backlog != nil && backlog.Backlogged(id))
		n := max(e.number.Load(), cfg.MinNumber)
		if loaded {
			n = min(n*2, cfg.MaxNumber)
		} else {
			n = max(n/2, cfg.MinNumber)
		}
		e.number.Store(n)
		if !loaded && n == cfg.MinNumber && buyers == 0 {
			d.vouchers.CompareAndDelete(id, e)
		}
		return true
	})
}

// start runs Step every second until stop. Safe to call twice.
func (d *Difficulty) start(ctx context.Context, cfg ChallengeConfig, backlog Backlog, logger *slog.Logger) {
	d.loop.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, logger, time.Second, startstop.PassLog{Doing: "moving the challenges' difficulty"}, func(context.Context) error {
			d.Step(cfg, backlog)
			return nil
		})
	})
}

// stop stops the worker and waits for it. Safe to call twice.
func (d *Difficulty) stop() { d.loop.Stop() }
