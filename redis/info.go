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
	return c.read(ctx, voucherID, lim, "read the state of voucher %d", false)
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
	return c.read(ctx, voucherID, lim, "read the counts of voucher %d", true)
}

// shardRead is the read of one shard of a voucher (State or Summary) under
// way: its keys k, sh for a shard of a sharded voucher (nil for an
// unsharded one), and what the snapshot found (st, g, pel).
type shardRead struct {
	k   *voucherKeys
	sh  *seckill.ShardState
	lim infoLimits
	op  string

	st  *seckill.CacheState
	g   *group
	pel []string
}

// snapshot reads, in one MULTI, the stock, buyers and dead letters of the
// shard of keys k (an unsharded voucher's, or one shard's), and its stream:
// length, the workers' group, its consumers and its first pending entries
// (up to pending, for their ids and idle times); for a shard of a sharded
// voucher (sh not nil), also its transfers out not yet settled, into sh.
// g is nil when the stream has no group: nothing delivered, nothing
// pending, and st is complete. snapshotCmds are its commands, and
// snapshot reads their results, res.
func (c *Client) snapshotCmds(k *voucherKeys, pending int64, sh *seckill.ShardState) rueidis.Commands {
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
	return append(cmds, c.rdb.B().Exec().Build())
}

func (c *Client) snapshot(ctx context.Context, k *voucherKeys, op string, sh *seckill.ShardState, res []rueidis.RedisResult) (st *seckill.CacheState, g *group, pel []string, err error) {
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return nil, nil, nil, redisErr(op, err)
		}
	}
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		return nil, nil, nil, redisErr(op, err)
	}
	if want := len(res) - 2; len(replies) != want {
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

// detailsCmds are the commands that read the order ids of the pending
// entries pel and, unless the group's lag is trusted, the entries after
// the last delivered one, to count them (at most lagCount); none when
// there is nothing to read. details reads their results, res, into st.
func (c *Client) detailsCmds(k *voucherKeys, pel []string, g *group, lagCount int64) rueidis.Commands {
	cmds := make(rueidis.Commands, 0, len(pel)+1)
	for _, id := range pel {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start(id).End(id).Build())
	}
	if !g.trusted {
		cmds = append(cmds, c.rdb.B().Xrange().Key(k.Orders).Start("("+g.lastDelivered).End("+").Count(lagCount).Build())
	}
	return cmds
}

func details(voucherID int64, st *seckill.CacheState, pel []string, g *group, lagCount int64, res []rueidis.RedisResult) error {
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

// read reads the voucher: State, or with summary Summary. An unsharded
// voucher is read as it always was: its snapshot, in one MULTI, then its
// stream's details if there are any to read. A sharded one is read shard
// by shard, each at one instant of its own (one slot, one MULTI), within
// lim shared between them, and summed: the shards' snapshots in one
// pipeline, then their details in another, where the client talks to one
// node; on a Cluster one shard after another, since rueidis sends a
// pipeline that holds a MULTI to one slot only. This package starts no
// goroutine to read them at once.
func (c *Client) read(ctx context.Context, voucherID int64, lim infoLimits, opf string, summary bool) (*seckill.CacheState, error) {
	op := fmt.Sprintf(opf, voucherID)
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	n := int64(len(l.shards))
	reads := make([]shardRead, n)
	var shards []seckill.ShardState
	if n == 1 {
		reads[0] = shardRead{k: l.shards[0], lim: lim, op: op}
	} else {
		per := infoLimits{pending: (lim.pending + n - 1) / n, lagCount: (lim.lagCount + n - 1) / n}
		shards = make([]seckill.ShardState, n)
		for i, k := range l.shards {
			shards[i] = seckill.ShardState{Index: i, Tag: k.Tag}
			reads[i] = shardRead{k: k, sh: &shards[i], lim: per, op: fmt.Sprintf("%s, shard %d", op, i)}
		}
	}

	cmds := make([]rueidis.Commands, n)
	for i, r := range reads {
		cmds[i] = c.snapshotCmds(r.k, r.lim.pending, r.sh)
	}
	for i, res := range c.doEach(ctx, cmds) {
		r := &reads[i]
		if r.st, r.g, r.pel, err = c.snapshot(ctx, r.k, r.op, r.sh, res); err != nil {
			return nil, err
		}
	}

	for i := range reads {
		r := &reads[i]
		cmds[i] = nil
		if r.g == nil {
			continue // no group: nothing delivered, nothing pending, st is complete
		}
		if summary {
			r.st.Unlisted, r.st.Bounded = r.st.Pending, r.st.Pending > 0
			for _, ci := range r.st.Consumers {
				if ci.Pending > 0 {
					r.st.OldestPending = max(r.st.OldestPending, ci.Idle)
				}
			}
			r.pel = nil // Summary does not list the pending orders
		} else {
			r.st.Unlisted = max(0, r.st.Pending-int64(len(r.pel)))
			r.st.Bounded = r.st.Unlisted > 0
		}
		cmds[i] = c.detailsCmds(r.k, r.pel, r.g, r.lim.lagCount)
	}
	for i, res := range c.doEach(ctx, cmds) {
		r := &reads[i]
		if len(res) == 0 {
			continue
		}
		if err := details(voucherID, r.st, r.pel, r.g, r.lim.lagCount, res); err != nil {
			return nil, redisErr(r.op, err)
		}
	}

	if n == 1 {
		return reads[0].st, nil
	}
	states := make([]*seckill.CacheState, n)
	for i := range reads {
		states[i] = reads[i].st
	}
	return sumShards(states, shards), nil
}

// doEach sends each of cmds (a shard's commands; none for some) and
// returns their results, each cmds[i]'s at i: in one pipeline when the
// client talks to one node, else one pipeline after another.
func (c *Client) doEach(ctx context.Context, cmds []rueidis.Commands) [][]rueidis.RedisResult {
	out := make([][]rueidis.RedisResult, len(cmds))
	if c.rdb.Mode() == rueidis.ClientModeCluster {
		for i, cs := range cmds {
			if len(cs) > 0 {
				out[i] = c.rdb.DoMulti(ctx, cs...)
			}
		}
		return out
	}
	var all rueidis.Commands
	for _, cs := range cmds {
		all = append(all, cs...)
	}
	if len(all) == 0 {
		return out
	}
	res := c.rdb.DoMulti(ctx, all...)
	for i, cs := range cmds {
		out[i], res = res[:len(cs):len(cs)], res[len(cs):]
	}
	return out
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
