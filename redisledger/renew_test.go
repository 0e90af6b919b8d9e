package redisledger

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill"
)

// TestRenewEveryThirdOfTheLease: a hold is renewed every third of its
// lease, and no more once stopped or once a renewal says it is over.
func TestRenewEveryThirdOfTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var renewals atomic.Int32
		stop := renewEvery(t.Context(), 30*time.Second, func(context.Context) bool {
			renewals.Add(1)
			return true
		})
		time.Sleep(35 * time.Second)
		if got := renewals.Load(); got != 3 {
			t.Errorf("renewals after 35 s of a 30 s lease = %d, want 3 (every 10 s)", got)
		}
		stop()
		time.Sleep(time.Minute)
		if got := renewals.Load(); got != 3 {
			t.Errorf("renewals after stop = %d, want still 3", got)
		}

		renewals.Store(0)
		stop = renewEvery(t.Context(), 30*time.Second, func(context.Context) bool {
			return renewals.Add(1) < 2 // the second renewal finds the hold lost
		})
		defer stop()
		time.Sleep(time.Minute)
		if got := renewals.Load(); got != 2 {
			t.Errorf("renewals once one said the hold was over = %d, want 2", got)
		}
	})
}

// TestHoldLostEndsTheWork: a hold whose renewal fails ends the work it
// guards, with ErrUnavailable as the cause, since another instance may
// take the work over; one that renews does not.
func TestHoldLostEndsTheWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renewed := 0
		work, stop := hold(t.Context(), 15*time.Second, "token", "check", func(_ context.Context, token string, ttl time.Duration) (bool, error) {
			if token != "token" || ttl != 15*time.Second {
				t.Errorf("renewed %q for %v, want token for 15s", token, ttl)
			}
			renewed++
			if renewed == 3 {
				return false, errors.New("connection reset")
			}
			return true, nil
		})
		defer stop()
		time.Sleep(12 * time.Second)
		if work.Err() != nil {
			t.Fatalf("work ended after two renewals that held: %v", context.Cause(work))
		}
		time.Sleep(4 * time.Second) // past the third renewal, at 15 s
		if cause := context.Cause(work); !errors.Is(cause, seckill.ErrUnavailable) {
			t.Errorf("work's cause after a failed renewal = %v, want ErrUnavailable", cause)
		}
	})
}
