package seckill_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/soldout"
)

// buyOnce asks s for user's order of v until the answer is final, as
// shardRig.ask does through the rig's own service.
func buyOnce(t *testing.T, s *seckill.OrderService, v *seckill.Voucher, user int64) answer {
	ctx := context.Background()
	for try := 0; ; try++ {
		o, err := s.Buy(ctx, user, v.ID)
		var e *seckill.Error
		switch {
		case err == nil:
			return answer{order: o.ID}
		case errors.As(err, &e) && e.Kind == seckill.ErrDuplicateOrder:
			return answer{order: e.OrderID, duplicate: true}
		case errors.Is(err, seckill.ErrSoldOut):
			return answer{soldOut: true}
		case errors.Is(err, seckill.ErrUnavailable) && try < 10_000:
			continue
		}
		t.Errorf("buy of user %d: %v", user, err)
		return answer{}
	}
}

// TestShardedSoldOutMemory: once a voucher in 6 shards is sold out (a
// borrow found every shard at 0), the service answers its buyers from the
// sold-out memory: no admission runs, a buyer who holds an order gets it
// back (G5), read from their home shard's slot, and the others are sold
// out.
func TestShardedSoldOutMemory(t *testing.T) {
	t.Parallel()
	r := newShardRig(t)
	v := r.voucher(60, 6)
	cache := &countingCache{Client: r.cache}
	reads := &countingReader{SoldOutReader: r.cache}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, SoldOut: reads, Vouchers: r.vs, Fence: ledgerOf(r.vs).Fence, Logger: r.vs.Logger, SoldOutFor: time.Hour}, Store: r.orders.Store, Vouchers: r.vs, IDs: &counter{n: 100}, Logger: r.vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	const buyers = 100
	first := make([]answer, buyers)
	run(buyers, 16, func(i int) { first[i] = buyOnce(t, s, v, int64(i+1)) })
	held := 0
	for _, a := range first {
		if !a.soldOut {
			held++
		}
	}
	if held != 60 {
		t.Fatalf("%d of %d buyers hold an order, want 60", held, buyers)
	}
	admits, before := cache.admits.Load(), reads.n.Load()
	run(buyers, 16, func(i int) {
		a := buyOnce(t, s, v, int64(i+1))
		switch want := first[i]; {
		case want.soldOut && !a.soldOut:
			t.Errorf("user %d, sold out before, asking again: %+v", i+1, a)
		case !want.soldOut && (!a.duplicate || a.order != want.order):
			t.Errorf("user %d, holding order %d, asking again: %+v; want it back", i+1, want.order, a)
		}
	})
	if n := cache.admits.Load() - admits; n != 0 {
		t.Errorf("%d admissions ran once the sharded voucher was known sold out, want 0", n)
	}
	if n := reads.n.Load() - before; n != buyers {
		t.Errorf("%d reads of the buyers' slots for %d answers from the memory", n, buyers)
	}
}

// slotReads is the Redis the copies read, counting the reads of one
// buyer's slot: the answers no copy gave.
type slotReads struct {
	*redis.Client
	n atomic.Int64
}

func (c *slotReads) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	c.n.Add(1)
	return c.Client.SoldOutBuyerOrder(ctx, userID, voucherID)
}

// TestShardedSaleSoldOutFromCopies: 20,000 buyers for 6,000 units of a
// voucher in 6 shards on 3 masters, then every buyer asking again: each
// holder gets their own order back (G5), nobody else gets one, and after
// the sell-out almost no answer runs an admission (the memory) or reads a
// slot (the copies of the shards answer).
func TestShardedSaleSoldOutFromCopies(t *testing.T) {
	t.Parallel()
	r := newShardRig(t)
	n, units := scale(20_000), scale(6_000)
	v := r.voucher(int64(units), 6)
	slots := &slotReads{Client: r.cache}
	copies := soldout.New(slots, soldout.Config{}, testenv.Logger(t))
	t.Cleanup(copies.Close)
	cache := &countingCache{Client: r.cache}
	redisLedger(r.orders).SoldOut = copies
	redisLedger(r.orders).Cache = cache
	first := make([]answer, n)
	run(n, 32, func(i int) { first[i], _, _ = r.ask(v, int64(i+1)) })
	orders := map[int64]bool{}
	for u, a := range first {
		if a.soldOut {
			continue
		}
		if a.duplicate || orders[a.order] {
			t.Errorf("buyer %d: %+v, asking once", u+1, a)
		}
		orders[a.order] = true
	}
	if len(orders) != units {
		t.Fatalf("%d orders for %d units", len(orders), units)
	}
	admits, reads := cache.admits.Load(), slots.n.Load()
	began := time.Now()
	run(n, 32, func(i int) {
		a, _, _ := r.ask(v, int64(i+1))
		switch want := first[i]; {
		case want.soldOut && !a.soldOut:
			t.Errorf("user %d, sold out before, asking again: %+v", i+1, a)
		case !want.soldOut && (!a.duplicate || a.order != want.order):
			t.Errorf("user %d, holding order %d, asking again: %+v; want it back", i+1, want.order, a)
		}
	})
	took := time.Since(began)
	admitted, read := cache.admits.Load()-admits, slots.n.Load()-reads
	t.Logf("%d asks after the sell-out in %v: %d admissions, %d slot reads", n, took, admitted, read)
	if 20*admitted > int64(n) {
		t.Errorf("%d admissions for %d asks after the sell-out: the memory does not answer them", admitted, n)
	}
	if 10*read > int64(n) {
		t.Errorf("%d slot reads for %d asks after the sell-out: the copies do not answer them", read, n)
	}
}
