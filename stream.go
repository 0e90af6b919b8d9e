package seckill

import (
	"errors"
)

// ErrStreamLost says that a voucher's order stream or its consumer group
// is gone from Redis: Redis lost its data. The voucher is rebuilt from the
// database before its stream is read again (G6); never is a group made
// afresh at the stream's end, which would skip its entries.
var ErrStreamLost = errors.New("order stream or consumer group lost")

// OrderMessage is an admitted order as it waits in its voucher's stream
// (its shard's, for a voucher with shards) for the workers.
type OrderMessage struct {
	// EntryID is the stream entry's id: Redis's, never a business id. It
	// names the entry only within its shard's stream.
	EntryID string
	// VoucherID is the voucher whose stream holds the entry.
	VoucherID int64
	// Shard is the index of the voucher's shard whose stream holds the
	// entry: the buyer's home shard; 0 for an unsharded voucher.
	Shard int
	// Order is the order the message carries, status pending; CreatedAt is
	// the admission time.
	Order Order
	// Deliveries counts how many times the entry was handed to a consumer;
	// 0 when not known (a first read).
	Deliveries int64
	// Err says why the message is malformed; Order then holds the fields
	// that could be read.
	Err error
}

// DeadLetter says how to settle a message that goes to the dead letters.
type DeadLetter struct {
	Reason string
	// KeepStock leaves the stock taken: for an order the database had no
	// stock for, giving it back in Redis would sell it again. A stock below
	// zero (Redis sold more than the database holds) is given back anyway.
	KeepStock bool
	// BuyerOrder, if not zero, stays as the buyer's order in Redis instead
	// of freeing their slot: their order in the database.
	BuyerOrder int64
}

// Stream returns the shard whose stream holds the message.
func (m OrderMessage) Stream() Shard {
	return Shard{VoucherID: m.VoucherID, Index: m.Shard}
}

// Backpressure says when admission must wait for the workers: when a
// stream holds more orders than Redis should (a high-water mark), until the
// backlog falls under a low one. Each shard of a voucher has its stream, on
// its own Redis master, and is paused alone: the buyers of the other
// shards go on.
type Backpressure interface {
	// Refusing reports whether admission of the buyer to the voucher is
	// paused: that of the stream of the buyer's home shard (HomeShard).
	Refusing(voucherID, userID int64) bool
}
