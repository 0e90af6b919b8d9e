package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// StreamInfo is what Redis holds of a voucher's sale, read at one instant
// (one MULTI): its stock, and its order stream as the workers' group sees
// it. Operators watch it; nothing decides on it.
type StreamInfo struct {
	// Time is Redis's clock at the read.
	Time time.Time
	// Loaded says the voucher has a stock in Redis; Remaining is that stock.
	Loaded    bool
	Remaining int64
	// Length counts the entries of the order stream: orders not yet
	// delivered, delivered and not acknowledged, and settled but not yet
	// trimmed.
	Length int64
	// Group says the workers' group exists; without it (or without the
	// stream) the group's fields are zero.
	Group bool
	// LastDelivered is the id of the last entry delivered to the group.
	LastDelivered string
	// Pending counts the entries delivered and not acknowledged.
	Pending int64
	// Lag counts the entries not delivered yet. It is Redis's lag when
	// Redis can tell, else counted from the entries after LastDelivered;
	// nil when neither can tell (Redis after some deletions, with more than
	// 10,000 entries to count): unknown, not zero.
	Lag *int64
	// OldestPending is the longest time a pending entry has gone since it
	// was delivered or its claim refreshed (its XPENDING idle time): above
	// the claim lease, no live worker holds it. Zero when none is pending.
	OldestPending time.Duration
	// Consumers are the group's consumers.
	Consumers []ConsumerInfo
	// PendingOrders are the order ids of the pending entries listed (the
	// first 10,000): orders that the database may hold already, committed
	// and not yet acknowledged, or not. Malformed entries, and entries
	// settled between the two reads, are left out.
	PendingOrders []int64
	// Unlisted counts the pending entries beyond those listed.
	Unlisted int64
	// DeadLetters counts the entries of the dead-letter stream.
	DeadLetters int64
}

// ConsumerInfo is one consumer of the workers' group.
type ConsumerInfo struct {
	Name string
	// Pending counts the entries delivered to it and not acknowledged.
	Pending int64
	// Idle is the time since it last read or claimed; an instance whose
	// reader runs reads every few seconds.
	Idle time.Duration
}

// infoLimits bound a StreamInfo read: at most pending pending entries are
// listed, and at most lagCount entries are counted when Redis cannot tell
// the lag.
type infoLimits struct {
	pending, lagCount int64
}

// defaultInfoLimits keep a read to a few megabytes at worst; a healthy
// group has a few batches pending.
var defaultInfoLimits = infoLimits{pending: 10_000, lagCount: 10_000}

// StreamInfo reads the voucher's stock and order stream in one round trip,
// a MULTI, so that the stock and the stream agree with each other (an
// admission takes the one and appends to the other at once). A second
// round trip reads the order ids of the pending entries, and counts the
// undelivered entries when Redis cannot tell the lag (after a deletion
// just past the last delivered entry) or may not tell it right (the
// embedded server reports the stream's length).
func (c *Client) StreamInfo(ctx context.Context, voucherID int64) (*StreamInfo, error) {
	return c.streamInfo(ctx, voucherID, defaultInfoLimits)
}

func (c *Client) streamInfo(ctx context.Context, voucherID int64, lim infoLimits) (*StreamInfo, error) {
	k := c.keys.voucher(voucherID)
	op := fmt.Sprintf("read the stream info of voucher %d", voucherID)
	res := c.rdb.DoMulti(ctx,
		c.rdb.B().Multi().Build(),
		c.rdb.B().Time().Build(),
		c.rdb.B().Get().Key(k.Stock).Build(),
		c.rdb.B().Xlen().Key(k.Orders).Build(),
		c.rdb.B().XinfoGroups().Key(k.Orders).Build(),
		c.rdb.B().Xpending().Key(k.Orders).Group(Group).Start("-").End("+").Count(lim.pending).Build(),
		c.rdb.B().XinfoConsumers().Key(k.Orders).Group(Group).Build(),
		c.rdb.B().Xlen().Key(k.DLQ).Build(),
		c.rdb.B().Exec().Build(),
	)
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return nil, redisErr(op, err)
		}
	}
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		return nil, redisErr(op, err)
	}
	if len(replies) != 7 {
		return nil, fmt.Errorf("redis: %s: %d replies to 7 commands", op, len(replies))
	}
	info := &StreamInfo{}
	if info.Time, err = parseTime(replies[0]); err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	stock, err := replies[1].AsInt64()
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return nil, redisErr(op, err)
	default:
		info.Loaded, info.Remaining = true, stock
	}
	if info.Length, err = replies[2].AsInt64(); err != nil {
		return nil, redisErr(op, err)
	}
	if info.DeadLetters, err = replies[6].AsInt64(); err != nil {
		return nil, redisErr(op, err)
	}
	trusted, err := info.readGroup(replies[3])
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	if !info.Group {
		// No stream, or no group: nothing delivered, nothing pending.
		return info, nil
	}
	pel, err := info.readPending(replies[4])
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	info.Unlisted = max(0, info.Pending-int64(len(pel)))
	if info.Consumers, err = readConsumers(replies[5]); err != nil {
		return nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	if err := c.streamDetails(ctx, voucherID, info, pel, trusted, lim.lagCount); err != nil {
		return nil, redisErr(op, err)
	}
	return info, nil
}

// readGroup reads the workers' group from XINFO GROUPS and reports whether
// its lag can be trusted: Redis's lag is right when it knows how many
// entries the group read, or when the group read none yet. (The embedded
// server never knows, and answers the stream's length.)
func (info *StreamInfo) readGroup(reply rueidis.RedisMessage) (trusted bool, err error) {
	if err := reply.Error(); err != nil {
		if isNoGroup(err) {
			return false, nil
		}
		return false, err
	}
	groups, err := reply.ToArray()
	if err != nil {
		return false, err
	}
	m, err := workersGroup(groups)
	if err != nil || m == nil {
		return false, err
	}
	info.Group = true
	info.LastDelivered, _ = field(m, "last-delivered-id").ToString()
	if info.Pending, err = field(m, "pending").AsInt64(); err != nil {
		return false, fmt.Errorf("group pending: %w", err)
	}
	lag, err := field(m, "lag").AsInt64()
	if err != nil {
		// Redis cannot tell: count them.
		return false, nil
	}
	if _, err := field(m, "entries-read").AsInt64(); err == nil || compareIDs(info.LastDelivered, "0-0") <= 0 {
		info.Lag = &lag
		return true, nil
	}
	return false, nil
}

// readPending reads the extended XPENDING: the pending entries' ids, and
// the longest idle time among them.
func (info *StreamInfo) readPending(reply rueidis.RedisMessage) ([]string, error) {
	entries, err := reply.ToArray()
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		fields, err := e.ToArray()
		if err != nil || len(fields) < 4 {
			return nil, fmt.Errorf("pending entry: want 4 fields, got %d (%v)", len(fields), err)
		}
		id, err := fields[0].ToString()
		if err != nil {
			return nil, fmt.Errorf("pending entry id: %w", err)
		}
		ids = append(ids, id)
		if ms, err := fields[2].AsInt64(); err == nil {
			info.OldestPending = max(info.OldestPending, time.Duration(ms)*time.Millisecond)
		}
	}
	return ids, nil
}

func readConsumers(reply rueidis.RedisMessage) ([]ConsumerInfo, error) {
	if err := reply.Error(); err != nil {
		if isNoGroup(err) {
			return nil, nil
		}
		return nil, err
	}
	consumers, err := reply.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]ConsumerInfo, 0, len(consumers))
	for _, cm := range consumers {
		m, err := cm.AsMap()
		if err != nil {
			return nil, err
		}
		var ci ConsumerInfo
		ci.Name, _ = field(m, "name").ToString()
		ci.Pending, _ = field(m, "pending").AsInt64()
		// The embedded server answers -1 for a consumer it has not seen.
		if ms, err := field(m, "idle").AsInt64(); err == nil && ms > 0 {
			ci.Idle = time.Duration(ms) * time.Millisecond
		}
		out = append(out, ci)
	}
	return out, nil
}

// streamDetails reads, in one pipeline, the order ids of the pending
// entries and, unless the lag is trusted, the entries after the last
// delivered one, to count them.
func (c *Client) streamDetails(ctx context.Context, voucherID int64, info *StreamInfo, pel []string, trusted bool, lagCount int64) error {
	k := c.keys.voucher(voucherID)
	cmds := make(rueidis.Commands, 0, len(pel)+1)
	for _, id := range pel {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start(id).End(id).Build())
	}
	if !trusted {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start("("+info.LastDelivered).End("+").Count(lagCount).Build())
	}
	if len(cmds) == 0 {
		return nil
	}
	res := c.rdb.DoMulti(ctx, cmds...)
	for i := range pel {
		entries, err := res[i].AsXRange()
		if err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		// Gone since the MULTI: acknowledged and trimmed, or dead-lettered.
		for _, e := range entries {
			if m := parseMessage(voucherID, e); m.Err == nil {
				info.PendingOrders = append(info.PendingOrders, m.Order.ID)
			}
		}
	}
	if !trusted {
		after, err := res[len(pel)].AsXRange()
		if err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		if n := int64(len(after)); n < lagCount {
			info.Lag = &n
		}
	}
	return nil
}

// field returns a field of a map reply; a missing one reads as nil.
func field(m map[string]rueidis.RedisMessage, name string) *rueidis.RedisMessage {
	v := m[name]
	return &v
}

// parseTime reads TIME's answer: seconds and microseconds.
func parseTime(reply rueidis.RedisMessage) (time.Time, error) {
	parts, err := reply.AsStrSlice()
	if err != nil || len(parts) != 2 {
		return time.Time{}, fmt.Errorf("TIME: %v %v", parts, err)
	}
	sec, err1 := strconv.ParseInt(parts[0], 10, 64)
	usec, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("TIME: %v", parts)
	}
	return time.Unix(sec, usec*1000), nil
}
