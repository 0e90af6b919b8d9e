package worker

import (
	"context"
	"time"

	"github.com/seckill/seckill"
)

// Stream is the queue of admitted orders: one Redis Stream per voucher
// shard (one per voucher unsharded), each read by its own consumer group
// whose consumers are the service's instances. The per-stream methods take
// the shard whose stream they act on; an unsharded voucher's is
// seckill.Shard{VoucherID: id}.
type Stream interface {
	// ReadOrders reads up to count new messages of the shard for consumer,
	// waiting up to block for one to come. It returns seckill.ErrStreamLost if the
	// group is gone.
	ReadOrders(ctx context.Context, s seckill.Shard, consumer string, count int, block time.Duration) ([]seckill.OrderMessage, error)
	// WaitOrders waits up to block for messages of the shard not yet
	// delivered to any consumer, without taking them, and reports whether
	// there are. It returns seckill.ErrStreamLost if the group is gone.
	WaitOrders(ctx context.Context, s seckill.Shard, block time.Duration) (bool, error)
	// ReadPending reads up to count of the messages delivered to consumer
	// and not yet acknowledged, with entry ids above after ("0" for all),
	// with their delivery counts (this read counts as one).
	ReadPending(ctx context.Context, s seckill.Shard, consumer, after string, count int) ([]seckill.OrderMessage, error)
	// AckOrders acknowledges messages that are settled and returns how many
	// were pending. Fewer than asked means another delivery settled some, or
	// Redis lost the stream (then the error is seckill.ErrStreamLost).
	AckOrders(ctx context.Context, s seckill.Shard, entryIDs ...string) (int64, error)
	// CountPersisted makes the cache count persisted orders it may have
	// lost: each buyer it does not hold is recorded and takes a unit of the
	// stock, on the buyer's home shard. Orders persisted after Redis lost
	// data need it.
	CountPersisted(ctx context.Context, voucherID int64, orders []*seckill.Order) error
	// Held returns which of entryIDs are pending with consumer: delivered to
	// it and not acknowledged. Those it no longer holds were claimed by
	// another consumer, or lost with the stream (then seckill.ErrStreamLost).
	Held(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) (map[string]bool, error)
	// RefreshClaims tells the group that consumer is still working on the
	// messages, so that no one reclaims them as abandoned.
	RefreshClaims(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) error
	// ClaimStale hands to consumer up to count messages that their consumer
	// has held unacknowledged for longer than minIdle, with their delivery
	// counts. It also returns the ids of such entries that were deleted from
	// the stream; the group forgets those.
	ClaimStale(ctx context.Context, s seckill.Shard, consumer string, minIdle time.Duration, count int) (msgs []seckill.OrderMessage, deleted []string, err error)
	// GiveUp abandons consumer's messages (their save failed for an unknown
	// reason, or panicked): they stay pending, and the reclaimer takes them
	// when the lease runs out as from a consumer that died, counting a
	// delivery. A reclaim from a consumer that is alive counts none: without
	// this a message that fails every time, its consumer alive, would never
	// reach the dead letters.
	GiveUp(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) error
	// DeadLetter moves a message to its shard's dead-letter stream, gives
	// its stock and buyer slot back to that shard as dl says, and
	// acknowledges it, all at once. It reports false if the message was no longer pending: someone
	// else settled it, and nothing was done.
	DeadLetter(ctx context.Context, msg seckill.OrderMessage, dl seckill.DeadLetter) (bool, error)
	// Backlog returns how many orders wait in the shard's stream:
	// delivered and not acknowledged, or not delivered yet.
	Backlog(ctx context.Context, s seckill.Shard) (int64, error)
	// TrimOrders deletes the entries that every consumer is done with,
	// never one that is pending or not yet delivered, and returns how many.
	TrimOrders(ctx context.Context, s seckill.Shard) (int64, error)
	// DeadLetters returns the dead letters of the vouchers, of every shard,
	// each voucher's oldest first.
	DeadLetters(ctx context.Context, voucherIDs ...int64) ([]seckill.DeadLetterRecord, error)
	// DropVoucher deletes every key of the voucher, of every shard, once
	// every shard's stream is drained (nothing pending, nothing to
	// deliver), and reports whether it did: for a voucher past its
	// retention.
	DropVoucher(ctx context.Context, voucherID int64) (bool, error)
	// ReapConsumers removes from the shard's group the consumers other
	// than self that have been idle longer than idle and hold no pending
	// messages, and returns their names.
	ReapConsumers(ctx context.Context, s seckill.Shard, self string, idle time.Duration) ([]string, error)
	// FinishTransfers finishes the transfers of stock between the
	// voucher's shards begun more than olderThan ago and left half done
	// (their process died between two steps): each is given to its
	// receiver, or back to its donor, then settled. It returns how many it
	// finished; none for an unsharded voucher.
	FinishTransfers(ctx context.Context, voucherID int64, olderThan time.Duration) (int, error)
}
