package seckill

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// periodic runs a pass every so often on a goroutine of its own, from
// start to stop: the loop the Sweeper and the RefundRequester share. A
// pass is guarded against panics, and its failure is logged when it
// begins failing and when it stops, not every time.
type periodic struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	loop   sync.WaitGroup
}

// passLog is what a periodic loop logs: what a pass does (for a panic),
// the warning when passes begin to fail, and the line when they pass again.
type passLog struct {
	doing, failing, again string
}

// start begins running pass every every (1s if not positive), under a
// context that outlives ctx's cancellation until stop. A second start
// does nothing.
func (p *periodic) start(ctx context.Context, logger *slog.Logger, every time.Duration, log passLog, pass func(context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return
	}
	if every <= 0 {
		every = time.Second
	}
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.loop.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := guard(logger, log.doing, func() error { return pass(ctx) })
			switch {
			case ctx.Err() != nil:
			case err != nil && !failing:
				logger.Warn(log.failing, "every", every.String(), "err", err)
			case err == nil && failing:
				logger.Info(log.again)
			}
			failing = err != nil
		}
	})
}

// stop stops the loop and waits for a pass in flight. Safe to call twice.
func (p *periodic) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.loop.Wait()
}
