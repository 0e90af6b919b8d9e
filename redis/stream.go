package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// Group is the consumer group of every order stream. Each instance of the
// service is a consumer of it under a name of its own.
const Group = "workers"

// ReadOrders reads new order messages of the shard for consumer (XREADGROUP
// from ">"), blocking up to block.
func (c *Client) ReadOrders(ctx context.Context, s seckill.Shard, consumer string, count int, block time.Duration) ([]seckill.OrderMessage, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return nil, err
	}
	cmd := c.rdb.B().Xreadgroup().Group(Group, consumer).Count(int64(count))
	if block <= 0 {
		// BLOCK 0 would wait forever.
		return c.readGroup(ctx, s, k, cmd.Streams().Key(k.Orders).Id(">").Build())
	}
	// A blocking read sends nothing until Redis answers, so a connection
	// cut while it waits (a partition) would never be noticed: bound it.
	ctx, cancel := context.WithTimeout(ctx, block+blockGrace)
	defer cancel()
	return c.readGroup(ctx, s, k, cmd.Block(block.Milliseconds()).Streams().Key(k.Orders).Id(">").Build())
}

// blockGrace is how long past its BLOCK time a blocking read may wait for
// Redis's answer before the connection is taken for dead.
const blockGrace = 2 * time.Second

// ReadPending reads consumer's unacknowledged messages of the voucher after
// the entry id after (XREADGROUP from an id reads the consumer's history),
// with their delivery counts, this read's included (Redis 7 counts a read
// of the history as a delivery).
func (c *Client) ReadPending(ctx context.Context, s seckill.Shard, consumer, after string, count int) ([]seckill.OrderMessage, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return nil, err
	}
	msgs, err := c.readGroup(ctx, s, k, c.rdb.B().Xreadgroup().Group(Group, consumer).Count(int64(count)).
		Streams().Key(k.Orders).Id(after).Build())
	if err != nil || len(msgs) == 0 {
		return msgs, err
	}
	if err := c.deliveries(ctx, k.Orders, consumer, msgs); err != nil {
		return nil, streamErr(fmt.Sprintf("read the delivery counts of %s", streamName(s)), err)
	}
	return msgs, nil
}

func (c *Client) readGroup(ctx context.Context, s seckill.Shard, k *voucherKeys, cmd rueidis.Completed) ([]seckill.OrderMessage, error) {
	res, err := c.rdb.Do(ctx, cmd).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, streamErr(fmt.Sprintf("read orders of %s", streamName(s)), err)
	}
	entries := res[k.Orders]
	msgs := make([]seckill.OrderMessage, len(entries))
	for i, e := range entries {
		msgs[i] = parseShardMessage(s, e)
	}
	return msgs, nil
}

// streamName names shard s's stream in errors and logs: "voucher <id>" as
// always for an unsharded voucher's (its shard 0), "voucher <id> shard <i>"
// for another shard's.
func streamName(s seckill.Shard) string {
	if s.Index == 0 {
		return "voucher " + strconv.FormatInt(s.VoucherID, 10)
	}
	return "voucher " + strconv.FormatInt(s.VoucherID, 10) + " shard " + strconv.Itoa(s.Index)
}

// parseMessage reads an order message as admit.lua writes it, from an
// unsharded voucher's stream.
func parseMessage(voucherID int64, e rueidis.XRangeEntry) seckill.OrderMessage {
	return parseShardMessage(seckill.Shard{VoucherID: voucherID}, e)
}

// parseShardMessage reads an order message as admit.lua writes it, from
// shard s's stream.
func parseShardMessage(s seckill.Shard, e rueidis.XRangeEntry) seckill.OrderMessage {
	voucherID := s.VoucherID
	m := seckill.OrderMessage{EntryID: e.ID, VoucherID: voucherID, Shard: s.Index, Order: seckill.Order{VoucherID: voucherID, Status: seckill.OrderPending}}
	var problems []string
	field := func(name string) int64 {
		s, ok := e.FieldValues[name]
		if !ok {
			problems = append(problems, "no "+name)
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			problems = append(problems, fmt.Sprintf("%s %q is not a positive integer", name, s))
			return 0
		}
		return n
	}
	m.Order.ID = field("id")
	m.Order.UserID = field("user")
	if v := field("voucher"); v != 0 && v != voucherID {
		problems = append(problems, fmt.Sprintf("voucher %d in the stream of voucher %d", v, voucherID))
	}
	if at := field("at"); at != 0 {
		m.Order.CreatedAt = time.UnixMilli(at).UTC()
	}
	if len(problems) > 0 {
		m.Err = fmt.Errorf("malformed order message %s: %s", e.ID, strings.Join(problems, ", "))
	}
	return m
}

// AckOrders acknowledges settled messages and returns how many were
// pending. XACK on a lost stream answers 0, not NOGROUP, if the stream was
// made again since; a lost stream or group is ErrStreamLost.
func (c *Client) AckOrders(ctx context.Context, s seckill.Shard, entryIDs ...string) (int64, error) {
	if len(entryIDs) == 0 {
		return 0, nil
	}
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return 0, err
	}
	n, err := c.rdb.Do(ctx, c.rdb.B().Xack().Key(k.Orders).Group(Group).Id(entryIDs...).Build()).AsInt64()
	if err != nil {
		return 0, streamErr(fmt.Sprintf("ack orders of %s", streamName(s)), err)
	}
	return n, nil
}

// CountPersisted runs count_persisted.lua for orders, on each buyer's home
// shard: where the buyer is admitted, and so where the buyer's unit must be
// counted.
func (c *Client) CountPersisted(ctx context.Context, voucherID int64, orders []*seckill.Order) error {
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return err
	}
	byShard := make([][]*seckill.Order, len(l.shards))
	for _, o := range orders {
		i := seckill.HomeShard(o.UserID, len(l.shards))
		byShard[i] = append(byShard[i], o)
	}
	for i, orders := range byShard {
		if len(orders) == 0 {
			continue
		}
		s := seckill.Shard{VoucherID: voucherID, Index: i}
		k := l.shards[i]
		a := make(args, 0, 2+2*len(orders))
		a = append(a, changeLogLen, changeLogTTL)
		for _, o := range orders {
			a = append(a, strconv.FormatInt(o.UserID, 10), strconv.FormatInt(o.ID, 10))
		}
		n, err := countPersistedScript.runInt(ctx, c, "count persisted orders of "+streamName(s), []string{k.Stock, k.Buyers, k.Meta, k.Changes, k.Cancelled, k.Returned}, a)
		if err != nil {
			return err
		}
		if n > 0 {
			log := c.logger.With("voucher", voucherID)
			if len(l.shards) > 1 {
				log = log.With("shard", i)
			}
			log.Warn("Redis did not count orders the database holds (it lost data); counted them now", "orders", n)
		}
	}
	return nil
}

// RefreshClaims resets the idle time of consumer's messages (XCLAIM JUSTID:
// it does not count as a delivery).
func (c *Client) RefreshClaims(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) error {
	if len(entryIDs) == 0 {
		return nil
	}
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return err
	}
	cmd := c.rdb.B().Xclaim().Key(k.Orders).Group(Group).Consumer(consumer).MinIdleTime("0").Id(entryIDs...).Justid().Build()
	if err := c.rdb.Do(ctx, cmd).Error(); err != nil {
		return streamErr(fmt.Sprintf("refresh claims on %s", streamName(s)), err)
	}
	return nil
}

// ClaimStale claims up to count stale messages with claim_stale.lua,
// following its cursor: each call claims at most claimChunk and looks at
// ten times as many pending entries, so that admissions on the voucher's
// Redis never wait long behind it, however many are asked for. It returns
// fewer than count only when it looked at the whole pending list. A
// message taken from a consumer that is still alive keeps its delivery
// count: only a message whose consumer died counts a delivery more.
//
// A consumer is alive if it was active within minIdle/2: a consumer at
// work renews its claims every third of the lease, and one that died (or
// a consumer messages were abandoned to, see GiveUp) has been idle at
// least as long as its stale messages.
func (c *Client) ClaimStale(ctx context.Context, s seckill.Shard, consumer string, minIdle time.Duration, count int) ([]seckill.OrderMessage, []string, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	op := "claim stale orders of " + streamName(s)
	live, err := c.liveConsumers(ctx, k.Orders, minIdle/2)
	if err != nil {
		return nil, nil, streamErr(op, err)
	}
	var (
		msgs    []seckill.OrderMessage
		deleted []string
		cursor  = "0-0"
	)
	for len(msgs) < count {
		want := min(count-len(msgs), claimChunk)
		// Look at ten entries for each one wanted, as XAUTOCLAIM does.
		res, err := claimStaleScript.run(ctx, c, []string{k.Orders},
			claimStaleArgs{Consumer: consumer, MinIdle: minIdle, Cursor: cursor, Count: want, Scan: 10 * want, Live: live}).ToArray()
		if err != nil {
			return nil, nil, streamErr(op, err)
		}
		var claimed []seckill.OrderMessage
		var gone []string
		if cursor, claimed, gone, err = parseClaimed(s, res); err != nil {
			return nil, nil, fmt.Errorf("redis: %s: %w", op, err)
		}
		msgs, deleted = append(msgs, claimed...), append(deleted, gone...)
		if cursor == "0-0" {
			break
		}
	}
	return msgs, deleted, nil
}

// claimChunk bounds the messages one claim_stale.lua call claims: 1,000
// took 12.9 ms on a stream of 20,000 pending entries, 100 took 2.5 ms.
const claimChunk = 100

// Abandoned returns the name of the consumer that holds the messages
// consumer gave up on until they are reclaimed (GiveUp). It never reads;
// the reaper removes it once it holds nothing.
func Abandoned(consumer string) string { return consumer + abandonedSuffix }

const abandonedSuffix = ".abandoned"

// parseClaimed reads claim_stale.lua's reply.
func parseClaimed(s seckill.Shard, res []rueidis.RedisMessage) (cursor string, msgs []seckill.OrderMessage, deleted []string, err error) {
	if len(res) != 4 {
		return "", nil, nil, fmt.Errorf("%d values returned, want 4", len(res))
	}
	if cursor, err = res[0].ToString(); err != nil {
		return "", nil, nil, fmt.Errorf("cursor: %w", err)
	}
	entries, err := res[1].AsXRange()
	if err != nil {
		return "", nil, nil, fmt.Errorf("entries: %w", err)
	}
	counts, err := res[2].AsIntSlice()
	if err != nil {
		return "", nil, nil, fmt.Errorf("delivery counts: %w", err)
	}
	if len(counts) != len(entries) {
		return "", nil, nil, fmt.Errorf("%d delivery counts for %d entries", len(counts), len(entries))
	}
	if deleted, err = res[3].AsStrSlice(); err != nil {
		return "", nil, nil, fmt.Errorf("deleted ids: %w", err)
	}
	for i, e := range entries {
		m := parseShardMessage(s, e)
		m.Deliveries = counts[i]
		msgs = append(msgs, m)
	}
	return cursor, msgs, deleted, nil
}

// liveConsumers returns the group's consumers that have been idle less
// than idle. Redis 7.0 counts as activity only a delivery or a claim; the
// embedded server only a claim, and reports an idle time of -1 for a
// consumer that never claimed: not alive.
func (c *Client) liveConsumers(ctx context.Context, stream string, idle time.Duration) ([]string, error) {
	idles, err := c.consumerIdles(ctx, stream)
	if err != nil {
		return nil, err
	}
	var live []string
	for name, d := range idles {
		// A consumer messages were abandoned to is never alive: each give-up
		// claims for it, which Redis counts as activity, and a steady flow
		// of them would otherwise keep failing messages from ever counting
		// a delivery.
		if d >= 0 && d < idle && !strings.HasSuffix(name, abandonedSuffix) {
			live = append(live, name)
		}
	}
	return live, nil
}

// consumerIdles returns the idle time of each consumer of the group.
func (c *Client) consumerIdles(ctx context.Context, stream string) (map[string]time.Duration, error) {
	consumers, err := c.rdb.Do(ctx, c.rdb.B().XinfoConsumers().Key(stream).Group(Group).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	idles := make(map[string]time.Duration, len(consumers))
	for _, cm := range consumers {
		m, err := cm.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg, idleMsg := m["name"], m["idle"]
		name, _ := nameMsg.ToString()
		ms, _ := idleMsg.AsInt64()
		idles[name] = time.Duration(ms) * time.Millisecond
	}
	return idles, nil
}

// GiveUp abandons consumer's messages of entryIDs (give_up.lua): it hands
// them to Abandoned(consumer), which never reads, so that they are
// reclaimed when the lease runs out as from a consumer that died, and that
// delivery counts. Only those pending with consumer are handed over.
func (c *Client) GiveUp(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) error {
	if len(entryIDs) == 0 {
		return nil
	}
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return err
	}
	err = giveUpScript.run(ctx, c, []string{k.Orders}, append(args{Group, consumer, Abandoned(consumer)}, entryIDs...)).Error()
	if err != nil {
		return streamErr(fmt.Sprintf("give up order messages of %s", streamName(s)), err)
	}
	return nil
}

// deliveries sets the delivery counts of consumer's msgs from XPENDING.
func (c *Client) deliveries(ctx context.Context, stream, consumer string, msgs []seckill.OrderMessage) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EntryID
	}
	counts, err := c.pendingWith(ctx, stream, consumer, ids)
	if err != nil {
		return err
	}
	for i := range msgs {
		msgs[i].Deliveries = counts[msgs[i].EntryID]
	}
	return nil
}

// Held returns which of entryIDs are pending with consumer.
func (c *Client) Held(ctx context.Context, s seckill.Shard, consumer string, entryIDs ...string) (map[string]bool, error) {
	held := make(map[string]bool, len(entryIDs))
	if len(entryIDs) == 0 {
		return held, nil
	}
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return nil, err
	}
	counts, err := c.pendingWith(ctx, k.Orders, consumer, entryIDs)
	if err != nil {
		return nil, streamErr(fmt.Sprintf("read the pending orders of %s", streamName(s)), err)
	}
	for _, id := range entryIDs {
		if _, ok := counts[id]; ok {
			held[id] = true
		}
	}
	return held, nil
}

// pendingWith returns the delivery counts of the entries pending with
// consumer between the least and the greatest of ids.
func (c *Client) pendingWith(ctx context.Context, stream, consumer string, ids []string) (map[string]int64, error) {
	first, last := ids[0], ids[0]
	for _, id := range ids {
		if compareIDs(id, first) < 0 {
			first = id
		}
		if compareIDs(id, last) > 0 {
			last = id
		}
	}
	counts := make(map[string]int64, len(ids))
	for {
		pend, err := c.rdb.Do(ctx, c.rdb.B().Xpending().Key(stream).Group(Group).
			Start(first).End(last).Count(1000).Consumer(consumer).Build()).ToArray()
		if err != nil {
			return nil, err
		}
		for _, p := range pend {
			fields, err := p.ToArray()
			if err != nil || len(fields) < 4 {
				continue
			}
			id, _ := fields[0].ToString()
			n, _ := fields[3].AsInt64()
			counts[id] = n
		}
		if len(pend) < 1000 {
			break
		}
		id, _ := pend[len(pend)-1].ToArray()
		lastSeen, _ := id[0].ToString()
		if first, err = nextID(lastSeen); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// DeadLetter runs dead_letter.lua for msg, on msg's shard: its stream, its
// dead letters, and the stock and buyer slot its admission took there.
func (c *Client) DeadLetter(ctx context.Context, msg seckill.OrderMessage, dl seckill.DeadLetter) (bool, error) {
	k, err := c.shardKeys(ctx, msg.Stream())
	if err != nil {
		return false, err
	}
	n, err := deadLetterScript.run(ctx, c, []string{k.Stock, k.Buyers, k.Orders, k.DLQ, k.Meta, k.Changes, k.Cancelled, k.Returned},
		deadLetterArgs{EntryID: msg.EntryID, OrderID: msg.Order.ID, UserID: msg.Order.UserID, VoucherID: msg.VoucherID,
			Reason: dl.Reason, GiveStock: !dl.KeepStock, KeepOrder: dl.BuyerOrder},
	).AsInt64()
	if err != nil {
		return false, streamErr(fmt.Sprintf("dead-letter order message %s of %s", msg.EntryID, streamName(msg.Stream())), err)
	}
	return n >= 0, nil
}

// TrimOrders trims the stream below its oldest pending entry and its first
// entry not yet delivered (XTRIM MINID; never MAXLEN, which deletes pending
// entries), unless the voucher is unloaded: a rebuild in flight counts the
// stream's entries (scripts/trim_orders.lua). The last delivered id is read before the pending list: an entry
// delivered in between lies above it and is kept.
func (c *Client) TrimOrders(ctx context.Context, s seckill.Shard) (int64, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return 0, err
	}
	op := "trim orders of " + streamName(s)
	last, err := c.lastDelivered(ctx, k.Orders)
	if err != nil {
		return 0, streamErr(op, err)
	}
	minID, err := nextID(last)
	if err != nil {
		return 0, fmt.Errorf("redis: %s: %w", op, err)
	}
	summary, err := c.rdb.Do(ctx, c.rdb.B().Xpending().Key(k.Orders).Group(Group).Build()).ToArray()
	if err != nil {
		return 0, streamErr(op, err)
	}
	if n, _ := summary[0].AsInt64(); n > 0 {
		oldest, err := summary[1].ToString()
		if err != nil {
			return 0, fmt.Errorf("redis: %s: oldest pending: %w", op, err)
		}
		if compareIDs(oldest, minID) < 0 {
			minID = oldest
		}
	}
	n, err := trimOrdersScript.run(ctx, c, []string{k.Stock, k.Orders}, args{minID}).AsInt64()
	if err != nil {
		return 0, streamErr(op, err)
	}
	return max(n, 0), nil // -1: unloaded, nothing trimmed
}

// lastDelivered returns the id of the last entry delivered to the group.
func (c *Client) lastDelivered(ctx context.Context, stream string) (string, error) {
	groups, err := c.rdb.Do(ctx, c.rdb.B().XinfoGroups().Key(stream).Build()).ToArray()
	if err != nil {
		return "", err
	}
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return "", err
		}
		name, last := m["name"], m["last-delivered-id"]
		if s, _ := name.ToString(); s == Group {
			return last.ToString()
		}
	}
	return "", fmt.Errorf("group %s: %w", Group, seckill.ErrStreamLost)
}

// nextID returns the stream id just after id: "ms-seq" → "ms-(seq+1)"; an
// id of ms alone (the embedded server's "0") stands for "ms-0".
func nextID(id string) (string, error) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		seq = "0"
	}
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return "", fmt.Errorf("stream id %q: want ms-seq", id)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return "", fmt.Errorf("stream id %q: want ms-seq", id)
	}
	return ms + "-" + strconv.FormatUint(n+1, 10), nil
}

// ReapConsumers lists the group's consumers and removes, each atomically
// with the check that it has nothing pending, those idle too long.
func (c *Client) ReapConsumers(ctx context.Context, s seckill.Shard, self string, idle time.Duration) ([]string, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return nil, err
	}
	op := "reap consumers of " + streamName(s)
	idles, err := c.consumerIdles(ctx, k.Orders)
	if err != nil {
		return nil, streamErr(op, err)
	}
	var reaped []string
	for _, name := range slices.Sorted(maps.Keys(idles)) {
		if name == self || idles[name] <= idle {
			continue
		}
		n, err := reapConsumerScript.run(ctx, c, []string{k.Orders}, args{Group, name}).AsInt64()
		if err != nil {
			return reaped, streamErr(op, err)
		}
		if n == 1 {
			reaped = append(reaped, name)
		}
	}
	return reaped, nil
}

// streamErr wraps a failed stream operation: ErrStreamLost when the stream
// or its group is gone, else as redisErr does.
func streamErr(op string, err error) error {
	if errors.Is(err, seckill.ErrStreamLost) {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	if isNoGroup(err) {
		return fmt.Errorf("redis: %s: %w: %w", op, seckill.ErrStreamLost, err)
	}
	return redisErr(op, err)
}

// isNoGroup reports an error that says the stream or its group is gone:
// NOGROUP, or "no such key" from XINFO. Inside a script the embedded server
// puts its own words first, hence Contains.
func isNoGroup(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "NOGROUP") || strings.Contains(msg, "no such key")
}

// WaitOrders waits up to block for the shard's stream to hold messages
// not yet delivered to the group, without taking any (XREAD after the
// group's last delivered id), and reports whether it does. A reader waits
// here, not in a blocking XREADGROUP, so that waiting on an idle stream
// holds no worker slot.
func (c *Client) WaitOrders(ctx context.Context, s seckill.Shard, block time.Duration) (bool, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return false, err
	}
	op := "wait for orders of " + streamName(s)
	last, err := c.lastDelivered(ctx, k.Orders)
	if err != nil {
		return false, streamErr(op, err)
	}
	cmd := c.rdb.B().Xread().Count(1)
	var res map[string][]rueidis.XRangeEntry
	if block > 0 {
		// Its caller bounds the wait (worker.readBatch), as ReadOrders
		// bounds its own: a cut connection never answers.
		res, err = c.rdb.Do(ctx, cmd.Block(block.Milliseconds()).Streams().Key(k.Orders).Id(last).Build()).AsXRead()
	} else {
		res, err = c.rdb.Do(ctx, cmd.Streams().Key(k.Orders).Id(last).Build()).AsXRead()
	}
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, streamErr(op, err)
	}
	return len(res[k.Orders]) > 0, nil
}
