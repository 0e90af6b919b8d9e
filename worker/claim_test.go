package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
)

// TestSixPoolsDatabaseDown: six instances read one voucher's stream, with a
// short lease, while the database is down for longer than six leases and
// buyers keep buying: the backlog grows, and each pool widens with it a
// slot at a time. A message read or claimed before a worker is free to
// take it would sit with nothing renewing its claim: the instances would
// claim each other's waiting batches, every slot that opens freeing a
// reader or reclaimer to take one more, until they pass MaxDeliveries and
// good orders go to the dead letters untried. When the database is back,
// every order must be created, none dead-lettered or failed.
func TestSixPoolsDatabaseDown(t *testing.T) {
	t.Parallel()
	const (
		pools = 6
		// A consumer counts as alive for half a lease (ClaimStale): 1 s
		// outlasts a loaded machine's stalls, 250 ms did not always.
		lease = time.Second
	)
	b := newRig(t, "mysql", 10_000)
	ctx := context.Background()
	proxy := faults.StartProxy(t, "127.0.0.1:3306")
	viaProxy, err := mysql.Open(ctx, strings.Replace(b.dbURL, "127.0.0.1:3306", proxy.Addr(), 1), 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaProxy.Close() })
	var admitted int64
	admit := func(n int) {
		for range n {
			b.admit(100_000 + admitted)
			admitted++
		}
	}
	admit(200)

	proxy.Down()
	outage := time.After(8 * lease)
	for i := range pools {
		p := b.poolWith(Config{
			Consumer: fmt.Sprintf("instance-%d", i),
			Workers:  1, WorkersMax: 64, BatchSize: 10, BacklogEvery: 50 * time.Millisecond,
			Lease: lease, ReclaimEvery: 50 * time.Millisecond,
			Block: 50 * time.Millisecond, WatchEvery: 100 * time.Millisecond,
			BreakerMin: 10 * time.Millisecond, BreakerMax: 40 * time.Millisecond,
			BackoffMax: 100 * time.Millisecond,
		}, nil, viaProxy, prometheus.NewRegistry(), true)
		p.Watch(b.voucher)
	}
	// A hundred buyers a second while the database is down.
	for down := true; down; {
		select {
		case <-outage:
			down = false
		case <-time.After(50 * time.Millisecond):
			admit(5)
		}
	}
	// Every message read is held by a worker that renews its claim, and a
	// claim from a live instance does not count: no message was delivered
	// twice, but for a renewal so late, on a loaded machine, that its
	// instance looked dead.
	if id, n := b.mostDelivered(); n > 2 {
		t.Errorf("order message %s delivered %d times during the outage, want at most 2", id, n)
	}
	proxy.Up()

	testenv.WaitFor(t, 60*time.Second, "every order settled", func() bool {
		created, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return created+b.dlqLen() == admitted && b.pending() == 0
	})
	created, _ := b.store.CountOrders(ctx, b.voucher.ID)
	failed, _ := b.store.CountFailedOrders(ctx, b.voucher.ID)
	if dl := b.dlqLen(); created != admitted || dl != 0 || failed != 0 {
		t.Errorf("%d orders created, %d dead-lettered, %d failed; want all %d created", created, dl, failed, admitted)
	}
}

// mostDelivered returns the pending message delivered the most times, and
// how many.
func (b *rig) mostDelivered() (string, int64) {
	b.t.Helper()
	rows, err := b.raw.Do(context.Background(), b.raw.B().Xpending().Key(b.key("orders")).Group(redis.Group).
		Start("-").End("+").Count(100_000).Build()).ToArray()
	if err != nil {
		b.t.Fatal(err)
	}
	var most string
	var max int64
	for _, r := range rows {
		f, _ := r.ToArray()
		if n, _ := f[3].AsInt64(); n > max {
			most, _ = f[0].ToString()
			max = n
		}
	}
	return most, max
}

// TestPendingOverLimitAtStart: an instance that restarts reads back the
// messages it was given before; one delivered more than MaxDeliveries
// times goes to the dead letters, as it would if another had claimed it.
func TestPendingOverLimitAtStart(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	ids := []int64{b.admit(1), b.admit(2), b.admit(3)}
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "w", 10, 0)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("read %d, %v; want 3", len(msgs), err)
	}
	// The first was delivered MaxDeliveries times already (5): the instance
	// died on it again and again.
	if err := b.raw.Do(ctx, b.raw.B().Xclaim().Key(b.key("orders")).Group(redis.Group).Consumer("w").MinIdleTime("0").
		Id(msgs[0].EntryID).Retrycount(5).Justid().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// A long lease: the messages are read back at start, not reclaimed.
	p := b.poolWith(Config{Consumer: "w", Block: 50 * time.Millisecond, Lease: time.Minute}, nil, nil, prometheus.NewRegistry(), true)
	testenv.WaitFor(t, 10*time.Second, "the three messages settled", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n+b.dlqLen() == 3 && b.pending() == 0
	})
	if n := b.dlqLen(); n != 1 {
		t.Fatalf("%d dead letters, want 1: the message delivered a sixth time", n)
	}
	if o, err := b.store.Order(ctx, ids[0]); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the order delivered six times = %+v, %v; want failed", o, err)
	}
	for _, id := range ids[1:] {
		if o, err := b.store.Order(ctx, id); err != nil || o.Status != seckill.OrderCreated {
			t.Errorf("order %d = %+v, %v; want created", id, o, err)
		}
	}
	if got := b.redisStock(); got != 8 {
		t.Errorf("Redis stock %d, want 8: the dead letter's unit given back", got)
	}
	if got := testutil.ToFloat64(p.metrics.deadLetters); got != 1 {
		t.Errorf("dead letters metric = %v, want 1", got)
	}
}

// failingStore fails every save of one order with an error of no known
// kind: neither transient nor a refusal.
type failingStore struct {
	Store
	order int64
}

func (s failingStore) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	for _, o := range orders {
		if o.ID == s.order {
			return nil, errors.New("injected failure of no known kind")
		}
	}
	return s.Store.SaveOrders(ctx, orders)
}

// TestPoisonWithLiveConsumer: a message whose save fails every time with
// an error of no known kind stays pending and is delivered again; its
// consumer lives on, and a reclaim from a live consumer does not count a
// delivery, so each failed try must: it reaches the dead letters after
// MaxDeliveries, and the other orders are created.
func TestPoisonWithLiveConsumer(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	b.admit(1)
	poison := b.admit(2)
	b.admit(3)
	p := b.poolWith(Config{
		Consumer: "w", Block: 50 * time.Millisecond, Lease: 200 * time.Millisecond,
		ReclaimEvery: 50 * time.Millisecond, MaxDeliveries: 3, BackoffMax: 100 * time.Millisecond,
	}, nil, failingStore{Store: b.store, order: poison}, prometheus.NewRegistry(), true)
	testenv.WaitFor(t, 20*time.Second, "the poison dead-lettered", func() bool { return b.dlqLen() == 1 })
	if o, err := b.store.Order(ctx, poison); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the poison order = %+v, %v; want failed", o, err)
	}
	if n, _ := b.store.CountOrders(ctx, b.voucher.ID); n != 2 {
		t.Errorf("%d orders created, want 2", n)
	}
	if got := testutil.ToFloat64(p.metrics.reclaimed); got < 3 {
		t.Errorf("reclaimed metric = %v, want the poison reclaimed 3 times at least", got)
	}
}
