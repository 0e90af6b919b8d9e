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

// saveThenFail saves the orders, then answers an error of no known kind
// for the batch holding order: the commit's answer lost (a connection cut
// after COMMIT), or a delivery killed after its commit, before its ack.
type saveThenFail struct {
	Store
	order int64
	saved atomic.Bool
}

func (s *saveThenFail) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	out, err := s.Store.SaveOrders(ctx, orders)
	for _, o := range orders {
		if o.ID == s.order {
			s.saved.Store(true)
			return nil, errors.New("injected: the commit's answer was lost")
		}
	}
	return out, err
}

// TestDeadLetterOfPaidOrder: an order saved, whose message is not
// acknowledged, is paid by its buyer; the message then passes
// MaxDeliveries. It is acknowledged, not dead-lettered: a dead letter would
// give the paid order's unit and slot back to Redis, which would then sell
// a unit the database does not have (found by review: deadLetter looked
// for status created only).
func TestDeadLetterOfPaidOrder(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 3)
	ctx := context.Background()
	id := b.admit(7)
	st := &saveThenFail{Store: b.store, order: id}
	b.poolWith(Config{
		Consumer: "w", Block: 50 * time.Millisecond, Lease: 200 * time.Millisecond,
		ReclaimEvery: 50 * time.Millisecond, MaxDeliveries: 3, BackoffMax: 100 * time.Millisecond,
	}, nil, st, prometheus.NewRegistry(), true)
	testenv.WaitFor(t, 10*time.Second, "the order saved", func() bool { return st.saved.Load() })
	o, err := b.store.PayOrder(ctx, id, seckill.Payment{Ref: "fake_1", At: time.Now()})
	if err != nil || o.Status != seckill.OrderPaid {
		t.Fatalf("PayOrder = %+v, %v", o, err)
	}
	// Past MaxDeliveries (3), the message is settled: nothing pending.
	testenv.WaitFor(t, 20*time.Second, "the message settled", func() bool { return b.pending() == 0 })
	if n := b.dlqLen(); n != 0 {
		t.Errorf("%d dead letters, want none: the order is in the database, paid", n)
	}
	o, _ = b.store.Order(ctx, id)
	n, _ := b.raw.Do(ctx, b.raw.B().Get().Key(b.key("stock")).Build()).AsInt64()
	t.Logf("order %d in the database: %s; Redis stock %d (of 3); buyer 7's slot %d", id, o.Status, n, b.slot(7))
	if n != 2 || b.slot(7) != id {
		t.Errorf("the paid order's unit went back on sale in Redis (stock %d, want 2) and its buyer's slot was freed (%d): Redis now sells one more unit than the database has", n, b.slot(7))
	}
}

// TestBuyerConflictWithPaidOrder: Redis lost a buyer's first order (and
// its unit) and admits them again; the database holds the first one, paid.
// The second admission's unit stands for the paid order's: it stays taken,
// and the buyer's slot goes to the paid order (found by review:
// findBuyerOrder looked for a created order only, and gave the unit back).
func TestBuyerConflictWithPaidOrder(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 3)
	ctx := context.Background()
	first := b.admit(7)
	b.pool("w", true, nil)
	testenv.WaitFor(t, 10*time.Second, "the first order saved", func() bool {
		o, err := b.store.Order(ctx, first)
		return err == nil && o.Status == seckill.OrderCreated
	})
	if _, err := b.store.PayOrder(ctx, first, seckill.Payment{Ref: "fake_1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Redis loses the admission: the slot and the unit it took.
	b.raw.Do(ctx, b.raw.B().Hdel().Key(b.key("buyers")).Field("7").Build())
	b.raw.Do(ctx, b.raw.B().Incr().Key(b.key("stock")).Build())
	b.admit(7)
	testenv.WaitFor(t, 10*time.Second, "the second order dead-lettered", func() bool { return b.dlqLen() == 1 })
	n, _ := b.raw.Do(ctx, b.raw.B().Get().Key(b.key("stock")).Build()).AsInt64()
	v, _ := b.store.Voucher(ctx, b.voucher.ID)
	t.Logf("Redis stock %d, database stock %d, buyer 7's slot %d (paid order %d)", n, v.Stock, b.slot(7), first)
	if n != v.Stock {
		t.Errorf("Redis stock %d, database stock %d: Redis sells a unit the database does not have", n, v.Stock)
	}
}
