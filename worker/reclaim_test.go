package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

// pendingOf returns how many messages consumer holds.
func (b *rig) pendingOf(consumer string) int64 {
	b.t.Helper()
	res, err := b.raw.Do(context.Background(), b.raw.B().Xpending().Key(b.key("orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		b.t.Fatal(err)
	}
	owners, _ := res[3].ToArray()
	for _, o := range owners {
		f, _ := o.ToArray()
		if name, _ := f[0].ToString(); name == consumer {
			n, _ := f[1].AsInt64()
			return n
		}
	}
	return 0
}

// TestReclaimKilledInstanceBacklog: an instance dies holding 16,000 order
// messages (read, never acknowledged). A live instance must take all of
// them over in its first reclaim pass after the lease, not a hundred a
// pass: at the default of a pass every 5 s that took 13 minutes. (Passes
// here are 10 s apart, so that a loaded machine has time for one.)
func TestReclaimKilledInstanceBacklog(t *testing.T) {
	t.Parallel()
	const orders = 16_000
	b := newRig(t, "mysql", orders)
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for u := next.Add(1); u <= orders; u = next.Add(1) {
				b.admit(u)
			}
		})
	}
	wg.Wait()
	// The dead instance read every message and never acknowledged one.
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "dead", orders, 0)
	if err != nil || len(msgs) != orders {
		t.Fatalf("the dead instance read %d messages, %v; want %d", len(msgs), err, orders)
	}
	const lease = 2 * time.Second
	start := time.Now()
	p := b.poolWith(Config{
		Consumer: "live", Lease: lease, Block: 50 * time.Millisecond,
		ReclaimEvery: 10 * time.Second, WatchEvery: 100 * time.Millisecond,
	}, nil, nil, prometheus.NewRegistry(), true)
	p.Watch(b.voucher)
	// The first pass after the lease is at 10 s, the second at 20 s: all
	// must be taken over before the second would start.
	testenv.WaitFor(t, 19500*time.Millisecond, "every message of the dead instance taken over", func() bool {
		return b.pendingOf("dead") == 0
	})
	t.Logf("%d messages taken over %v after the live instance started", orders, time.Since(start).Round(time.Millisecond))
	testenv.WaitFor(t, time.Minute, "every order created", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == orders
	})
	t.Logf("and created %v after", time.Since(start).Round(time.Millisecond))
	if dl := b.dlqLen(); dl != 0 {
		t.Errorf("%d dead letters, want none", dl)
	}
}
