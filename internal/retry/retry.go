// Package retry runs an operation again while it fails in a way that a new
// attempt may not meet: a transaction that lost to a concurrent one, a
// store that reported a transient failure. It is the one retry loop of the
// stores (mysql, sqlite, postgres) and of their conformance suite; what
// counts as retryable, how often, and what the caller reports when the
// attempts run out stay with each caller.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy says when and how often [Do] calls an operation again.
type Policy struct {
	// Attempts is how many times Do calls the operation at most; below 1
	// counts as 1.
	Attempts int
	// Retryable reports whether an operation that failed with err may
	// succeed if called again.
	Retryable func(err error) bool
	// Wait returns how long to wait after the nth call failed, before the
	// next: [Jitter], for transactions that collided. Nil means to call
	// again at once, without a look at the context.
	Wait func(n int) time.Duration
}

// Do calls try until it returns nil or an error that p.Retryable rejects,
// at most p.Attempts times, waiting p.Wait between calls. It returns try's
// last error as it is: one that p.Retryable accepts means the attempts ran
// out, which the caller words (the stores as seckill.ErrTransient). If ctx
// ends while Do waits, it returns ctx.Err().
func Do(ctx context.Context, p Policy, try func() error) error {
	for n := 1; ; n++ {
		err := try()
		if err == nil || !p.Retryable(err) || n >= p.Attempts {
			return err
		}
		if p.Wait == nil {
			continue
		}
		t := time.NewTimer(p.Wait(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Jitter is a random time below n milliseconds, n >= 1: the wait after the
// nth failed call, so that transactions that collided do not collide again
// at once, and spread further the more often they have.
func Jitter(n int) time.Duration {
	return time.Duration(rand.Int64N(int64(n) * int64(time.Millisecond)))
}
