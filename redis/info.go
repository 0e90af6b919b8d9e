package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// infoLimits bound a State read: at most pending pending entries are
// listed, and at most lagCount entries are counted when Redis cannot tell
// the lag.
type infoLimits struct {
	pending, lagCount int64
}

// defaultInfoLimits keep a read to a few megabytes at worst; a healthy
// group has a few batches pending.
var defaultInfoLimits = infoLimits{pending: 10_000, lagCount: 10_000}

// State reads what Redis holds of the voucher's sale: its stock, buyers and
// dead letters, and its order stream as the workers' group sees it, in one
// round trip, a MULTI, so that they agree with each other (an admission
// takes the stock, records the buyer and appends to the stream at once). A
// second round trip reads the order ids of the pending entries, and counts
// the undelivered entries when Redis cannot tell the lag (after a deletion
// just past the last delivered entry) or may not tell it right (the
// embedded server reports the stream's length). The reads are bounded
// (infoLimits): a backlog of a million orders costs what one of ten
// thousand does. That is still a command per pending entry: the metrics
// read Summary instead.
func (c *Client) State(ctx context.Context, voucherID int64) (*seckill.CacheState, error) {
	return c.state(ctx, voucherID, defaultInfoLimits)
}

func (c *Client) state(ctx context.Context, voucherID int64, lim infoLimits) (*seckill.CacheState, error) {
	op := fmt.Sprintf("read the state of voucher %d", voucherID)
	st, g, pel, err := c.snapshot(ctx, voucherID, lim.pending, op)
	if err != nil || g == nil {
		return st, err
	}
	st.Unlisted = max(0, st.Pending-int64(len(pel)))
	st.Bounded = st.Unlisted > 0
	if err := c.streamDetails(ctx, voucherID, st, pel, g, lim.lagCount); err != nil {
		return nil, redisErr(op, err)
	}
	return st, nil
}

// summaryLimits bound a Summary: it looks at the first 100 pending entries
// (by id) for their idle time, and counts at most 100 undelivered entries
// when Redis cannot tell the lag.
var summaryLimits = infoLimits{pending: 100, lagCount: 100}

// Summary is State without the work per pending entry: what Redis counts
// of the voucher's sale (its stock, buyers and dead letters, the stream's
// length, and the workers' group's pending entries, lag and consumers), in
// one round trip whose cost does not grow with the backlog, and a second,
// bounded one only when Redis cannot tell the lag. It does not read which
// orders the pending entries carry: PendingOrders is empty and every
// pending entry is Unlisted (so an order the database committed and the
// workers have not acknowledged yet reads as pending, for that moment).
//
// OldestPending is the longest idle time among the first 100 pending
// entries and the consumers holding pending entries: an entry is idle at
// least as long as the consumer it was delivered to, so this is the true
// figure or less, and a consumer that died shows however many it holds.
// A message no consumer acknowledges sinks to the first entries as the
// ones around it are settled.
func (c *Client) Summary(ctx context.Context, voucherID int64) (*seckill.CacheState, error) {
	return c.summary(ctx, voucherID, summaryLimits)
}

func (c *Client) summary(ctx context.Context, voucherID int64, lim infoLimits) (*seckill.CacheState, error) {
	op := fmt.Sprintf("read the counts of voucher %d", voucherID)
	st, g, _, err := c.snapshot(ctx, voucherID, lim.pending, op)
	if err != nil || g == nil {
		return st, err
	}
	st.Unlisted, st.Bounded = st.Pending, st.Pending > 0
	for _, ci := range st.Consumers {
		if ci.Pending > 0 {
			st.OldestPending = max(st.OldestPending, ci.Idle)
		}
	}
	if err := c.streamDetails(ctx, voucherID, st, nil, g, lim.lagCount); err != nil {
		return nil, redisErr(op, err)
	}
	return st, nil
}

// snapshot reads, in one MULTI, the voucher's stock, buyers and dead
// letters, and its stream: length, the workers' group, its consumers and
// its first pending entries (up to pending, for their ids and idle times).
// g is nil when the stream has no group: nothing delivered, nothing
// pending, and st is complete.
func (c *Client) snapshot(ctx context.Context, voucherID int64, pending int64, op string) (st *seckill.CacheState, g *group, pel []string, err error) {
	k := c.keys.voucher(voucherID)
	res := c.rdb.DoMulti(ctx,
		c.rdb.B().Multi().Build(),
		c.rdb.B().Get().Key(k.Stock).Build(),
		c.rdb.B().Hlen().Key(k.Buyers).Build(),
		c.rdb.B().Xlen().Key(k.Orders).Build(),
		c.rdb.B().XinfoGroups().Key(k.Orders).Build(),
		c.rdb.B().Xpending().Key(k.Orders).Group(Group).Start("-").End("+").Count(pending).Build(),
		c.rdb.B().XinfoConsumers().Key(k.Orders).Group(Group).Build(),
		c.rdb.B().Xlen().Key(k.DLQ).Build(),
		c.rdb.B().Exec().Build(),
	)
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return nil, nil, nil, redisErr(op, err)
		}
	}
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	if len(replies) != 7 {
		return nil, nil, nil, fmt.Errorf("redis: %s: %d replies to 7 commands", op, len(replies))
	}
	st = &seckill.CacheState{}
	stock, err := replies[0].AsInt64()
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return nil, nil, nil, redisErr(op, err)
	default:
		st.Loaded, st.Remaining = true, stock
	}
	if st.Buyers, err = replies[1].AsInt64(); err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	if st.Length, err = replies[2].AsInt64(); err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	st.Node = c.voucherNode(ctx, voucherID)
	if st.DeadLetters, err = replies[6].AsInt64(); err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	if g, err = readGroup(replies[3]); err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	if g == nil {
		// No stream, or no group: nothing delivered, nothing pending.
		return st, nil, nil, nil
	}
	st.Pending, st.Lag = g.pending, g.lag
	if pel, err = pendingEntries(replies[4], st); err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	if st.Consumers, err = readConsumers(replies[5]); err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %s: %w", op, err)
	}
	return st, g, pel, nil
}

// group is the workers' group as XINFO GROUPS describes it.
type group struct {
	lastDelivered string
	pending       int64
	// lag is Redis's lag when it is trusted (see readGroup); else nil.
	lag     *int64
	trusted bool
}

// readGroup reads the workers' group from XINFO GROUPS; nil if there is
// none. Redis's lag is trusted when it knows how many entries the group
// read, or when the group read none yet. (The embedded server never knows,
// and answers the stream's length.)
func readGroup(reply rueidis.RedisMessage) (*group, error) {
	if err := reply.Error(); err != nil {
		if isNoGroup(err) {
			return nil, nil
		}
		return nil, err
	}
	groups, err := reply.ToArray()
	if err != nil {
		return nil, err
	}
	m, err := workersGroup(groups)
	if err != nil || m == nil {
		return nil, err
	}
	g := &group{}
	g.lastDelivered, _ = field(m, "last-delivered-id").ToString()
	if g.pending, err = field(m, "pending").AsInt64(); err != nil {
		return nil, fmt.Errorf("group pending: %w", err)
	}
	lag, err := field(m, "lag").AsInt64()
	if err != nil {
		// Redis cannot tell: count them.
		return g, nil
	}
	if _, err := field(m, "entries-read").AsInt64(); err == nil || compareIDs(g.lastDelivered, "0-0") <= 0 {
		g.lag, g.trusted = &lag, true
	}
	return g, nil
}

// pendingEntries reads the extended XPENDING: the pending entries' ids, and
// the longest idle time among them into st.
func pendingEntries(reply rueidis.RedisMessage, st *seckill.CacheState) ([]string, error) {
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
			st.OldestPending = max(st.OldestPending, time.Duration(ms)*time.Millisecond)
		}
	}
	return ids, nil
}

func readConsumers(reply rueidis.RedisMessage) ([]seckill.StreamConsumer, error) {
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
	out := make([]seckill.StreamConsumer, 0, len(consumers))
	for _, cm := range consumers {
		m, err := cm.AsMap()
		if err != nil {
			return nil, err
		}
		var ci seckill.StreamConsumer
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
// entries and, unless the group's lag is trusted, the entries after the
// last delivered one, to count them.
func (c *Client) streamDetails(ctx context.Context, voucherID int64, st *seckill.CacheState, pel []string, g *group, lagCount int64) error {
	k := c.keys.voucher(voucherID)
	cmds := make(rueidis.Commands, 0, len(pel)+1)
	for _, id := range pel {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start(id).End(id).Build())
	}
	if !g.trusted {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start("("+g.lastDelivered).End("+").Count(lagCount).Build())
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
				st.PendingOrders = append(st.PendingOrders, m.Order.ID)
			}
		}
	}
	if !g.trusted {
		after, err := res[len(pel)].AsXRange()
		if err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		if n := int64(len(after)); n < lagCount {
			st.Lag = &n
		} else {
			st.Bounded = true
		}
	}
	return nil
}

// field returns a field of a map reply; a missing one reads as nil.
func field(m map[string]rueidis.RedisMessage, name string) *rueidis.RedisMessage {
	v := m[name]
	return &v
}
