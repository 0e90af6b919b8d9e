package worker

import (
	"context"
	"sync"
	"time"

	"github.com/seckill/seckill"
)

// breaker is the workers' circuit breaker on the database. After
// Threshold transient failures in a row it opens: no worker tries the
// database until the cool-down has passed, then one probe does (half-open);
// its success closes the breaker, its failure opens it again for twice as
// long, up to a maximum. So a database that is down costs a probe a while,
// not a retry loop per batch.
type breaker struct {
	threshold   int
	minCool     time.Duration
	maxCool     time.Duration
	clock       seckill.Clock
	onStateFunc func(state string)

	mu       sync.Mutex
	failures int
	cool     time.Duration
	openTill time.Time
	probing  bool
	changed  chan struct{} // closed and replaced when the state changes
}

func newBreaker(threshold int, minCool, maxCool time.Duration, clock seckill.Clock) *breaker {
	return &breaker{threshold: threshold, minCool: minCool, maxCool: maxCool, clock: clock, cool: minCool, changed: make(chan struct{})}
}

// state is "closed", "open" or "half-open".
func (b *breaker) state() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked()
}

func (b *breaker) stateLocked() string {
	switch {
	case b.failures < b.threshold:
		return "closed"
	case b.clock.Now().Before(b.openTill) || b.probing:
		if b.probing {
			return "half-open"
		}
		return "open"
	}
	return "half-open"
}

// wait returns when the caller may try the database: at once while the
// breaker is closed; when open, after the cool-down, as the one probe
// (probe true) or, while a probe is out, when it settles. It reports false
// if ctx ended first.
func (b *breaker) wait(ctx context.Context) (probe, ok bool) {
	for {
		b.mu.Lock()
		if b.failures < b.threshold {
			b.mu.Unlock()
			return false, true
		}
		changed := b.changed
		delay := b.openTill.Sub(b.clock.Now())
		if delay <= 0 && !b.probing {
			b.probing = true
			b.mu.Unlock()
			return true, true
		}
		b.mu.Unlock()
		var (
			timer <-chan time.Time
			t     *time.Timer
		)
		if delay > 0 {
			t = time.NewTimer(delay)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return false, false
		}
	}
}

// abort ends a probe that did not reach the database (its own Redis call
// failed): the next waiter probes instead.
func (b *breaker) abort(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	close(b.changed)
	b.changed = make(chan struct{})
}

// result records the outcome of a try of the database.
func (b *breaker) result(probe bool, transient bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.stateLocked()
	if probe {
		b.probing = false
	}
	if !transient {
		b.failures, b.cool = 0, b.minCool
	} else {
		b.failures++
		if b.failures >= b.threshold {
			if probe {
				b.cool = min(2*b.cool, b.maxCool)
			}
			b.openTill = b.clock.Now().Add(b.cool)
		}
	}
	if after := b.stateLocked(); after != before || probe {
		close(b.changed)
		b.changed = make(chan struct{})
		if b.onStateFunc != nil && after != before {
			b.onStateFunc(after)
		}
	}
}
