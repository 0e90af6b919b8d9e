package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/seckill/seckill"
)

// The sizes of a rebuild's steps. Each script call of a rebuild handles a
// bounded part of the voucher, so that a voucher with a million buyers or a
// million queued orders never holds Redis for more than a few milliseconds
// at a time (and Lua's unpack limit of about 8,000 values is never near).
const (
	// rebuildPage is how many orders one database read of a rebuild takes.
	rebuildPage = 5000
	// stageChunk is how many buyers one stage_buyers call writes.
	stageChunk = 500
	// queuedPage is how many stream entries one stage_queued call reads.
	queuedPage = 1000
	// rebuildTries bounds how often a rebuild starts over because an unload
	// superseded it.
	rebuildTries = 5
)

// errSuperseded says that an unload (or a load of another generation)
// happened while a rebuild was staging: it starts over.
var errSuperseded = errors.New("rebuild superseded")

// Rebuild puts v back in Redis from the database, unless Redis holds it:
// rebuild_begin, then its orders read through orders and staged a chunk at
// a time (stage_buyers: those that hold a unit as buyers, the cancelled
// ones as cancelled slots or, for a voucher whose buyers may buy again,
// returned orders, which hold none), then the buyers of the orders
// still in its stream a page at a time (stage_queued), then its window and
// the stock the buyers leave (finish_rebuild). Every step checks the epoch rebuild_begin
// returned: an Unload meanwhile makes the rebuild start over. A voucher
// dropped past its retention (DropVoucher), before or during the rebuild,
// is not made again: ErrEnded.
//
// A sharded voucher is rebuilt a shard at a time: see rebuildShards.
func (c *Client) Rebuild(ctx context.Context, v *seckill.Voucher, orders seckill.OrderPages) (seckill.Rebuilt, error) {
	once := c.rebuildOnce
	if c.Learn(v); v.ShardCount() > 1 {
		once = c.rebuildShards
	}
	var replaced bool
	for range rebuildTries {
		res, err := once(ctx, v, orders)
		replaced = replaced || res.Replaced
		res.Replaced = replaced
		if !errors.Is(err, errSuperseded) {
			if res.Replaced {
				c.logger.Warn("Redis held another generation of a voucher's id, now replaced: was the database reset, or do two databases share this Redis key prefix?",
					"voucher", v.ID, "prefix", c.keys.prefix)
			}
			return res, err
		}
	}
	return seckill.Rebuilt{Replaced: replaced}, fmt.Errorf("redis: rebuild voucher %d: unloaded again %d times while rebuilding: %w", v.ID, rebuildTries, seckill.ErrUnavailable)
}

// rebuildOnce is one try of Rebuild; errSuperseded means try again.
func (c *Client) rebuildOnce(ctx context.Context, v *seckill.Voucher, orders seckill.OrderPages) (seckill.Rebuilt, error) {
	k := c.keys.voucher(v.ID)
	op := fmt.Sprintf("rebuild voucher %d", v.ID)
	gen := strconv.FormatInt(v.Generation, 10)
	res, err := rebuildBeginScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ, k.Cancelled, k.Returned}, args{gen, Group, holdMillis}).ToArray()
	if err != nil {
		return seckill.Rebuilt{}, redisErr(op, err)
	}
	if len(res) != 3 {
		return seckill.Rebuilt{}, fmt.Errorf("redis: %s: begin returned %d values, want 3", op, len(res))
	}
	todo, _ := res[0].AsInt64()
	if todo == -1 {
		return seckill.Rebuilt{}, seckill.Errorf(seckill.ErrEnded, "voucher %d was dropped from Redis past its retention: it is not rebuilt", v.ID)
	}
	epoch, err := res[1].ToString()
	if err != nil {
		if n, ierr := res[1].AsInt64(); ierr == nil {
			epoch, err = strconv.FormatInt(n, 10), nil
		}
	}
	if err != nil {
		return seckill.Rebuilt{}, fmt.Errorf("redis: %s: epoch: %w", op, err)
	}
	replacedN, _ := res[2].AsInt64()
	out := seckill.Rebuilt{Replaced: replacedN == 1}
	if todo == 0 {
		return out, nil
	}
	staging, err := c.stageOrders(ctx, v, gen, epoch, orders)
	if err != nil || !staging {
		return out, err
	}
	if staging, err = c.stageQueued(ctx, k, fmt.Sprintf("stage queued buyers of voucher %d", v.ID), gen, epoch); err != nil || !staging {
		return out, err
	}
	fin, err := finishRebuildScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Orders},
		finishRebuildArgs{Generation: gen, Epoch: epoch, InitialStock: v.InitialStock, Begin: v.BeginTime, End: v.EndTime, Paused: v.Paused}).ToArray()
	if err != nil {
		return out, redisErr(op, err)
	}
	switch done, _ := fin[0].AsInt64(); done {
	case -1:
		return out, errSuperseded
	case 0:
		return out, nil
	}
	s, _ := fin[1].ToString()
	if out.Remaining, err = strconv.ParseInt(s, 10, 64); err != nil {
		return out, fmt.Errorf("redis: %s: stock %q: %w", op, s, err)
	}
	out.Done = true
	return out, nil
}

// stageOrders stages the voucher's orders from the database: those that
// hold a unit as buyers, the cancelled ones as such (stageArgs). It reports
// false once the voucher has a stock (someone else finished).
func (c *Client) stageOrders(ctx context.Context, v *seckill.Voucher, gen, epoch string, orders seckill.OrderPages) (bool, error) {
	k := c.keys.voucher(v.ID)
	var after int64
	for {
		page, err := orders(ctx, v.ID, after, rebuildPage)
		if err != nil {
			return false, fmt.Errorf("rebuild voucher %d: read its orders: %w", v.ID, err)
		}
		for chunk := range chunks(page, stageChunk) {
			n, err := stageBuyersScript.runInt(ctx, c, fmt.Sprintf("stage buyers of voucher %d", v.ID), []string{k.Stock, k.Meta, k.Buyers, k.Cancelled, k.Returned},
				stageArgs(gen, epoch, chunk, v.RebuyAfterCancel))
			switch {
			case err != nil:
				return false, err
			case n == -1:
				return false, errSuperseded
			case n == 0:
				return false, nil
			}
		}
		if len(page) < rebuildPage {
			return true, nil
		}
		after = page[len(page)-1].ID
	}
}

// stageArgs are stage_buyers.lua's ARGV for a chunk of the database's
// orders: those that hold a unit first, as buyers; then the cancelled ones
// (cancelled, refunding, refunded), as cancelled slots their buyer keeps,
// or, if rebuy (seckill.Voucher.RebuyAfterCancel), as returned orders. An
// order of no status, as a store from before cancellations read it, holds
// a unit.
func stageArgs(gen, epoch string, chunk []*seckill.Order, rebuy bool) args {
	a := make(args, 4, 4+2*len(chunk))
	a[0], a[1], a[2] = gen, epoch, flag(rebuy)
	var cancelled []*seckill.Order
	for _, o := range chunk {
		if o.Status.Cancelled() {
			cancelled = append(cancelled, o)
			continue
		}
		a = append(a, strconv.FormatInt(o.UserID, 10), strconv.FormatInt(o.ID, 10))
	}
	a[3] = strconv.Itoa((len(a) - 4) / 2)
	for _, o := range cancelled {
		a = append(a, strconv.FormatInt(o.UserID, 10), strconv.FormatInt(o.ID, 10))
	}
	return a
}

// stageQueued stages the buyers of the orders in the stream of the
// voucher (or shard) of k, a page at a time. It reports false once the
// voucher has a stock.
func (c *Client) stageQueued(ctx context.Context, k voucherKeys, op, gen, epoch string) (bool, error) {
	start := "-"
	for {
		res, err := stageQueuedScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.Cancelled, k.Returned},
			args{gen, epoch, start, strconv.Itoa(queuedPage)}).ToArray()
		if err != nil {
			return false, redisErr(op, err)
		}
		switch n, _ := res[0].AsInt64(); n {
		case -1:
			return false, errSuperseded
		case 0:
			return false, nil
		}
		last, _ := res[1].ToString()
		if last == "" {
			return true, nil
		}
		if start, err = nextID(last); err != nil {
			return false, fmt.Errorf("redis: %s: %w", op, err)
		}
	}
}

// chunks yields s in pieces of at most n.
func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			m := min(n, len(s))
			if !yield(s[:m]) {
				return
			}
			s = s[m:]
		}
	}
}

// Unload deletes the voucher's stock and buyers (of every shard, for a
// sharded one), so that it is rebuilt from the database, and starts a new
// epoch, so that a rebuild in flight starts over. Admission refuses the
// voucher from that moment until the rebuild.
func (c *Client) Unload(ctx context.Context, voucherID int64) error {
	return c.unload(ctx, voucherID, "0")
}

// UnloadStock is Unload that keeps the voucher's buyers: the rebuild counts
// them with those it finds in the database and the stream.
func (c *Client) UnloadStock(ctx context.Context, voucherID int64) error {
	return c.unload(ctx, voucherID, "1")
}

// unload unloads every shard of the voucher: a sharded voucher is unloaded
// whole, and rebuilt whole (rebuildShards), each shard with its buyers and
// an even part of the stock they leave.
func (c *Client) unload(ctx context.Context, voucherID int64, keepBuyers string) error {
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return err
	}
	for i, k := range l.shards {
		if err := unloadScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Cancelled, k.Returned}, args{keepBuyers}).Error(); err != nil {
			if len(l.shards) > 1 {
				return redisErr(fmt.Sprintf("unload shard %d of voucher %d", i, voucherID), err)
			}
			return redisErr(fmt.Sprintf("unload voucher %d", voucherID), err)
		}
	}
	return nil
}

// compareIDs orders two stream ids "ms-seq".
func compareIDs(a, b string) int {
	parse := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		s, _ := strconv.ParseUint(seq, 10, 64)
		return m, s
	}
	am, as := parse(a)
	bm, bs := parse(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}
