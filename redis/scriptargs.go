package redis

import (
	"strconv"
	"time"
)

// The ARGV of the scripts that take more than four: each a struct whose
// argv is the one place its fields become ARGV, in the order the script's
// header (scripts/*.lua) states. TestScriptArgs checks that each gives as
// many as its header names.

// admitArgs are admit.lua's ARGV.
type admitArgs struct {
	UserID  int64
	OrderID int64 // made by the service
	// VoucherID is the voucher id in decimal (voucherKeys.ID).
	VoucherID string
	// Append appends the order to the voucher's stream (the stream mode);
	// else the service queues it in memory (the queue mode).
	Append bool
	// Generation is the voucher's generation in the database.
	Generation int64
	// Wait says that the caller waits for replicas (WAIT) before it
	// answers: a duplicate then writes the buyer's slot again, unchanged.
	Wait bool
}

func (a admitArgs) argv() []string {
	f := a.fields()
	return f[:]
}

// fields are argv in an array, which a buy's command takes without
// allocating a slice.
func (a admitArgs) fields() [6]string {
	return [6]string{
		strconv.FormatInt(a.UserID, 10),     // ARGV[1]
		strconv.FormatInt(a.OrderID, 10),    // ARGV[2]
		a.VoucherID,                         // ARGV[3]
		flag(a.Append),                      // ARGV[4]
		strconv.FormatInt(a.Generation, 10), // ARGV[5]
		flag(a.Wait),                        // ARGV[6]
	}
}

// claimStaleArgs are claim_stale.lua's ARGV; the consumer group is Group.
type claimStaleArgs struct {
	// Consumer is the consumer to hand the messages to.
	Consumer string
	// MinIdle is how long a message must have been pending.
	MinIdle time.Duration
	// Cursor is the least entry id to look at ("0-0" from the start).
	Cursor string
	// Count is how many messages to claim at most; Scan how many pending
	// entries to look at at most.
	Count, Scan int
	// Live are the consumers that are alive.
	Live []string
}

func (a claimStaleArgs) argv() []string {
	return append([]string{
		Group,                 // ARGV[1]
		a.Consumer,            // ARGV[2]
		ms(a.MinIdle),         // ARGV[3]
		a.Cursor,              // ARGV[4]
		strconv.Itoa(a.Count), // ARGV[5]
		strconv.Itoa(a.Scan),  // ARGV[6]
	}, a.Live...) // ARGV[7..]
}

// deadLetterArgs are dead_letter.lua's ARGV; the consumer group is Group,
// the hold of a unit given back Hold, and the change log's bounds those of
// the copies of sold-out vouchers' buyers (soldout.go).
type deadLetterArgs struct {
	// EntryID is the message's entry id in the orders stream.
	EntryID string
	// OrderID and UserID are the message's, 0 if it has none.
	OrderID, UserID int64
	VoucherID       int64
	Reason          string
	// GiveStock gives the stock back; else (the database has none) only a
	// stock below zero, Redis's oversell, is given back.
	GiveStock bool
	// KeepOrder is the order id to leave as the buyer's, 0 to free the
	// slot.
	KeepOrder int64
}

func (a deadLetterArgs) argv() []string {
	return []string{
		Group,                              // ARGV[1]
		a.EntryID,                          // ARGV[2]
		orNone(a.OrderID),                  // ARGV[3]
		orNone(a.UserID),                   // ARGV[4]
		strconv.FormatInt(a.VoucherID, 10), // ARGV[5]
		a.Reason,                           // ARGV[6]
		flag(a.GiveStock),                  // ARGV[7]
		orNone(a.KeepOrder),                // ARGV[8]
		holdMillis,                         // ARGV[9]
		changeLogLen,                       // ARGV[10]
		changeLogTTL,                       // ARGV[11]
	}
}

// finishRebuildArgs are finish_rebuild.lua's ARGV; the consumer group is
// Group.
type finishRebuildArgs struct {
	// Generation is the voucher's, Epoch the rebuild's (from
	// rebuild_begin), both in decimal.
	Generation, Epoch string
	InitialStock      int64
	// Begin and End are the sale window.
	Begin, End time.Time
	// Paused is the row's (seckill.Voucher.Paused): kept only where Redis
	// holds no control of its own.
	Paused bool
}

func (a finishRebuildArgs) argv() []string {
	return []string{
		a.Generation,                          // ARGV[1]
		a.Epoch,                               // ARGV[2]
		strconv.FormatInt(a.InitialStock, 10), // ARGV[3]
		unixMillis(a.Begin),                   // ARGV[4]
		unixMillis(a.End),                     // ARGV[5]
		Group,                                 // ARGV[6]
		flag(a.Paused),                        // ARGV[7]
	}
}

// loadVoucherArgs are load_voucher.lua's ARGV; the consumer group is
// Group.
type loadVoucherArgs struct {
	Stock int64
	// Begin and End are the sale window.
	Begin, End time.Time
	// Generation is the voucher's.
	Generation int64
	// Shards is how many shards a sharded voucher has, Index the one being
	// loaded; Shards 0 or 1 loads an unsharded voucher, as always.
	Shards, Index int
}

func (a loadVoucherArgs) argv() []string {
	shards, index := "", ""
	if a.Shards > 1 {
		shards, index = strconv.Itoa(a.Shards), strconv.Itoa(a.Index)
	}
	return []string{
		strconv.FormatInt(a.Stock, 10),      // ARGV[1]
		unixMillis(a.Begin),                 // ARGV[2]
		unixMillis(a.End),                   // ARGV[3]
		Group,                               // ARGV[4]
		strconv.FormatInt(a.Generation, 10), // ARGV[5]
		shards,                              // ARGV[6]
		index,                               // ARGV[7]
	}
}

// nodeAcquireArgs are node_acquire.lua's ARGV.
type nodeAcquireArgs struct {
	Token string // the caller's
	TTL   time.Duration
	// First is the node id to try first (then the following ones,
	// wrapping), Count how many there are.
	First, Count int
	// Server is the server's identity, or "" for the script to read it
	// from INFO (see Client.nodeServer).
	Server string
}

func (a nodeAcquireArgs) argv() []string {
	return []string{
		a.Token,               // ARGV[1]
		ms(a.TTL),             // ARGV[2]
		strconv.Itoa(a.First), // ARGV[3]
		strconv.Itoa(a.Count), // ARGV[4]
		a.Server,              // ARGV[5]
	}
}

// nodeRenewArgs are node_renew.lua's ARGV.
type nodeRenewArgs struct {
	Node  int
	Token string // the caller's
	TTL   time.Duration
	// LastUnixMs is the newest order-id time used.
	LastUnixMs int64
	// Recent says that the caller's last renewal confirmed was sent less
	// than its validity ago.
	Recent bool
}

func (a nodeRenewArgs) argv() []string {
	return []string{
		strconv.Itoa(a.Node),                // ARGV[1]
		a.Token,                             // ARGV[2]
		ms(a.TTL),                           // ARGV[3]
		strconv.FormatInt(a.LastUnixMs, 10), // ARGV[4]
		flag(a.Recent),                      // ARGV[5]
	}
}

// releaseArgs are release.lua's ARGV; the hold of a unit given back is
// Hold, and the change log's bounds those of the copies of sold-out
// vouchers' buyers (soldout.go).
type releaseArgs struct {
	UserID, OrderID int64
	// Keep is the order id to leave as the buyer's, keeping the stock, or
	// "" to free the slot and give the stock back.
	Keep string
}

func (a releaseArgs) argv() []string {
	return []string{
		strconv.FormatInt(a.UserID, 10),  // ARGV[1]
		strconv.FormatInt(a.OrderID, 10), // ARGV[2]
		a.Keep,                           // ARGV[3]
		holdMillis,                       // ARGV[4]
		changeLogLen,                     // ARGV[5]
		changeLogTTL,                     // ARGV[6]
	}
}

// returnUnitArgs are return_unit.lua's ARGV; the hold of a unit given back
// is Hold, and the change log's bounds those of the copies of sold-out
// vouchers' buyers (soldout.go).
type returnUnitArgs struct {
	UserID, OrderID int64
	// Rebuy frees the slot (seckill.Voucher.RebuyAfterCancel); else it
	// keeps the order as cancelled.
	Rebuy bool
	// Generation is the voucher's.
	Generation int64
}

func (a returnUnitArgs) argv() []string {
	return []string{
		strconv.FormatInt(a.UserID, 10),     // ARGV[1]
		strconv.FormatInt(a.OrderID, 10),    // ARGV[2]
		flag(a.Rebuy),                       // ARGV[3]
		strconv.FormatInt(a.Generation, 10), // ARGV[4]
		holdMillis,                          // ARGV[5]
		changeLogLen,                        // ARGV[6]
		changeLogTTL,                        // ARGV[7]
	}
}

// flag is a boolean as the scripts take it.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// orNone is a positive id in decimal, or "" for none.
func orNone(n int64) string {
	if n <= 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

func unixMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
