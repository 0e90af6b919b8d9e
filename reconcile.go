package seckill

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
