package seckill

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Reconciliation compares a voucher in the database and in the cache
// (G6): remaining (cache) + orders (database) + returning (database) +
// pending == initial stock.
type Reconciliation struct {
	Voucher *Voucher
	// Orders counts the voucher's orders in the database that hold a unit:
	// created and paid.
	Orders int64
	// Returning counts the voucher's cancelled orders whose unit the
	// database took back and has not yet seen given back in the cache
	// (LifecycleCounts.Unreturned): the cache holds it still, as the
	// buyer's slot, until the canceller or the sweeper gives it back.
	Returning int64
	// Lifecycle counts the voucher's orders by status; nil when the store
	// was not asked (Compare's callers that do not).
	Lifecycle *LifecycleCounts
	// Loaded, Remaining and Buyers are the cache's.
	Loaded    bool
	Remaining int64
	Buyers    int64
	// Pending counts queued orders the database does not hold yet: the
	// entries not delivered to the workers yet, and the delivered ones
	// whose orders the database does not hold.
	Pending int64
	// DeadLetters counts the messages in the voucher's dead-letter stream.
	DeadLetters int64
	// Drift is InitialStock − (Remaining + Orders + Returning + Pending):
	// stock the cache and the database disagree about. Zero when they
	// agree.
	Drift int64
	// BuyerDrift is Buyers − (Orders + Returning + Pending): buyers the cache records
	// without an order in the database or the queue (lost orders, when
	// positive), or orders without a buyer (when negative).
	BuyerDrift int64
	// Repaired says the cache was rebuilt from the database.
	Repaired bool
	// Estimated says the cache's side was read within bounds (a backlog of
	// more than ten thousand orders, see CacheState.Bounded): Pending, and
	// so the drifts, are an estimate, and a repair is not made on it.
	Estimated bool
	// Shards are a sharded voucher's shards, counted at one instant when
	// the cache can count them (ShardCounter); nil for an unsharded one.
	Shards *ShardCounts
	// ShardDrift is InitialStock − Shards.Total: stock the shards, with
	// the transfers between them in flight, do not account for (lost or
	// counted twice). Zero when the shards' invariant holds.
	ShardDrift int64
}

// OK reports whether the cache and the database agree, and a sharded
// voucher's shards are all loaded and hold its initial stock exactly.
func (r *Reconciliation) OK() bool {
	return r.Loaded && r.Drift == 0 && r.BuyerDrift == 0 && r.ShardDrift == 0 && (r.Shards == nil || r.Shards.Loaded)
}

// Reconciler compares vouchers in the database and in the cache, and
// repairs the cache from the database.
type Reconciler struct {
	Vouchers *VoucherService
	Store    interface {
		VoucherStore
		OrderCounter
		OrderStatuses(ctx context.Context, ids []int64) (map[int64]OrderStatus, error)
		LifecycleCounts(ctx context.Context, voucherID int64) (*LifecycleCounts, error)
	}
	// Cache reads what the cache holds of a voucher's sale.
	Cache interface {
		State(ctx context.Context, voucherID int64) (*CacheState, error)
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
		FinishReturns(ctx context.Context, v *Voucher) (int, error)
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
func (r *Reconciler) Reconcile(ctx context.Context, voucherID int64, repair bool) (*Reconciliation, error) {
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

func (r *Reconciler) compare(ctx context.Context, voucherID int64) (*Reconciliation, error) {
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
	stored := make(map[int64]OrderStatus, len(st.PendingOrders))
	for page := range slices.Chunk(st.PendingOrders, 1000) {
		got, err := r.Store.OrderStatuses(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
		}
		maps.Copy(stored, got)
	}
	rec := Compare(v, st, orders, stored)
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

// Compare sets what the cache holds of a voucher's sale (st, read first)
// against the database: orders, its created orders, and stored, the
// statuses it holds of st.PendingOrders. An admitted order is pending, in
// the cache and not yet in the database, while its entry waits to be
// delivered (when the lag is unknown, counted as every entry not pending:
// at most that many) or is delivered and neither listed nor held by the
// database. A cache without the voucher counts no stock. The monitor and
// Reconciler both compare with it.
func Compare(v *Voucher, st *CacheState, orders int64, stored map[int64]OrderStatus) *Reconciliation {
	rec := &Reconciliation{
		Voucher:     v,
		Orders:      orders,
		Loaded:      st.Loaded,
		Buyers:      st.Buyers,
		DeadLetters: st.DeadLetters,
		Estimated:   st.Bounded,
	}
	if st.Loaded {
		rec.Remaining = st.Remaining
	}
	if st.Lag != nil {
		rec.Pending = *st.Lag
	} else {
		rec.Pending = max(0, st.Length-st.Pending)
	}
	rec.Pending += st.Unlisted
	seen := make(map[int64]bool, len(st.PendingOrders))
	for _, id := range st.PendingOrders {
		// Only an order stored and not failed is counted among Orders
		// (or, cancelled since, Returning, or given back): a failed one (a
		// dead letter retried, or failed and not yet dead-lettered) still
		// holds its unit and its buyer in the cache, so it is pending.
		if st, ok := stored[id]; (!ok || st == OrderFailed) && !seen[id] {
			rec.Pending++
		}
		seen[id] = true
	}
	rec.Drift = v.InitialStock - (rec.Remaining + rec.Orders + rec.Pending)
	rec.BuyerDrift = rec.Buyers - (rec.Orders + rec.Pending)
	return rec
}

// ShardCounts is what the cache holds of a voucher's shards, counted at one
// instant ([ShardCache]). The shards' invariant, always: Total ==
// InitialStock (docs/design/shards.md, Shards).
type ShardCounts struct {
	// Shards are the counts of each shard, by index.
	Shards []ShardCount
	// Loaded says every shard has a stock.
	Loaded bool
	// InFlight is the stock taken from a shard by a transfer that its
	// receiver has not received.
	InFlight int64
	// Total is the shards' stock and buyers, and InFlight.
	Total int64
}

// ShardCount is what the cache holds of one shard of a voucher.
type ShardCount struct {
	Index  int
	Loaded bool
	// Stock is the shard's stock left to admit, Buyers the buyers it
	// admitted (each holds a unit).
	Stock, Buyers int64
	// InFlight is the stock transfers took from this shard that their
	// receivers have not received.
	InFlight int64
	// XGen is the shard's transfer generation: a transfer runs between
	// shards of one generation only; each rebuild begins a new one.
	XGen string
}

// ShardCache is the cache's side of a sharded voucher's shards that
// reconciliation needs; the Redis client is one.
type ShardCache interface {
	// CountShards counts the voucher's shards at one instant.
	CountShards(ctx context.Context, v *Voucher) (*ShardCounts, error)
	// FinishTransfers finishes the voucher's transfers of stock begun more
	// than olderThan ago and left half done (a process died between their
	// steps): each is given to its receiver, or back to its donor. It
	// returns how many it finished.
	FinishTransfers(ctx context.Context, voucherID int64, olderThan time.Duration) (int, error)
}
