package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// faulty is the rig's stream and store with a panic injected into the
// first call of one of their methods.
type faulty struct {
	Stream
	Store
	method string
	once   sync.Once
	calls  sync.Map // method → *atomic.Int64
	// renewedAfter is closed once RefreshClaims ran after its panic.
	renewedAfter chan struct{}
}

func newFaulty(stream Stream, store Store, method string) *faulty {
	return &faulty{Stream: stream, Store: store, method: method, renewedAfter: make(chan struct{})}
}

// call counts a call of method, and panics if it is the first of the
// method chosen.
func (f *faulty) call(method string) int64 {
	n, _ := f.calls.LoadOrStore(method, new(atomic.Int64))
	c := n.(*atomic.Int64).Add(1)
	if method == f.method {
		f.once.Do(func() { panic("injected panic in " + method) })
	}
	return c
}

func (f *faulty) count(method string) int64 {
	n, ok := f.calls.Load(method)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (f *faulty) ReadOrders(ctx context.Context, s seckill.Shard, consumer string, count int, block time.Duration) ([]seckill.OrderMessage, error) {
	f.call("ReadOrders")
	return f.Stream.ReadOrders(ctx, s, consumer, count, block)
}

func (f *faulty) ClaimStale(ctx context.Context, s seckill.Shard, consumer string, minIdle time.Duration, count int) ([]seckill.OrderMessage, []string, error) {
	f.call("ClaimStale")
	return f.Stream.ClaimStale(ctx, s, consumer, minIdle, count)
}

func (f *faulty) Backlog(ctx context.Context, s seckill.Shard) (int64, error) {
	f.call("Backlog")
	return f.Stream.Backlog(ctx, s)
}

func (f *faulty) RefreshClaims(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) error {
	if f.call("RefreshClaims") == 2 && f.method == "RefreshClaims" {
		close(f.renewedAfter)
	}
	return f.Stream.RefreshClaims(ctx, s, consumer, entryIDs...)
}

func (f *faulty) UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error) {
	f.call("UnendedVouchers")
	return f.Store.UnendedVouchers(ctx, t)
}

// SaveOrders panics at its first call if chosen. When RefreshClaims is
// chosen, the first batch waits for the renewal to have gone on after the
// panic, so that a renewal happens while it is in flight.
func (f *faulty) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	if f.call("SaveOrders") == 1 && f.method == "RefreshClaims" {
		select {
		case <-f.renewedAfter:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.Store.SaveOrders(ctx, orders)
}

// TestPanicRecovered injects a panic into each goroutine of the pool in
// turn: the panic is logged and counted, the goroutine goes on (orders
// admitted after it are persisted), the batch it hit is delivered again,
// and Stop returns with no slot left taken.
func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		where, method string
	}{
		{"read", "ReadOrders"},
		{"reclaim", "ClaimStale"},
		{"backlog", "Backlog"},
		{"refresh", "UnendedVouchers"},
		{"persist", "SaveOrders"},
		{"keep_claimed", "RefreshClaims"},
	} {
		t.Run(tt.where, func(t *testing.T) {
			b := newRig(t, "mysql", 100)
			ctx := context.Background()
			for u := range int64(10) {
				b.admit(100 + u)
			}
			f := newFaulty(b.cache, b.store, tt.method)
			reg := prometheus.NewRegistry()
			const lease = 300 * time.Millisecond
			p := b.poolWith(Config{
				Consumer: "w", Block: 50 * time.Millisecond, Lease: lease,
				ReclaimEvery: 50 * time.Millisecond, WatchEvery: 50 * time.Millisecond, BacklogEvery: 50 * time.Millisecond,
				BackoffMax: 100 * time.Millisecond, DrainTimeout: 5 * time.Second,
			}, f, f, reg, true)
			panics, err := PanicCounter(reg)
			if err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 10*time.Second, "the panic", func() bool { return testutil.ToFloat64(panics.WithLabelValues(tt.where)) == 1 })
			calls := f.count(tt.method)
			for u := range int64(10) {
				b.admit(200 + u)
			}
			testenv.WaitFor(t, 20*time.Second, "every order persisted", func() bool {
				n, _ := b.store.CountOrders(ctx, b.voucher.ID)
				return n == 20
			})
			testenv.WaitFor(t, 10*time.Second, tt.method+" called again after its panic", func() bool { return f.count(tt.method) > calls })
			if n := b.dlqLen(); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
			if n := testutil.CollectAndCount(panics); n != 1 {
				t.Errorf("panics counted in %d places, want 1 (%s)", n, tt.where)
			}

			stopped := make(chan struct{})
			go func() { p.Stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("Stop did not return")
			}
			if busy, _ := p.slots.state(); busy != 0 {
				t.Errorf("%d slots taken after Stop, want 0", busy)
			}
			if got := testutil.ToFloat64(panics.WithLabelValues(tt.where)); got != 1 {
				t.Errorf("panics counted in %s = %v, want 1", tt.where, got)
			}
		})
	}
}

// TestQueuePanicRecovered: a batch of the queue mode that panics is
// written again one order at a time; the worker goes on, and Stop returns.
func TestQueuePanicRecovered(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 100)
	ctx := context.Background()
	f := newFaulty(nil, b.store, "SaveOrders")
	reg := prometheus.NewRegistry()
	// One worker, started once the orders are queued: one batch of them all.
	q := b.queue(QueueConfig{Workers: 1}, f, reg, false)
	panics, err := PanicCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	for u := range int64(20) {
		o, err := b.reserve(100 + u)
		if err != nil {
			t.Fatal(err)
		}
		offer(t, q, o)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "every order persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 20
	})
	if got := testutil.ToFloat64(panics.WithLabelValues("queue")); got != 1 {
		t.Errorf("panics counted = %v, want 1", got)
	}
	stopped := make(chan struct{})
	go func() { q.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return")
	}
}

// poisonStore panics saving any batch that holds one chosen order.
type poisonStore struct {
	Store
	order int64
}

func (s poisonStore) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	for _, o := range orders {
		if o.ID == s.order {
			panic("poison order")
		}
	}
	return s.Store.SaveOrders(ctx, orders)
}

// TestPanicHoldsBackOnlyItsOrder: an order whose save panics every time
// reaches the dead letters alone; the other orders of its batch are
// written. (Each delivery of the batch used to count for all of them, and
// the whole batch went to the dead letters.)
func TestPanicHoldsBackOnlyItsOrder(t *testing.T) {
	const n = 200
	b := newRig(t, "mysql", n)
	var poison int64
	for u := int64(1); u <= n; u++ {
		id := b.admit(u)
		if u == n/2 {
			poison = id
		}
	}
	b.poolWith(Config{
		Consumer: "w", Block: 50 * time.Millisecond, Lease: 200 * time.Millisecond,
		ReclaimEvery: 50 * time.Millisecond, MaxDeliveries: 3, BackoffMax: 100 * time.Millisecond,
	}, nil, poisonStore{Store: b.store, order: poison}, prometheus.NewRegistry(), true)
	var created int64
	testenv.WaitFor(t, 30*time.Second, "every order settled", func() bool {
		c, err := b.store.CountOrders(context.Background(), b.voucher.ID)
		if err != nil {
			t.Fatal(err)
		}
		created = c
		return b.pending() == 0 && created+b.dlqLen() >= n
	})
	if created != n-1 || b.dlqLen() != 1 {
		t.Fatalf("orders created %d of %d, dead letters %d: want %d and 1 (the poison order alone)", created, n, b.dlqLen(), n-1)
	}
}
