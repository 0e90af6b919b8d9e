package worker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// waiter is one caller of breaker.wait in a goroutine of its own, so that
// the test can tell whether it is still waiting.
type waiter struct {
	done  chan struct{}
	probe bool
	ok    bool
}

func startWait(ctx context.Context, b *breaker) *waiter {
	w := &waiter{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.probe, w.ok = b.wait(ctx)
	}()
	return w
}

// returned reports whether the wait returned, once every goroutine of the
// bubble is blocked (synctest.Wait), so that a false is not a race.
func (w *waiter) returned() bool {
	synctest.Wait()
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// TestBreaker drives the breaker's clock with synctest: time moves only
// when every goroutine waits, so "exactly after the cool-down" is exact.
func TestBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(3, time.Second, 4*time.Second, time.Now)
		ctx := context.Background()
		try := func(fail bool) {
			t.Helper()
			probe, ok := b.wait(ctx)
			if !ok {
				t.Fatal("wait ended")
			}
			b.result(probe, fail)
		}
		for i := range 2 {
			try(true)
			if s := b.state(); s != "closed" {
				t.Fatalf("after %d failures: %s, want closed", i+1, s)
			}
		}
		try(true)
		if s := b.state(); s != "open" {
			t.Fatalf("after 3 failures: %s, want open", s)
		}
		opened := time.Now()

		// While open, callers wait: a deadline ends the wait.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if _, ok := b.wait(short); ok {
			t.Fatal("wait returned while the breaker is open")
		}
		cancel()

		// The cool-down ends exactly a second after the breaker opened:
		// then one probe goes, and the others wait for it.
		first := startWait(ctx, b)
		time.Sleep(time.Second - 20*time.Millisecond - time.Nanosecond)
		if first.returned() {
			t.Fatalf("wait returned %v after the breaker was open %v; want it to wait the second out", first.probe, time.Since(opened))
		}
		time.Sleep(time.Nanosecond)
		if !first.returned() || !first.ok || !first.probe {
			t.Fatalf("a second after opening: probe %v ok %v; want the probe", first.probe, first.ok)
		}
		if s := b.state(); s != "half-open" {
			t.Fatalf("with the probe out: %s, want half-open", s)
		}
		second := startWait(ctx, b)
		if second.returned() {
			t.Fatal("a second caller went while the probe was out")
		}

		// The probe fails: open again, twice as long. The waiting caller
		// is the next probe, exactly two seconds later.
		b.result(true, true)
		if s := b.state(); s != "open" {
			t.Fatalf("after a failed probe: %s, want open", s)
		}
		time.Sleep(2*time.Second - time.Nanosecond)
		if second.returned() {
			t.Fatal("the cool-down did not double after a failed probe")
		}
		time.Sleep(time.Nanosecond)
		if !second.returned() || !second.probe {
			t.Fatal("the waiting caller did not become the next probe")
		}

		// Failed probes double the cool-down up to the maximum, 4s.
		for _, cool := range []time.Duration{4 * time.Second, 4 * time.Second} {
			b.result(true, true)
			start := time.Now()
			if probe, ok := b.wait(ctx); !probe || !ok {
				t.Fatalf("after a failed probe: wait = %v, %v; want the next probe", probe, ok)
			}
			if got := time.Since(start); got != cool {
				t.Fatalf("cool-down %v, want %v", got, cool)
			}
		}

		// A probe that never reached the database (abort) hands the
		// probe to the next waiter at once.
		third := startWait(ctx, b)
		if third.returned() {
			t.Fatal("a caller went while the probe was out")
		}
		b.abort(true)
		if !third.returned() || !third.probe {
			t.Fatal("after an aborted probe the waiting caller did not probe")
		}

		b.result(true, false) // the probe succeeds: closed
		if s := b.state(); s != "closed" {
			t.Fatalf("after a good probe: %s, want closed", s)
		}
		if probe, ok := b.wait(ctx); probe || !ok {
			t.Fatalf("closed: wait = %v, %v; want no probe, ok", probe, ok)
		}

		// A success resets the cool-down: three failures open it for the
		// minimum again, not the maximum it had reached.
		for range 3 {
			try(true)
		}
		start := time.Now()
		if probe, ok := b.wait(ctx); !probe || !ok {
			t.Fatalf("reopened: wait = %v, %v; want a probe", probe, ok)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("cool-down after a success and three failures: %v, want 1s", got)
		}
	})
}

// TestBreakerStateChanges: the breaker reports each change of state it
// makes (the gauge of the workers' breaker), not the passing of time.
func TestBreakerStateChanges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(2, time.Second, 4*time.Second, time.Now)
		var got []string
		b.onStateFunc = func(s string) { got = append(got, s) }
		ctx := context.Background()
		for _, fail := range []bool{true, true} {
			probe, _ := b.wait(ctx)
			b.result(probe, fail)
		}
		probe, _ := b.wait(ctx) // a second later, the probe
		b.result(probe, false)
		want := []string{"open", "closed"}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("states reported %q, want %q", got, want)
		}
	})
}
