package seckill

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// DeadLetterRecord is a dead letter as the cache holds it: an entry of a
// voucher's dead-letter stream (its shard's, for a voucher with shards).
type DeadLetterRecord struct {
	// EntryID is the entry's id in the shard's dead-letter stream.
	EntryID   string
	VoucherID int64
	// Shard is the index of the voucher's shard whose dead-letter stream
	// holds the entry; 0 for an unsharded voucher.
	Shard   int
	OrderID int64 // 0 if the message had none
	UserID  int64 // 0 if the message had none
	Reason  string
	// At is when it was dead-lettered: the entry id's milliseconds.
	At time.Time
	// StockReturned says whether its unit of stock went back on sale.
	StockReturned bool
}

// ID is the dead letter's id as operators name it (ParseDeadLetterID
// reads it back): its voucher, shard and entry.
func (r *DeadLetterRecord) ID() string {
	name := strconv.FormatInt(r.VoucherID, 10)
	if r.Shard > 0 {
		name += "." + strconv.Itoa(r.Shard)
	}
	return name + ":" + r.EntryID
}

// ParseDeadLetterID reads a dead letter's id: an order id (orderID > 0), or
// "<voucher id>:<entry id>" for shard 0's dead letters (an unsharded
// voucher's), "<voucher id>.<shard>:<entry id>" for another shard's: an
// entry id names an entry only within its shard's stream. Anything else is
// ErrInvalidArgument.
func ParseDeadLetterID(id string) (orderID int64, s Shard, entryID string, err error) {
	bad := Errorf(ErrInvalidArgument, "dead letter id: want an order id or <voucher id>[.<shard>]:<entry id>, got %q", truncate(id, 40))
	v, entry, named := strings.Cut(id, ":")
	if !named {
		n, ok := positive(id)
		if !ok {
			return 0, Shard{}, "", bad
		}
		return n, Shard{}, "", nil
	}
	v, index, sharded := strings.Cut(v, ".")
	voucherID, ok := positive(v)
	if sharded {
		// Shard 0 is named without its index, so that each dead letter has
		// one name.
		i, isIndex := positive(index)
		ok = ok && isIndex && i < MaxShards
		s.Index = int(i)
	}
	ms, seq, dash := strings.Cut(entry, "-")
	if !ok || !dash || !unsigned(ms) || !unsigned(seq) {
		return 0, Shard{}, "", bad
	}
	s.VoucherID = voucherID
	return 0, s, entry, nil
}

// positive reads a positive decimal int64 written without sign or zeros in
// front, so that each id has one spelling.
func positive(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == s
}

// unsigned reports whether s is a decimal uint64 without sign or zeros in
// front: a part of a stream entry id.
func unsigned(s string) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && strconv.FormatUint(n, 10) == s
}

// truncate shortens s to about n bytes for a message, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
