// Package startstop is the one lifecycle of seckill's background loops:
// each loop (the sweeper, the refunds, the cache watch, the lock
// renewals, the copies' pollers, the node lease, the workers, the group
// commit's batches) embeds a Service, starts its run function with Start
// and ends it with Stop, and runs each step under Guard. It is modelled on
// river's startstop: a second Start does nothing, Stop waits for the loop
// and may be called twice or before Start, and the Started and Stopped
// signals let tests wait on the loop instead of sleeping.
package startstop

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Service runs one background loop at a time. Its zero value is ready.
type Service struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	started chan struct{}
	stopped chan struct{}
}

// Start runs run on a goroutine of its own, under a context that outlives
// ctx's cancellation (a request's context may start a loop) and ends at
// Stop, and reports whether it started it: false when the loop runs
// already. After Stop the Service may be started again.
func (s *Service) Start(ctx context.Context, run func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return false
	}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.signals()
	close(s.started)
	stopped := s.stopped
	go func() {
		defer close(stopped)
		run(ctx)
	}()
	return true
}

// Stop cancels the loop's context and waits for its run function to
// return. Safe to call twice, and before Start.
func (s *Service) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.stopped
	s.cancel = nil
	s.started, s.stopped = nil, nil
}

// Started returns a channel closed once the loop has started.
func (s *Service) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signals()
	return s.started
}

// Stopped returns a channel closed once the loop's run function has
// returned: it ended by itself, or Stop ended it.
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signals()
	return s.stopped
}

// signals makes the channels of the next run, if not made yet. Called
// with mu held.
func (s *Service) signals() {
	if s.started == nil {
		s.started, s.stopped = make(chan struct{}), make(chan struct{})
	}
}

// Guard runs fn for a background loop: a panic in it is logged with what
// the loop was doing and returned as an error, and the loop goes on.
func Guard(logger *slog.Logger, what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error("panic while "+what, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// PassLog is what Every logs: what a pass does (named in a panic's log),
// the warning when passes begin to fail, and the line when they pass
// again.
type PassLog struct {
	Doing, Failing, Again string
}

// Every runs pass every every (1s if not positive) until ctx ends, each
// pass under Guard. A failing pass is logged when passes begin to fail
// and when they pass again, not every time: a loop that fails each
// second while Redis is down would drown the log.
func Every(ctx context.Context, logger *slog.Logger, every time.Duration, log PassLog, pass func(context.Context) error) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := Guard(logger, log.Doing, func() error { return pass(ctx) })
		switch {
		case ctx.Err() != nil:
		case err != nil && !failing:
			logger.Warn(log.Failing, "every", every.String(), "err", err)
		case err == nil && failing:
			logger.Info(log.Again)
		}
		failing = err != nil
	}
}
