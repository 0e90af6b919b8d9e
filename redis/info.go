package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	return c.read(ctx, voucherID, lim, "read the state of voucher %d", c.shardState)
}

// shardState is state for the shard of keys k; sh, for a shard of a
// sharded voucher, takes what is the shard's own.
func (c *Client) shardState(ctx context.Context, voucherID int64, k *voucherKeys, lim infoLimits, op string, sh *seckill.ShardState) (*seckill.CacheState, error) {
	st, g, pel, err := c.snapshot(ctx, voucherID, k, lim.pending, op, sh)
	if err != nil || g == nil {
		return st, err
	}
	st.Unlisted = max(0, st.Pending-int64(len(pel)))
	st.Bounded = st.Unlisted > 0
	if err := c.streamDetails(ctx, voucherID, k, st, pel, g, lim.lagCount); err != nil {
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
	return c.read(ctx, voucherID, lim, "read the counts of voucher %d", c.shardSummary)
}

// shardSummary is summary for the shard of keys k (see shardState).
func (c *Client) shardSummary(ctx context.Context, voucherID int64, k *voucherKeys, lim infoLimits, op string, sh *seckill.ShardState) (*seckill.CacheState, error) {
	st, g, _, err := c.snapshot(ctx, voucherID, k, lim.pending, op, sh)
	if err != nil || g == nil {
		return st, err
	}
	st.Unlisted, st.Bounded = st.Pending, st.Pending > 0
	for _, ci := range st.Consumers {
		if ci.Pending > 0 {
			st.OldestPending = max(st.OldestPending, ci.Idle)
		}
	}
	if err := c.streamDetails(ctx, voucherID, k, st, nil, g, lim.lagCount); err != nil {
		return nil, redisErr(op, err)
	}
	return st, nil
}

// snapshot reads, in one MULTI, the stock, buyers and dead letters of the
// shard of keys k (an unsharded voucher's, or one shard's), and its stream:
// length, the workers' group, its consumers and its first pending entries
// (up to pending, for their ids and idle times); for a shard of a sharded
// voucher (sh not nil), also its transfers out not yet settled, into sh.
// g is nil when the stream has no group: nothing delivered, nothing
// pending, and st is complete.
func (c *Client) snapshot(ctx context.Context, voucherID int64, k *voucherKeys, pending int64, op string, sh *seckill.ShardState) (st *seckill.CacheState, g *group, pel []string, err error) {
	cmds := rueidis.Commands{
		c.rdb.B().Multi().Build(),
		c.rdb.B().Get().Key(k.Stock).Build(),
		c.rdb.B().Hlen().Key(k.Buyers).Build(),
		c.rdb.B().Xlen().Key(k.Orders).Build(),
		c.rdb.B().XinfoGroups().Key(k.Orders).Build(),
		c.rdb.B().Xpending().Key(k.Orders).Group(Group).Start("-").End("+").Count(pending).Build(),
		c.rdb.B().XinfoConsumers().Key(k.Orders).Group(Group).Build(),
		c.rdb.B().Xlen().Key(k.DLQ).Build(),
	}
	if sh != nil {
		cmds = append(cmds, c.rdb.B().Hvals().Key(k.Xout).Build())
	}
	res := c.rdb.DoMulti(ctx, append(cmds, c.rdb.B().Exec().Build())...)
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return nil, nil, nil, redisErr(op, err)
		}
	}
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	if want := len(cmds) - 1; len(replies) != want {
		return nil, nil, nil, fmt.Errorf("redis: %s: %d replies to %d commands", op, len(replies), want)
	}
	if sh != nil {
		if err := transfersOut(replies[7], sh); err != nil {
			return nil, nil, nil, fmt.Errorf("redis: %s: %w", op, err)
		}
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
	st.Node = c.keyNode(ctx, k.Stock)
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
func (c *Client) streamDetails(ctx context.Context, voucherID int64, k *voucherKeys, st *seckill.CacheState, pel []string, g *group, lagCount int64) error {
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

// readShard reads one shard of keys k of a voucher (shardState or
// shardSummary); sh is nil for an unsharded voucher.
type readShard func(ctx context.Context, voucherID int64, k *voucherKeys, lim infoLimits, op string, sh *seckill.ShardState) (*seckill.CacheState, error)

// read reads the voucher with one: an unsharded voucher as it always was,
// a sharded one shard by shard, one after another (this package starts no
// goroutine; a shard's MULTI cannot share a pipeline with another slot's
// on a Cluster), each at one instant of its own (one slot, one MULTI),
// within lim shared between them, and sums them.
func (c *Client) read(ctx context.Context, voucherID int64, lim infoLimits, opf string, one readShard) (*seckill.CacheState, error) {
	op := fmt.Sprintf(opf, voucherID)
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	if len(l.shards) == 1 {
		return one(ctx, voucherID, l.shards[0], lim, op, nil)
	}
	n := int64(len(l.shards))
	per := infoLimits{pending: (lim.pending + n - 1) / n, lagCount: (lim.lagCount + n - 1) / n}
	states := make([]*seckill.CacheState, n)
	shards := make([]seckill.ShardState, n)
	for i, k := range l.shards {
		shards[i] = seckill.ShardState{Index: i, Tag: k.Tag}
		if states[i], err = one(ctx, voucherID, k, per, fmt.Sprintf("%s, shard %d", op, i), &shards[i]); err != nil {
			return nil, err
		}
	}
	return sumShards(states, shards), nil
}

// sumShards returns the state of a sharded voucher from its shards'.
func sumShards(states []*seckill.CacheState, shards []seckill.ShardState) *seckill.CacheState {
	sum := &seckill.CacheState{Loaded: true, Lag: new(int64), Shards: shards}
	consumers := map[string]int{}
	for i, st := range states {
		sh := &shards[i]
		sh.Node, sh.Loaded, sh.Remaining, sh.Buyers = st.Node, st.Loaded, st.Remaining, st.Buyers
		sh.Length, sh.Pending, sh.Lag, sh.DeadLetters = st.Length, st.Pending, st.Lag, st.DeadLetters
		sum.Loaded = sum.Loaded && st.Loaded
		sum.Remaining += st.Remaining
		sum.Buyers += st.Buyers
		sum.Length += st.Length
		sum.Pending += st.Pending
		if sum.Lag != nil && st.Lag != nil {
			*sum.Lag += *st.Lag
		} else {
			sum.Lag = nil
		}
		sum.OldestPending = max(sum.OldestPending, st.OldestPending)
		sum.PendingOrders = append(sum.PendingOrders, st.PendingOrders...)
		sum.Unlisted += st.Unlisted
		sum.Bounded = sum.Bounded || st.Bounded
		sum.DeadLetters += st.DeadLetters
		// One instance's workers are one consumer of every shard's group.
		for _, ci := range st.Consumers {
			j, ok := consumers[ci.Name]
			if !ok {
				consumers[ci.Name] = len(sum.Consumers)
				sum.Consumers = append(sum.Consumers, ci)
				continue
			}
			sum.Consumers[j].Pending += ci.Pending
			sum.Consumers[j].Idle = min(sum.Consumers[j].Idle, ci.Idle)
		}
	}
	if !sum.Loaded {
		sum.Remaining = 0
	}
	return sum
}

// transfersOut reads a shard's xout values, "<to index>:<n>:<unix
// ms>:<xgen>" (transfer.go), into sh: how many transfers, how many units.
func transfersOut(reply rueidis.RedisMessage, sh *seckill.ShardState) error {
	vals, err := reply.AsStrSlice()
	if err != nil {
		return fmt.Errorf("xout: %w", err)
	}
	for _, v := range vals {
		f := strings.SplitN(v, ":", 3)
		if len(f) < 2 {
			return fmt.Errorf("xout: malformed transfer %q", v)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("xout: malformed transfer %q: %w", v, err)
		}
		sh.TransfersOut++
		sh.TransferredOut += n
	}
	return nil
}
