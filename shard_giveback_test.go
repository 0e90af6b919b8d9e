package seckill_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
)

// TestShardedUnitsGivenBackSellUnderDemand: a unit given back sells while buyers ask for it:
// once a voucher in 6 shards was found sold out, every shard is drained,
// and a give to a drained shard holds it for redis.Hold. A unit given back
// on one shard, with buyers asking on the others, once hopped from shard to
// shard, each hop holding its receiver again, and was never sold while the
// demand lasted (found by review); it must be sold within a few holds. Six units are given back on shard 0 (released), then buyers ask
// (each ask once, fresh users) for up to 5 s: those of every shard, each
// ask admitted (no sold-out memory); or, through the service as it runs
// (the sold-out memory on), those of the five other shards.
func TestShardedUnitsGivenBackSellUnderDemand(t *testing.T) {
	t.Parallel()
	t.Run("every shard, no memory", func(t *testing.T) {
		t.Parallel()
		unitsGivenBackUnderDemand(t, false, 6)
	})
	t.Run("other shards, memory", func(t *testing.T) {
		t.Parallel()
		unitsGivenBackUnderDemand(t, true, 5)
	})
}

// unitsGivenBackUnderDemand is TestShardedUnitsGivenBackSellUnderDemand,
// with the sold-out memory on or off, and buyers asking on the shards from
// 6-asking to 5 (shard 0, where the units are given back, is asked on only
// when asking is 6).
func unitsGivenBackUnderDemand(t *testing.T, memory bool, asking int) {
	r := newShardRig(t)
	const units = 60
	v := r.voucher(units, 6)
	if !memory {
		redisLedger(r.orders).SoldOut = nil // every ask admits
	}
	borrows := &borrowCounter{Client: r.cache}
	first := make([]answer, 200)
	run(len(first), 16, func(i int) { first[i], _, _ = r.ask(v, int64(i+1)) })
	var home0 []int64 // holders whose home is shard 0, and their orders
	orders := map[int64]int64{}
	for u, a := range first {
		if !a.soldOut {
			orders[int64(u+1)] = a.order
			if seckill.HomeShard(int64(u+1), 6) == 0 {
				home0 = append(home0, int64(u+1))
			}
		}
	}
	if len(orders) != units {
		t.Fatalf("%d orders for %d units", len(orders), units)
	}
	for i := range 6 {
		d, _ := r.raw.Do(context.Background(), r.raw.B().Hget().Key(r.key(v, i, "meta")).Field("drained").Build()).ToString()
		if d != "1" {
			t.Fatalf("shard %d after the sell-out: drained %q, want 1", i, d)
		}
	}
	const back = 6
	if len(home0) < back {
		t.Skipf("only %d holders on shard 0", len(home0))
	}
	_, _, xin0, _ := r.shards(v)
	ctx := context.Background()
	for _, u := range home0[:back] {
		if ok, err := r.cache.Release(ctx, v.ID, u, orders[u]); err != nil || !ok {
			t.Fatalf("Release(user %d) = %v, %v", u, ok, err)
		}
	}
	// Buyers of every shard ask, each once, until the units are sold or
	// 5 s passed.
	var (
		next     atomic.Int64
		sold     atomic.Int64
		inTime   atomic.Int64 // sold while the demand lasted
		soldOuts atomic.Int64
		waits    atomic.Int64
		asks     atomic.Int64
		lastSale atomic.Int64
	)
	next.Store(1_000_000)
	// A fresh admitter: not the one that remembers the sell-out (100 ms).
	r.orders.Ledger = &redisledger.Ledger{Cache: borrows, SoldOut: redisLedger(r.orders).SoldOut, Vouchers: r.vs, Fence: ledgerOf(r.vs).Fence, Logger: r.vs.Logger}
	began := time.Now()
	deadline := began.Add(5 * time.Second)
	var wg sync.WaitGroup
	for g := range 20 * asking {
		home := 6 - asking + g%asking
		wg.Go(func() {
			for sold.Load() < back && time.Now().Before(deadline) {
				u := next.Add(1)
				for seckill.HomeShard(u, 6) != home {
					u = next.Add(1)
				}
				asks.Add(1)
				_, err := r.orders.Buy(ctx, u, v.ID)
				var e *seckill.Error
				switch {
				case err == nil:
					sold.Add(1)
					if time.Now().Before(deadline) {
						inTime.Add(1)
					}
					lastSale.Store(int64(time.Since(began)))
				case errors.Is(err, seckill.ErrSoldOut):
					soldOuts.Add(1)
				case errors.As(err, &e) && e.Kind == seckill.ErrUnavailable:
					waits.Add(1)
				default:
					t.Errorf("buy of user %d: %v", u, err)
					return
				}
			}
		})
	}
	wg.Wait()
	stock, _, xin, _ := r.shards(v)
	hops := int64(0)
	for i := range xin {
		hops += xin[i] - xin0[i]
	}
	t.Logf("%d of %d units given back sold in the 5 s of demand, %d in all, in %v (%d asks: %d sold out, %d unavailable; %d borrows found it sold out); the last sale %v after the give-back; %d transfers; stocks now %v",
		inTime.Load(), back, sold.Load(), time.Since(began).Round(time.Millisecond), asks.Load(), soldOuts.Load(), waits.Load(), borrows.soldOut.Load(), time.Duration(lastSale.Load()).Round(time.Millisecond), hops, stock)
	if inTime.Load() != back {
		t.Errorf("%d of %d units given back sold in 5 s of demand on %d shards, want all (each is held %v at most once where it lands)",
			inTime.Load(), back, asking, 250*time.Millisecond)
	}
}

// borrowCounter counts the borrows that found the voucher sold out.
type borrowCounter struct {
	*redis.Client
	soldOut atomic.Int64
}

func (c *borrowCounter) Borrow(ctx context.Context, voucherID int64, home int) (seckill.Borrowed, error) {
	b, err := c.Client.Borrow(ctx, voucherID, home)
	if err == nil && b.SoldOut {
		c.soldOut.Add(1)
	}
	return b, err
}
