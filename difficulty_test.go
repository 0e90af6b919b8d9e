package seckill

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeBacklog says the voucher's backlog is above its mark while on.
type fakeBacklog struct{ on atomic.Bool }

func (b *fakeBacklog) Backlogged(int64) bool { return b.on.Load() }

// TestDifficultyFollowsLoad: the worker doubles a voucher's maxnumber each
// second more buyers than the rate ask for it or its backlog is above
// its mark, up to MaxNumber, halves it back each quiet second down to
// MinNumber, and then forgets the voucher; another voucher is not moved.
func TestDifficultyFollowsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d Difficulty
		cfg := ChallengeConfig{MinNumber: 1000, MaxNumber: 8000, Rate: 10}
		backlog := &fakeBacklog{}
		d.start(t.Context(), cfg, backlog, slog.New(slog.DiscardHandler))
		defer d.stop()
		cfg = cfg.withDefaults()
		// second waits for the worker's next step: fake time, in the
		// bubble, moves only when every goroutine waits.
		second := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		time.Sleep(time.Second / 2) // between the worker's ticks
		want := func(what string, voucher, n int64) {
			t.Helper()
			if got := d.Number(voucher, cfg); got != n {
				t.Errorf("%s: maxnumber of voucher %d = %d, want %d", what, voucher, got, n)
			}
		}
		want("at rest", 1, 1000)
		for user := range int64(10) {
			d.hit(1, user, cfg)
			d.hit(1, user, cfg) // again: the same buyer
		}
		d.hit(2, 1, cfg)
		second()
		want("at the rate", 1, 1000)
		for user := range int64(11) {
			d.hit(1, user, cfg)
		}
		second()
		want("above the rate", 1, 2000)
		want("another voucher, quiet", 2, 1000)
		backlog.on.Store(true)
		second()
		want("backlogged", 1, 4000)
		second()
		want("backlogged", 1, 8000)
		second()
		want("backlogged, at the top", 1, 8000)
		if got := d.Highest(cfg); got != 8000 {
			t.Errorf("Highest = %d, want 8000", got)
		}
		backlog.on.Store(false)
		for _, n := range []int64{4000, 2000, 1000, 1000} {
			second()
			want("quiet", 1, n)
		}
		n := 0
		d.vouchers.Range(func(any, any) bool { n++; return true })
		if n != 0 {
			t.Errorf("%d vouchers remembered at rest, want 0", n)
		}
	})
}

// TestDifficultyCountsBuyersNotRequests: one buyer asking far faster than
// the rate, from many goroutines at once, leaves the voucher at rest;
// more distinct buyers than the rate, each asking once, raise it.
func TestDifficultyCountsBuyersNotRequests(t *testing.T) {
	t.Parallel()
	var d Difficulty
	cfg := ChallengeConfig{MinNumber: 1000, MaxNumber: 8000, Rate: 50}.withDefaults()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				d.hit(1, 42, cfg)
			}
		})
	}
	wg.Wait()
	d.Step(cfg, nil)
	if got := d.Number(1, cfg); got != 1000 {
		t.Errorf("one buyer's 8,000 requests in a second: maxnumber %d, want 1000", got)
	}
	for user := range int64(51) {
		wg.Go(func() { d.hit(1, user, cfg) })
	}
	wg.Wait()
	d.Step(cfg, nil)
	if got := d.Number(1, cfg); got != 2000 {
		t.Errorf("51 buyers in a second, the rate 50: maxnumber %d, want 2000", got)
	}
}
