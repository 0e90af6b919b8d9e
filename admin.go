package seckill

import (
	"context"
	"time"
)

// DeadLetterEntry is a dead-lettered order message as operators see it.
type DeadLetterEntry struct {
	// ID names the dead letter in the admin API and CLI: its order id, or
	// "<voucher id>[.<shard>]:<entry id>" for a message too malformed to
	// have one (or an order dead-lettered twice).
	ID string
	DeadLetterRecord
}

// Stats is a snapshot of a sale as operators watch it.
type Stats struct {
	Time     time.Time
	Vouchers []VoucherStats
	// Admissions is this instance's admissions per second by result, for
	// the last minutes, oldest first.
	Admissions []AdmissionSecond
	// Workers is this instance's workers.
	Workers WorkerStats
}

// VoucherStats is one open voucher in a Stats snapshot.
type VoucherStats struct {
	Voucher *Voucher
	// Remaining is the cache's stock left; nil when not loaded.
	Remaining *int64
	Created   int64 // orders in the database
	Failed    int64 // failed orders in the database
	Pending   int64 // queued orders the database does not hold yet
	Drift     int64 // initial stock − (remaining + created + returning + pending)
	// The orders' lives after admission, of a voucher with a deadline
	// (PayWithin): created orders awaiting payment, paid ones, cancelled
	// ones (by their buyers or the deadline; refunding and refunded too),
	// and those of them whose unit is back on sale in the cache. Zero for a
	// voucher without a deadline.
	AwaitingPayment, Paid, Cancelled, Returned int64
	// RedisNode is the Redis master that holds the voucher
	// (CacheState.Node); "" in the sync mode or when unknown.
	RedisNode string
	Stream    StreamStats
	// Shards are a sharded voucher's shards (CacheState.Shards); nil for
	// an unsharded voucher, and in the sync mode.
	Shards []ShardState
}

// Revenue is what the voucher's paid orders took, in its currency's minor
// units: each owes the price, fixed at the voucher's creation.
func (vs VoucherStats) Revenue() int64 {
	if vs.Voucher == nil {
		return 0
	}
	return vs.Paid * vs.Voucher.Price
}

// StreamStats is a voucher's order stream in a Stats snapshot.
type StreamStats struct {
	Length      int64
	Pending     int64         // delivered, not acknowledged
	Lag         *int64        // not yet delivered; nil when Redis cannot tell
	OldestAge   time.Duration // of the oldest pending entry; 0 if none
	Consumers   int64
	DeadLetters int64
}

// AdmissionSecond counts one second's admissions by result: admitted,
// sold_out, duplicate_order, not_started, ended, rate_limited, unavailable.
type AdmissionSecond struct {
	Time   time.Time
	Counts map[string]int64
}

// WorkerStats describes an instance's workers.
type WorkerStats struct {
	Consumer string
	Mode     Mode
	// Busy counts batches being written; Allowed how many may be at once
	// now (it grows with the backlog between the configured bounds).
	Busy, Allowed int
	// Breaker is "closed", "open" or "half-open": the database circuit
	// breaker's state.
	Breaker string
}

// StatsSource takes Stats snapshots.
type StatsSource interface {
	Stats(ctx context.Context) (*Stats, error)
}
