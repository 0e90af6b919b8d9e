package seckill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redisledger"
)

// TestRepairQueueModeKeepsBuyers: in the queue mode the orders a live
// instance holds in memory are in neither Redis's stream nor the database,
// only in their buyers' slots. A repair that deleted the buyers (as the
// stream mode's does, whose orders are all in the stream) let those buyers
// buy again and sold their units twice; it must keep them, as the fence
// recovery's rebuild does in the queue mode.
func TestRepairQueueModeKeepsBuyers(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ledgerOf(vs).Queued = true
	ctx := context.Background()
	view, err := vs.Create(ctx, onSale("queued", 10))
	if err != nil {
		t.Fatal(err)
	}
	cache := ledgerOf(vs).Cache
	queued := map[int64]int64{} // buyer → order, waiting in a live instance's queue
	for u := int64(1); u <= 3; u++ {
		a := seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9000 + u}
		if err := cache.Reserve(ctx, a); err != nil {
			t.Fatal(err)
		}
		queued[u] = a.OrderID
	}
	r := &redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: store, Cache: ledgerOf(vs).Cache}
	if _, err := r.Reconcile(ctx, view.ID, true); err != nil {
		t.Fatal(err)
	}
	for u, id := range queued {
		got, err := cache.BuyerOrders(ctx, u, view.ID)
		if err != nil || got[view.ID] != id {
			t.Errorf("buyer %d's slot after the repair = %v, %v; want their queued order %d", u, got, err, id)
		}
		again := seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9100 + u}
		if err := cache.Reserve(ctx, again); !errors.Is(err, seckill.ErrDuplicateOrder) {
			t.Errorf("buyer %d, whose order is queued, asks again after the repair: %v; want duplicate_order", u, err)
		}
	}
}

// shardedRows reads every voucher as one of shards shards: the
// reconciler then checks its shards' invariant.
type shardedRows struct {
	seckill.Store
	shards int
}

func (s shardedRows) Voucher(ctx context.Context, id int64) (*seckill.Voucher, error) {
	v, err := s.Store.Voucher(ctx, id)
	if v != nil {
		v.Shards = s.shards
	}
	return v, err
}

// countedShards is a cache whose shards count as counts says, its stock
// their stock, and whose FinishTransfers settles the transfers in flight
// (to the donors).
type countedShards struct {
	redisledger.Cache
	mu       sync.Mutex
	counts   seckill.ShardCounts
	finished int
	// passing are counts CountShards gives, one a call, before counts: a
	// count that a transfer ending meanwhile made disagree.
	passing []seckill.ShardCounts
	unloads int
}

func (c *countedShards) CountShards(context.Context, *seckill.Voucher) (*seckill.ShardCounts, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counts
	if len(c.passing) > 0 {
		n, c.passing = c.passing[0], c.passing[1:]
	}
	return &n, nil
}

func (c *countedShards) Unload(ctx context.Context, id int64) error {
	c.mu.Lock()
	c.unloads++
	c.mu.Unlock()
	return c.Cache.Unload(ctx, id)
}

// State is the cache's, its stock the shards' (each shard's own stock:
// units in flight are in none).
func (c *countedShards) State(ctx context.Context, id int64) (*seckill.CacheState, error) {
	st, err := c.Cache.State(ctx, id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Remaining = 0
	for _, s := range c.counts.Shards {
		st.Remaining += s.Stock
	}
	return st, nil
}

func (c *countedShards) FinishTransfers(context.Context, int64, time.Duration) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished++
	c.counts.Shards[0].Stock += c.counts.InFlight
	c.counts.InFlight = 0
	return 1, nil
}

// TestReconcileShards: a sharded voucher agrees only when its shards are
// all loaded and hold its initial stock exactly, the transfers in flight
// counted; the repair finishes the transfers left half done.
func TestReconcileShards(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	view, err := vs.Create(ctx, onSale("sharded", 10))
	if err != nil {
		t.Fatal(err)
	}
	shard := func(stock, buyers int64) seckill.ShardCount {
		return seckill.ShardCount{Loaded: true, Stock: stock, Buyers: buyers}
	}
	tests := []struct {
		name     string
		counts   seckill.ShardCounts
		ok       bool
		drift    int64
		finished int
	}{
		{"exact", seckill.ShardCounts{Shards: []seckill.ShardCount{shard(5, 0), shard(5, 0)}, Loaded: true, Total: 10}, true, 0, 0},
		{"in flight", seckill.ShardCounts{Shards: []seckill.ShardCount{shard(3, 0), shard(5, 0)}, Loaded: true, InFlight: 2, Total: 10}, true, 0, 1},
		{"lost a unit", seckill.ShardCounts{Shards: []seckill.ShardCount{shard(4, 0), shard(5, 0)}, Loaded: true, Total: 9}, false, 1, 0},
		{"counted twice", seckill.ShardCounts{Shards: []seckill.ShardCount{shard(6, 0), shard(5, 0)}, Loaded: true, Total: 11}, false, -1, 0},
		{"a shard not loaded", seckill.ShardCounts{Shards: []seckill.ShardCount{shard(5, 0), {}}, Total: 5}, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := &countedShards{Cache: ledgerOf(vs).Cache, counts: tt.counts}
			r := &redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: shardedRows{store, 2}, Cache: cache, Shards: cache}
			rec, err := r.Reconcile(ctx, view.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if rec.OK() != tt.ok || rec.ShardDrift != tt.drift || rec.Shards == nil {
				t.Errorf("Reconcile = ok %v, shard drift %d, shards %+v; want ok %v, drift %d", rec.OK(), rec.ShardDrift, rec.Shards, tt.ok, tt.drift)
			}
			if tt.counts.InFlight == 0 {
				return
			}
			// The repair finishes the transfers: all stock back in a shard.
			if rec, err = r.Reconcile(ctx, view.ID, true); err != nil {
				t.Fatal(err)
			}
			if cache.finished != tt.finished || !rec.OK() || rec.Shards.InFlight != 0 {
				t.Errorf("repair: transfers finished %d times, ok %v, in flight %d; want %d, ok, none", cache.finished, rec.OK(), rec.Shards.InFlight, tt.finished)
			}
		})
	}
	// A passing drift (a transfer that ended between the cache's state and
	// the count) is not repaired: a second look agrees, and the voucher is
	// not unloaded and rebuilt under a live sale.
	exact := seckill.ShardCounts{Shards: []seckill.ShardCount{shard(5, 0), shard(5, 0)}, Loaded: true, Total: 10}
	passing := seckill.ShardCounts{Shards: []seckill.ShardCount{shard(4, 0), shard(5, 0)}, Loaded: true, Total: 9}
	cache := &countedShards{Cache: ledgerOf(vs).Cache, counts: exact, passing: []seckill.ShardCounts{passing}}
	r := &redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: shardedRows{store, 2}, Cache: cache, Shards: cache}
	if rec, err := r.Reconcile(ctx, view.ID, true); err != nil || !rec.OK() || rec.Repaired || cache.unloads != 0 {
		t.Errorf("Reconcile(repair) of a passing drift = %+v, %v, %d unloads; want ok, not repaired, none", rec, err, cache.unloads)
	}
	// An unsharded voucher is not counted so.
	cache = &countedShards{Cache: ledgerOf(vs).Cache}
	r = &redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: store, Cache: ledgerOf(vs).Cache, Shards: cache}
	if rec, err := r.Reconcile(ctx, view.ID, false); err != nil || !rec.OK() || rec.Shards != nil {
		t.Errorf("Reconcile(unsharded) = %+v, %v; want ok, no shards counted", rec, err)
	}
}
