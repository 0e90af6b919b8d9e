package worker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackoff: each wait lasts a random time up to the current step (full
// jitter), and the step doubles from the minimum up to the maximum; reset
// starts again at the minimum.
func TestBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &backoff{min: 50 * time.Millisecond, max: 400 * time.Millisecond, next: 50 * time.Millisecond}
		steps := []time.Duration{50, 100, 200, 400, 400, 400}
		for i, step := range steps {
			step *= time.Millisecond
			start := time.Now()
			if !b.wait(ctx) {
				t.Fatal("wait ended without ctx ending")
			}
			if got := time.Since(start); got <= 0 || got > step {
				t.Fatalf("wait %d lasted %v; want more than 0, at most the step %v", i+1, got, step)
			}
			if want := min(2*step, b.max); b.next != want {
				t.Fatalf("after wait %d the step is %v, want %v", i+1, b.next, want)
			}
		}
		// Full jitter spans the step: of 100 waits at the maximum, the
		// longest passes three quarters of it (all below: 0.75^100).
		var longest time.Duration
		for range 100 {
			start := time.Now()
			b.wait(ctx)
			longest = max(longest, time.Since(start))
		}
		if longest <= 300*time.Millisecond || longest > b.max {
			t.Fatalf("the longest of 100 waits at the maximum lasted %v; want within (300ms, 400ms]", longest)
		}
		b.reset()
		start := time.Now()
		b.wait(ctx)
		if got := time.Since(start); got > b.min {
			t.Fatalf("after reset a wait lasted %v, more than the minimum %v", got, b.min)
		}
	})
}

// TestBackoffEnds: a wait returns false as soon as its ctx ends, without
// waiting out its step.
func TestBackoffEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &backoff{min: time.Hour, max: time.Hour, next: time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan bool)
		go func() { done <- b.wait(ctx) }()
		synctest.Wait()
		cancel()
		if <-done {
			t.Fatal("wait reported true after its ctx ended")
		}
		if got := time.Since(start); got != 0 {
			t.Fatalf("wait took %v after its ctx ended, want no time", got)
		}
	})
}
