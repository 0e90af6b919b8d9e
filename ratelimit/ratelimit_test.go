package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told, safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newLimiter(t *testing.T, cfg Config) (*Limiter[int64], *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	cfg.Now = clock.now
	l := New(cfg, HashInt64)
	if l == nil {
		t.Fatalf("New(%+v) = nil", cfg)
	}
	return l, clock
}

// take calls Allow n times and returns how many were allowed and the last
// refusal's wait.
func take(l *Limiter[int64], key int64, n int) (allowed int, wait time.Duration) {
	for range n {
		if ok, w := l.Allow(key); ok {
			allowed++
		} else {
			wait = w
		}
	}
	return allowed, wait
}

func TestBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		rate         float64
		burst        int
		n            int
		want         int
		wantWait     time.Duration
		wantNoRefuse bool
	}{
		{name: "below", rate: 5, burst: 10, n: 9, want: 9, wantNoRefuse: true},
		{name: "at", rate: 5, burst: 10, n: 10, want: 10, wantNoRefuse: true},
		{name: "above", rate: 5, burst: 10, n: 11, want: 10, wantWait: 200 * time.Millisecond},
		{name: "far above", rate: 5, burst: 10, n: 1000, want: 10, wantWait: 200 * time.Millisecond},
		{name: "burst 1", rate: 0.5, burst: 1, n: 3, want: 1, wantWait: 2 * time.Second},
		{name: "default burst", rate: 2.5, n: 10, want: 3, wantWait: 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLimiter(t, Config{Rate: tc.rate, Burst: tc.burst})
			allowed, wait := take(l, 1, tc.n)
			if allowed != tc.want || wait != tc.wantWait {
				t.Errorf("%d requests: allowed %d, last wait %v; want %d, %v", tc.n, allowed, wait, tc.want, tc.wantWait)
			}
		})
	}
}

func TestRefill(t *testing.T) {
	t.Parallel()
	l, clock := newLimiter(t, Config{Rate: 5, Burst: 10})
	if got, _ := take(l, 1, 10); got != 10 {
		t.Fatalf("first burst: allowed %d, want 10", got)
	}
	clock.advance(time.Second)
	if got, wait := take(l, 1, 20); got != 5 || wait != 200*time.Millisecond {
		t.Errorf("after 1s: allowed %d (wait %v), want 5 (200ms)", got, wait)
	}
	clock.advance(150 * time.Millisecond)
	if ok, wait := l.Allow(1); ok || wait != 50*time.Millisecond {
		t.Errorf("150ms into a 200ms token: Allow = %v, %v; want false, 50ms", ok, wait)
	}
	clock.advance(50 * time.Millisecond)
	if ok, _ := l.Allow(1); !ok {
		t.Error("a token that came back was refused")
	}
	// Idle longer than a fill: full, and no fuller than full.
	clock.advance(time.Hour)
	if got, _ := take(l, 1, 20); got != 10 {
		t.Errorf("after an hour: allowed %d, want 10", got)
	}
}

func TestKeysIndependent(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, Config{Rate: 1, Burst: 3})
	take(l, 1, 100)
	if got, _ := take(l, 2, 100); got != 3 {
		t.Errorf("key 2 after key 1 drained: allowed %d, want 3", got)
	}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, Config{Rate: 1, Burst: 2})
	for range 5 {
		if ok, _ := l.Allow(1); !ok {
			t.Fatal("refused though every token was refunded")
		}
		l.Refund(1)
	}
	if got, _ := take(l, 1, 5); got != 2 {
		t.Errorf("after refunds: allowed %d, want 2", got)
	}
	l.Refund(99) // no bucket: nothing to give back, and no panic
	if l.Len() != 1 {
		t.Errorf("Refund of an unknown key made a bucket: Len = %d", l.Len())
	}
}

func TestOff(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0, -1} {
		l := New(Config{Rate: rate, Burst: 1}, HashInt64)
		if l != nil {
			t.Fatalf("rate %v: New returned a limiter", rate)
		}
		if got, _ := take(l, 1, 1000); got != 1000 {
			t.Errorf("rate %v: nil limiter allowed %d of 1000", rate, got)
		}
		l.Refund(1)
		if l.Len() != 0 {
			t.Errorf("nil limiter: Len = %d", l.Len())
		}
	}
}

func TestHugeAndTinyRates(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, Config{Rate: 1e-12, Burst: 1 << 30})
	if ok, _ := l.Allow(1); !ok {
		t.Error("tiny rate, huge burst: first request refused")
	}
	l, _ = newLimiter(t, Config{Rate: 1e-12, Burst: 1})
	take(l, 1, 1)
	if ok, wait := l.Allow(1); ok || wait <= 0 || wait > 24*time.Hour {
		t.Errorf("tiny rate: Allow = %v, %v; want a refusal within a day", ok, wait)
	}
	l, _ = newLimiter(t, Config{Rate: 1e12, Burst: 1})
	if got, _ := take(l, 1, 2); got != 1 {
		t.Errorf("huge rate, frozen clock: allowed %d of 2, want 1", got)
	}
}

// TestEvictionBounded floods the limiter with distinct keys, fresh ones
// (so none are full and all must be forgiven) and over time, and checks
// that it keeps no more buckets than its bound.
func TestEvictionBounded(t *testing.T) {
	t.Parallel()
	const maxKeys = 640
	l, clock := newLimiter(t, Config{Rate: 1, Burst: 5, MaxKeys: maxKeys})
	for k := range int64(100_000) {
		take(l, k, 5) // drained: never full before the next sweep
		if n := l.Len(); n > maxKeys {
			t.Fatalf("after %d keys: %d buckets, want at most %d", k+1, n, maxKeys)
		}
		if k%1000 == 0 {
			clock.advance(100 * time.Millisecond)
		}
	}
}

// TestEvictionKeepsUsedBuckets checks that only full buckets are dropped
// while enough of them are: a drained key must not be forgiven because
// other keys came and went on its shard.
func TestEvictionKeepsUsedBuckets(t *testing.T) {
	t.Parallel()
	const perShard = 8
	l, clock := newLimiter(t, Config{Rate: 1, Burst: 2, MaxKeys: numShards * perShard})
	const drained = -1
	home := l.shard(drained)
	// keys returns n keys that share the drained key's shard.
	next := int64(0)
	keys := func(n int) []int64 {
		var out []int64
		for ; len(out) < n; next++ {
			if l.shard(next) == home {
				out = append(out, next)
			}
		}
		return out
	}
	take(l, drained, 2) // full again after 2s
	for _, k := range keys(perShard - 2) {
		take(l, k, 1) // full again after 1s
	}
	clock.advance(1500 * time.Millisecond)
	// The shard reaches its bound and is swept once: the full buckets go,
	// and enough of them that nothing else must.
	for _, k := range keys(perShard - 1) {
		take(l, k, 1)
	}
	if got, _ := take(l, drained, 5); got != 1 {
		t.Errorf("drained key after 1.5s of churn: allowed %d, want 1 (it was forgiven)", got)
	}
	home.mu.Lock()
	n := len(home.tats)
	home.mu.Unlock()
	if n > perShard {
		t.Errorf("shard holds %d buckets, want at most %d", n, perShard)
	}
}

// TestIdleSweep checks that under the bound buckets idle for a whole fill
// time are dropped as new keys arrive, so memory follows the active keys.
func TestIdleSweep(t *testing.T) {
	t.Parallel()
	l, clock := newLimiter(t, Config{Rate: 10, Burst: 10})
	for k := range int64(10_000) {
		take(l, k, 1)
	}
	if n := l.Len(); n != 10_000 {
		t.Fatalf("%d buckets, want 10000", n)
	}
	clock.advance(2 * time.Second)
	for k := int64(10_000); k < 20_000; k++ {
		take(l, k, 1)
	}
	if n := l.Len(); n > 10_000+64 {
		t.Errorf("after the first keys idled 2s: %d buckets, want about 10000", n)
	}
}

// TestConcurrentOneKey runs many goroutines on one key at a frozen time:
// exactly the burst passes, then exactly what a second refills.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	l, clock := newLimiter(t, Config{Rate: 5, Burst: 10})
	wave := func() int64 {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 50 {
					if ok, _ := l.Allow(7); ok {
						allowed.Add(1)
					}
					take(l, 8, 1) // another key on the same or another shard
				}
			})
		}
		wg.Wait()
		return allowed.Load()
	}
	if got := wave(); got != 10 {
		t.Errorf("first wave: %d allowed, want 10", got)
	}
	clock.advance(time.Second)
	if got := wave(); got != 5 {
		t.Errorf("after 1s: %d allowed, want 5", got)
	}
}

func TestHashSpreads(t *testing.T) {
	t.Parallel()
	var counts [numShards]int
	for k := range int64(64_000) {
		counts[HashInt64(k)>>(64-shardBits)]++
	}
	for i, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("shard %d holds %d of 64000 sequential keys, want about 1000", i, n)
		}
	}
	var b [16]byte
	b[10], b[11] = 0xff, 0xff // IPv4-mapped
	seen := map[uint64]bool{}
	for i := range 256 {
		b[15] = byte(i)
		seen[HashBytes16(b)>>(64-shardBits)] = true
	}
	if len(seen) < 48 {
		t.Errorf("256 neighbouring addresses fall in %d shards, want most of 64", len(seen))
	}
}

func BenchmarkAllow(b *testing.B) {
	l := New(Config{Rate: 1e9, Burst: 1 << 20}, HashInt64)
	b.ReportAllocs()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		k := seq.Add(1) * 1_000_003
		for pb.Next() {
			k++
			l.Allow(k % 4096)
		}
	})
}
