package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// heldStore holds every save until released.
type heldStore struct {
	Store
	release chan struct{}
}

func (s heldStore) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.SaveOrders(ctx, orders)
}

// TestRetire: once a voucher's sale ended longer than the retention ago,
// its keys are deleted from Redis, but only when its stream is drained:
// orders still waiting for the database are written first, and its dead
// letters' orders are failed in the database. Its reader then stops.
func TestRetire(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	// A dead letter whose order the database somehow lacks as failed:
	// moved by hand, as the workers move one, but for the record.
	dead := b.admit(200)
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "x", 10, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read the order to dead-letter: %v, %v", msgs, err)
	}
	if _, err := b.cache.DeadLetter(ctx, msgs[0], seckill.DeadLetter{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for u := range int64(3) {
		b.admit(100 + u)
	}
	var clock atomic.Pointer[time.Time]
	now := time.Now()
	clock.Store(&now)
	release := make(chan struct{})
	p := b.poolWith(Config{
		Consumer: "r", Block: 50 * time.Millisecond, Lease: time.Second, ReclaimEvery: 100 * time.Millisecond,
		WatchEvery: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Retention: time.Hour,
		Clock: func() time.Time { return *clock.Load() },
	}, nil, heldStore{Store: b.store, release: release}, prometheus.NewRegistry(), true)
	testenv.WaitFor(t, 10*time.Second, "the orders read and held", func() bool { return b.pending() == 3 })

	// The sale ended two hours ago: past the retention, with orders held.
	past := b.voucher.EndTime.Add(2 * time.Hour)
	clock.Store(&past)
	p.refresh()
	if n := b.int(b.raw.B().Exists().Key(b.key("stock"), b.key("meta"), b.key("orders")).Build()); n != 3 {
		t.Fatalf("%d of the voucher's keys left while its orders wait for the database, want all 3", n)
	}
	if !contains(p.watched(), b.voucher.ID) {
		t.Fatal("the voucher's reader stopped while its orders wait for the database")
	}
	close(release)
	// Its meta stays as a tombstone, for a while (redis.Client.DropVoucher).
	testenv.WaitFor(t, 10*time.Second, "the voucher's keys deleted once drained", func() bool {
		return b.int(b.raw.B().Exists().Key(b.key("stock"), b.key("buyers"), b.key("orders"), b.key("dlq")).Build()) == 0
	})
	if n, _ := b.store.CountOrders(ctx, b.voucher.ID); n != 3 {
		t.Errorf("%d orders created, want the 3 held", n)
	}
	if o, err := b.store.Order(ctx, dead); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the dead letter's order = %+v, %v; want failed in the database", o, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the reader stopped", func() bool { return !contains(p.watched(), b.voucher.ID) })
	// Nothing makes the keys again: no reader, and no rebuild of it, not
	// even the one of a reader that raced the deletion and found its
	// stream gone.
	p.refresh()
	if err := p.rebuild(ctx, b.voucher.ID); !errors.Is(err, seckill.ErrEnded) {
		t.Errorf("a reader's rebuild of the retired voucher: %v, want ErrEnded", err)
	}
	if n := b.int(b.raw.B().Exists().Key(b.key("stock"), b.key("buyers"), b.key("orders")).Build()); n != 0 {
		t.Errorf("%d of the voucher's keys made again after it was retired", n)
	}
}

// contains reports whether one of streams is the voucher's.
func contains(streams []seckill.Shard, id int64) bool {
	for _, s := range streams {
		if s.VoucherID == id {
			return true
		}
	}
	return false
}
