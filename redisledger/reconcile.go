package redisledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
)

// Reconciler compares vouchers in the database and in the cache, and
// repairs the cache from the database.
type Reconciler struct {
	Vouchers *seckill.VoucherService
	Store    interface {
		seckill.VoucherStore
		seckill.OrderCounter
		OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error)
		LifecycleCounts(ctx context.Context, voucherID int64) (*seckill.LifecycleCounts, error)
	}
	// Cache reads what the cache holds of a voucher's sale.
	Cache interface {
		State(ctx context.Context, voucherID int64) (*seckill.CacheState, error)
	}
	// Repairer puts a voucher back in the cache from the database (the
	// Redis ledger's Repair); nil: no repair.
	Repairer interface {
		Repair(ctx context.Context, voucherID int64) error
	}
	// Returns gives back the units of cancelled orders left unreturned in
	// the cache (a crash between the cancellation and the cache): the
	// repair's first step; nil, no such step (the Sweeper is one).
	Returns interface {
		FinishReturns(ctx context.Context, v *seckill.Voucher) (int, error)
	}
	// Shards counts a sharded voucher's shards and finishes the transfers
	// between them left half done; nil: shards are not counted (the sync
	// mode, or a cache without shards).
	Shards ShardCache
}

// Reconcile compares the voucher in the database and in the cache. With
// repair, a voucher that disagrees twice in a row is unloaded from the
// cache and rebuilt from the database and its queued orders, then compared
// again. Orders are
// read while the sale may go on: a busy sale can show a passing drift that
// a second look clears.
//
// In the queue mode the repair keeps the buyers the cache holds, as the
// fence recovery does (redisledger.Fence.unloadOpen): the orders waiting in
// the instances' memory are in no stream and no database, only in their
// buyers' slots, and deleting those let their buyers buy again and sold
// their units twice. The units of orders a crash lost then stay taken: an
// undersell, never an oversell (TestRepairQueueModeKeepsBuyers).
//
// A sharded voucher's shards are counted too (Shards): the shards' stock
// and buyers, and the stock in flight between them, must add up to the
// initial stock (ShardDrift). Its repair first finishes the transfers left
// half done, then, if the voucher still disagrees, rebuilds it whole.
func (r *Reconciler) Reconcile(ctx context.Context, voucherID int64, repair bool) (*seckill.Reconciliation, error) {
	rec, err := r.compare(ctx, voucherID)
	if err != nil || !repair || rec.Estimated {
		return rec, err
	}
	if r.Returns != nil && rec.Returning > 0 {
		// Every unreturned unit, however young: ReturnUnit gives a unit
		// back once per order, so one its canceller is giving back now is
		// harmless.
		if _, err := r.Returns.FinishReturns(ctx, rec.Voucher); err != nil {
			return nil, fmt.Errorf("repair voucher %d: %w", voucherID, err)
		}
		ok := rec.OK()
		if rec, err = r.compare(ctx, voucherID); err != nil {
			return nil, err
		}
		rec.Repaired = !ok && rec.OK()
	}
	if r.Shards != nil && rec.Shards != nil && rec.Shards.InFlight > 0 {
		// Every transfer, however young: each step is idempotent, so
		// finishing one a borrower is still running is safe.
		if _, err := r.Shards.FinishTransfers(ctx, voucherID, 0); err != nil {
			return nil, fmt.Errorf("repair voucher %d: %w", voucherID, err)
		}
		ok := rec.OK()
		if rec, err = r.compare(ctx, voucherID); err != nil {
			return nil, err
		}
		rec.Repaired = !ok && rec.OK()
	}
	if rec.OK() {
		return rec, nil
	}
	// A second look before a repair that unloads the voucher under a live
	// sale: a drift read while an order was being persisted, or a transfer
	// between two shards ended, clears (TestReconcileShards).
	if rec, err = r.compare(ctx, voucherID); err != nil || rec.OK() || rec.Estimated {
		return rec, err
	}
	if r.Repairer == nil {
		return rec, nil
	}
	if err := r.Repairer.Repair(ctx, voucherID); err != nil {
		return nil, fmt.Errorf("repair voucher %d: %w", voucherID, err)
	}
	if rec, err = r.compare(ctx, voucherID); err != nil {
		return nil, err
	}
	rec.Repaired = true
	return rec, nil
}

func (r *Reconciler) compare(ctx context.Context, voucherID int64) (*seckill.Reconciliation, error) {
	v, err := r.Store.Voucher(ctx, voucherID)
	if err != nil {
		return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
	}
	// The cache first: an order persisted in between then counts in the
	// database and not as pending, rather than in neither.
	st, err := r.Cache.State(ctx, voucherID)
	if err != nil {
		return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
	}
	// The cancellations' counts first: an order cancelled in between then
	// counts in neither, a passing drift, never in both.
	lc, err := r.Store.LifecycleCounts(ctx, voucherID)
	if err != nil {
		return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
	}
	orders, err := r.Store.CountOrders(ctx, voucherID)
	if err != nil {
		return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
	}
	// A page of ids per query: thousands may be listed.
	stored := make(map[int64]seckill.OrderStatus, len(st.PendingOrders))
	for page := range slices.Chunk(st.PendingOrders, 1000) {
		got, err := r.Store.OrderStatuses(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
		}
		maps.Copy(stored, got)
	}
	rec := seckill.Compare(v, st, orders, stored)
	rec.Lifecycle = lc
	rec.Returning = lc.Unreturned
	rec.Drift -= rec.Returning
	rec.BuyerDrift -= rec.Returning
	if r.Shards != nil && v.ShardCount() > 1 {
		if rec.Shards, err = r.Shards.CountShards(ctx, v); err != nil {
			return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
		}
		if rec.Shards.Loaded {
			rec.ShardDrift = v.InitialStock - rec.Shards.Total
			// Units taken by a transfer and not yet given are in no
			// shard's stock: remaining, not drift. (Read after the cache's
			// state: a transfer that ends in between still shows as a
			// passing drift, rare as transfers are.)
			rec.Remaining += rec.Shards.InFlight
			rec.Drift -= rec.Shards.InFlight
		}
	}
	return rec, nil
}

// ShardCache is the cache's side of a sharded voucher's shards that
// reconciliation needs; the Redis client is one.
type ShardCache interface {
	// CountShards counts the voucher's shards at one instant.
	CountShards(ctx context.Context, v *seckill.Voucher) (*seckill.ShardCounts, error)
	// FinishTransfers finishes the voucher's transfers of stock begun more
	// than olderThan ago and left half done (a process died between their
	// steps): each is given to its receiver, or back to its donor. It
	// returns how many it finished.
	FinishTransfers(ctx context.Context, voucherID int64, olderThan time.Duration) (int, error)
}

var _ ShardCache = (*redis.Client)(nil)
