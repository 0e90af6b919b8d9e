package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// rebuildFreeze is how long a rebuild of a sharded voucher holds its
// shards frozen at most (it thaws them when done): a rebuild that has not
// finished within half of it starts over rather than finish on counts
// whose freeze may have ended.
const rebuildFreeze = 30 * time.Second

// lostShard is a shard being rebuilt: its keys, index and rebuild epoch.
type lostShard struct {
	index int
	k     *voucherKeys
	epoch string
}

// rebuildShards is one try of Rebuild for a sharded voucher; errSuperseded
// means try again. The shards that lost their data (no stock, or another
// generation, or no window) are rebuilt from the database, each with its
// buyers (those whose home it is), and the stock the others leave:
//
//  1. each lost shard begins (rebuild_begin) and stages its buyers: the
//     database's orders of the buyers whose home it is (and its cancelled
//     slots, or returned orders), then those of its stream (stage_buyers,
//     stage_queued), as an unsharded voucher does;
//  2. every shard is frozen with a new transfer generation (shard_freeze),
//     which reads each one's stock, buyers and transfers out at one
//     instant; then the receivers' record of what they received: the
//     transfers in flight (inFlight);
//  3. each lost shard's transfers are reset (shard_reset): its records of
//     them go, and it takes the new generation, as the others did, so that
//     a transfer begun before is given back to its donor, never applied;
//  4. the lost shards share what the others and the transfers in flight
//     leave of the initial stock: each its own buyers and an even part of
//     the rest (finish_rebuild, which sets the stock only where there is
//     none: two rebuilds at once count the same, and the second sets
//     nothing);
//  5. the shards are thawed.
//
// Its Remaining is the stock of every shard: of those kept, as frozen; of
// those rebuilt, as set.
func (c *Client) rebuildShards(ctx context.Context, v *seckill.Voucher, orders seckill.OrderPages) (seckill.Rebuilt, error) {
	shards := c.Learn(v).shards
	gen := strconv.FormatInt(v.Generation, 10)
	var out seckill.Rebuilt
	lost, split, err := c.lostShards(ctx, v, shards)
	if err != nil {
		return out, err
	}
	if len(lost) == 0 {
		if split {
			// A rebuild died between its freezes: transfers between
			// shards of two generations are refused, and the stock of
			// one cannot move to the other.
			err = c.resetTransfers(ctx, v, shards)
		}
		return out, err
	}
	var staging []*lostShard
	for _, i := range lost {
		k := shards[i]
		op := fmt.Sprintf("rebuild shard %d of voucher %d", i, v.ID)
		res, err := rebuildBeginScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ, k.Cancelled, k.Returned}, args{gen, Group, holdMillis}).ToArray()
		if err != nil {
			return out, redisErr(op, err)
		}
		if len(res) != 3 {
			return out, fmt.Errorf("redis: %s: begin returned %d values, want 3", op, len(res))
		}
		switch todo, _ := res[0].AsInt64(); todo {
		case -1:
			return out, seckill.Errorf(seckill.ErrEnded, "voucher %d was dropped from Redis past its retention: it is not rebuilt", v.ID)
		case 0:
			continue // rebuilt meanwhile
		}
		epoch, err := res[1].ToString()
		if err != nil {
			n, ierr := res[1].AsInt64()
			if ierr != nil {
				return out, fmt.Errorf("redis: %s: epoch: %w", op, err)
			}
			epoch = strconv.FormatInt(n, 10)
		}
		if replaced, _ := res[2].AsInt64(); replaced == 1 {
			out.Replaced = true
		}
		staging = append(staging, &lostShard{index: i, k: k, epoch: epoch})
	}
	if staging, err = c.stageShardOrders(ctx, v, gen, staging, orders); err != nil {
		return out, err
	}
	var left []*lostShard
	for _, s := range staging {
		more, err := c.stageQueued(ctx, *s.k, fmt.Sprintf("stage queued buyers of shard %d of voucher %d", s.index, v.ID), gen, s.epoch)
		if err != nil {
			return out, err
		}
		if more {
			left = append(left, s)
		}
	}
	if len(left) == 0 {
		return out, nil
	}
	token := newXGen()
	frozenAt := time.Now()
	frozen, xgen, err := c.freezeAll(ctx, v, shards, token, rebuildFreeze)
	defer func() {
		// Thawed apart from ctx, which may be what failed: else the
		// shards wait out the freeze.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if terr := c.thaw(tctx, v.ID, shards, token); terr != nil {
			c.logger.Warn("could not thaw a sharded voucher's shards after a rebuild; they thaw by themselves", "voucher", v.ID, "after", rebuildFreeze.String(), "err", terr)
		}
	}()
	if err != nil {
		return out, err
	}
	out, err = c.finishShards(ctx, v, shards, frozen, left, xgen, token, frozenAt, out)
	return out, err
}

// lostShards returns the shards of v that hold no loaded voucher of its
// generation: no stock, another generation, or no window; and whether the
// others are not all of one transfer generation.
func (c *Client) lostShards(ctx context.Context, v *seckill.Voucher, shards []*voucherKeys) (lost []int, split bool, err error) {
	gen := strconv.FormatInt(v.Generation, 10)
	cmds := make([]rueidis.Completed, 0, 2*len(shards))
	for _, k := range shards {
		cmds = append(cmds, c.rdb.B().Exists().Key(k.Stock).Build(),
			c.rdb.B().Hmget().Key(k.Meta).Field("gen", "begin", "end", "xgen").Build())
	}
	res := c.rdb.DoMulti(ctx, cmds...)
	xgens := map[string]bool{}
	for i := range shards {
		op := fmt.Sprintf("read shard %d of voucher %d", i, v.ID)
		n, err := res[2*i].AsInt64()
		if err != nil {
			return nil, false, redisErr(op, err)
		}
		meta, err := res[2*i+1].ToArray()
		if err != nil {
			return nil, false, redisErr(op, err)
		}
		if len(meta) != 4 {
			return nil, false, fmt.Errorf("redis: %s: %d fields of meta, want 4", op, len(meta))
		}
		field := func(j int, absent string) string {
			if s, err := meta[j].ToString(); err == nil {
				return s
			}
			return absent
		}
		if n == 0 || field(0, "0") != gen || field(1, "") == "" || field(2, "") == "" {
			lost = append(lost, i)
			continue
		}
		xgens[field(3, "0")] = true
	}
	return lost, len(xgens) > 1, nil
}

// freezeAll freezes every shard of v (holder, for d) with a new transfer
// generation, holder itself, and returns what it read and the transfer
// generation they all have: holder's, or a later one a shard had already
// (another rebuild's, or one of an instance whose clock is ahead), which
// it then sets on the others. Shards it froze stay frozen on an error:
// thaw them.
func (c *Client) freezeAll(ctx context.Context, v *seckill.Voucher, shards []*voucherKeys, holder string, d time.Duration) ([]frozenShard, string, error) {
	xgen := holder
	for range 3 {
		frozen, err := c.freeze(ctx, v, shards, holder, xgen, d)
		if err != nil {
			return nil, "", err
		}
		agree := true
		for _, s := range frozen {
			if s.Kept && s.XGen != xgen {
				agree = false
				if laterXGen(s.XGen, xgen) {
					xgen = s.XGen
				}
			}
		}
		if agree {
			return frozen, xgen, nil
		}
	}
	// Another rebuild keeps setting later ones: the lost shards take the
	// latest seen, and the next rebuild makes them one.
	frozen, err := c.freeze(ctx, v, shards, holder, xgen, d)
	return frozen, xgen, err
}

// resetTransfers makes every shard of v take one new transfer generation:
// a transfer begun before it is refused by its receiver and given back to
// its donor.
func (c *Client) resetTransfers(ctx context.Context, v *seckill.Voucher, shards []*voucherKeys) error {
	holder := newXGen()
	_, xgen, err := c.freezeAll(ctx, v, shards, holder, countFreeze)
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if terr := c.thaw(tctx, v.ID, shards, holder); terr != nil && err == nil {
		err = terr
	}
	if err == nil {
		c.logger.Warn("a sharded voucher's shards were of several transfer generations (a rebuild stopped half-way): they are all of one again, and the transfers begun before go back to their donors",
			"voucher", v.ID, "xgen", xgen)
	}
	return err
}

// stageShardOrders stages the database's orders of v (stageArgs) into the
// lost shards that are their buyers' homes, reading them once, a page at a
// time. It returns the shards still being rebuilt (another rebuild may
// have finished some).
func (c *Client) stageShardOrders(ctx context.Context, v *seckill.Voucher, gen string, staging []*lostShard, orders seckill.OrderPages) ([]*lostShard, error) {
	byIndex := make(map[int]*lostShard, len(staging))
	for _, s := range staging {
		byIndex[s.index] = s
	}
	var after int64
	for len(byIndex) > 0 {
		page, err := orders(ctx, v.ID, after, rebuildPage)
		if err != nil {
			return nil, fmt.Errorf("rebuild voucher %d: read its orders: %w", v.ID, err)
		}
		home := map[int][]*seckill.Order{}
		for _, o := range page {
			if i := seckill.HomeShard(o.UserID, v.ShardCount()); byIndex[i] != nil {
				home[i] = append(home[i], o)
			}
		}
		for i, os := range home {
			s := byIndex[i]
			for chunk := range chunks(os, stageChunk) {
				n, err := stageBuyersScript.runInt(ctx, c, fmt.Sprintf("stage buyers of shard %d of voucher %d", i, v.ID),
					[]string{s.k.Stock, s.k.Meta, s.k.Buyers, s.k.Cancelled, s.k.Returned}, stageArgs(gen, s.epoch, chunk, v.RebuyAfterCancel))
				if err != nil {
					return nil, err
				}
				if n == -1 {
					return nil, errSuperseded
				}
				if n == 0 {
					delete(byIndex, i)
					break
				}
			}
		}
		if len(page) < rebuildPage {
			break
		}
		after = page[len(page)-1].ID
	}
	var out []*lostShard
	for _, s := range staging {
		if byIndex[s.index] != nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// finishShards is the end of rebuildShards, its shards frozen (frozen is
// what freezeAll read, xgen the transfer generation they have): it resets
// the lost shards' transfers to xgen and sets their stock.
func (c *Client) finishShards(ctx context.Context, v *seckill.Voucher, shards []*voucherKeys, frozen []frozenShard, staged []*lostShard, xgen, holder string, frozenAt time.Time, out seckill.Rebuilt) (seckill.Rebuilt, error) {
	gen := strconv.FormatInt(v.Generation, 10)
	byIndex := map[int]*lostShard{}
	for _, s := range staged {
		byIndex[s.index] = s
	}
	var lost []*lostShard
	var loaded int64
	for i, s := range frozen {
		switch {
		case s.Loaded:
			loaded += s.Stock + s.Buyers
		case byIndex[i] == nil:
			// Lost since this rebuild looked, or of another generation
			// now, or rebuilt by another and lost again: start over.
			return out, errSuperseded
		default:
			lost = append(lost, byIndex[i])
		}
	}
	if len(lost) == 0 {
		return out, nil
	}
	for _, s := range lost {
		n, err := shardResetScript.runInt(ctx, c, fmt.Sprintf("reset the transfers of shard %d of voucher %d", s.index, v.ID),
			[]string{s.k.Stock, s.k.Meta, s.k.Xout, s.k.Xin}, shardResetArgs{Generation: gen, Epoch: s.epoch, XGen: xgen, Shards: len(shards), Index: s.index})
		if err != nil {
			return out, err
		}
		if n != 1 {
			// Rebuilt by another meanwhile (its count is now one this
			// freeze did not make), or unloaded: start over.
			return out, errSuperseded
		}
	}
	flight, err := c.inFlight(ctx, v.ID, shards, frozen)
	if err != nil {
		return out, err
	}
	var inFlight, held int64
	for _, n := range flight {
		inFlight += n
	}
	buyers := make([]int64, len(lost))
	for j, s := range lost {
		if buyers[j], err = c.rdb.Do(ctx, c.rdb.B().Hlen().Key(s.k.Buyers).Build()).AsInt64(); err != nil {
			return out, redisErr(fmt.Sprintf("count the buyers of shard %d of voucher %d", s.index, v.ID), err)
		}
		held += buyers[j]
	}
	rest := v.InitialStock - loaded - inFlight - held
	if rest < 0 {
		c.logger.Error("a sharded voucher's rebuilt shards hold more buyers than the stock the other shards leave: Redis sold more than the stock; its lost shards get no stock",
			"voucher", v.ID, "initial_stock", v.InitialStock, "loaded_shards_stock_and_buyers", loaded, "in_flight", inFlight, "lost_shards_buyers", held, "oversold", -rest)
		rest = 0
	}
	if time.Since(frozenAt) > rebuildFreeze/2 {
		return out, errSuperseded // the freeze may end before the stock is set
	}
	// The shards counted as loaded must still be those counted: one lost
	// since the freeze (its master flushed) lost this rebuild's hold with
	// it, and another rebuild may be counting it as lost now, whose stock
	// this one would then count twice (found by review: two rebuilds, a
	// second loss between them, sold 35 of 30). Start over on the count of
	// now. What is left is the moment between this read and the finish.
	if ok, err := c.stillHeld(ctx, shards, frozen, holder); err != nil || !ok {
		if err == nil {
			err = errSuperseded
		}
		return out, err
	}
	out.Remaining = 0
	for _, s := range frozen {
		if s.Loaded {
			out.Remaining += s.Stock
		}
	}
	for j, s := range lost {
		share := seckill.ShardStock(rest, len(lost), j)
		fin, err := finishRebuildScript.run(ctx, c, []string{s.k.Stock, s.k.Meta, s.k.Buyers, s.k.Orders},
			finishRebuildArgs{Generation: gen, Epoch: s.epoch, InitialStock: buyers[j] + share, Begin: v.BeginTime, End: v.EndTime, Paused: v.Paused}).ToArray()
		if err != nil {
			return out, redisErr(fmt.Sprintf("finish the rebuild of shard %d of voucher %d", s.index, v.ID), err)
		}
		switch done, _ := fin[0].AsInt64(); done {
		case -1, 0:
			// Unloaded, or finished by another rebuild: the shards left
			// are counted again.
			return out, errSuperseded
		}
		str, _ := fin[1].ToString()
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return out, fmt.Errorf("redis: finish the rebuild of shard %d of voucher %d: stock %q: %w", s.index, v.ID, str, err)
		}
		out.Remaining += n
		out.Done = true
	}
	return out, nil
}

// stillHeld reports whether every shard frozen counted as loaded still
// holds holder's freeze and a stock: neither lost nor unloaded since.
func (c *Client) stillHeld(ctx context.Context, shards []*voucherKeys, frozen []frozenShard, holder string) (bool, error) {
	var cmds rueidis.Commands
	for i, s := range frozen {
		if s.Loaded {
			cmds = append(cmds, c.rdb.B().Hexists().Key(shards[i].Meta).Field("xhold:"+holder).Build(),
				c.rdb.B().Exists().Key(shards[i].Stock).Build())
		}
	}
	for _, r := range c.rdb.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return false, redisErr("check a sharded voucher's shards are still frozen", err)
		}
		if n != 1 {
			return false, nil
		}
	}
	return true, nil
}
