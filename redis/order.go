package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// Admission script results; see scripts/admit.lua.
const (
	admitted = iota
	admitDuplicate
	admitSoldOut
	admitNotStarted
	admitEnded
	admitNotLoaded
	admitHeld
	admitPaused
)

// Admit runs the admission script for a, appending the order to the
// voucher's stream. It returns nil when the buyer is admitted; else an
// error of kind ErrDuplicateOrder (with the buyer's existing order id),
// ErrSoldOut, ErrNotStarted, ErrEnded, ErrVoucherNotLoaded or
// ErrCacheUnverified. A failure to hear from Redis is ErrUnavailable: the
// script may or may not have run.
//
// The script runs by SHA only, never loaded on the way (see ArmAdmission):
// a Redis that does not have it restarted, failed over or lost its scripts
// since the last check, its data may be older than the database's, and
// nothing must be admitted until the open vouchers are rebuilt. That is
// ErrCacheUnverified.
func (c *Client) Admit(ctx context.Context, a seckill.Admission) error {
	return c.admit(ctx, a, true)
}

// Reserve is Admit without the append to the stream: the queue mode keeps
// the order in memory instead.
func (c *Client) Reserve(ctx context.Context, a seckill.Admission) error {
	return c.admit(ctx, a, false)
}

// Release gives back the stock and buyer slot that an admission of orderID
// took, if the slot still holds it, and reports whether it did.
func (c *Client) Release(ctx context.Context, voucherID, userID, orderID int64) (bool, error) {
	return c.release(ctx, voucherID, userID, orderID, "")
}

// Reassign makes the buyer's slot hold keep instead of orderID, if it still
// holds orderID, and keeps the stock: a buyer Redis admitted twice (it lost
// their first order) keeps the order the database has, whose unit the
// second admission took. It reports whether it changed the slot.
func (c *Client) Reassign(ctx context.Context, voucherID, userID, orderID, keep int64) (bool, error) {
	return c.release(ctx, voucherID, userID, orderID, strconv.FormatInt(keep, 10))
}

func (c *Client) release(ctx context.Context, voucherID, userID, orderID int64, keep string) (bool, error) {
	k, err := c.buyerKeys(ctx, voucherID, userID)
	if err != nil {
		return false, err
	}
	n, err := releaseScript.runInt(ctx, c, fmt.Sprintf("release order %d", orderID), []string{k.Stock, k.Buyers, k.Meta, k.Changes, k.Cancelled, k.Returned},
		releaseArgs{UserID: userID, OrderID: orderID, Keep: keep})
	return n == 1, err
}

// heldWaits bounds how many times an admission waits out a hold (see
// Hold) before it answers unavailable.
const heldWaits = 3

// admit runs admit.lua, waiting out a hold on units given back (it ends
// in at most Hold) rather than answering unavailable at once.
func (c *Client) admit(ctx context.Context, a seckill.Admission, stream bool) error {
	for waited := 0; ; waited++ {
		held, err := c.admitOnce(ctx, a, stream)
		if held <= 0 || waited == heldWaits {
			return err
		}
		t := time.NewTimer(held)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// admitOnce runs admit.lua once. This is the one place where the script's
// return values become domain errors. held is how long the stock is held
// when the script says so (with an ErrUnavailable), else 0.
func (c *Client) admitOnce(ctx context.Context, a seckill.Admission, stream bool) (held time.Duration, _ error) {
	k, err := c.shardOf(ctx, a.VoucherID, a.Shard)
	if err != nil {
		// Where the voucher's shards are could not be read (its row): the
		// admission did not run.
		c.logger.Warn("admission waits: the voucher's shards could not be found", "voucher", a.VoucherID, "err", err)
		return 0, &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the sale cannot be read right now; try again", RetryAfter: time.Second}
	}
	if k == nil {
		// A shard this voucher has not (here): its layout is not known, or
		// not yet relearnt; the rebuild that this answer leads to learns it.
		return 0, fmt.Errorf("redis: voucher %d shard %d: %w", a.VoucherID, a.Shard, seckill.ErrVoucherNotLoaded)
	}
	argv := admitArgs{UserID: a.UserID, OrderID: a.OrderID, VoucherID: k.ID, Append: stream, Generation: a.Generation,
		Wait: c.waitReplicas > 0}.fields()
	b := c.rdb.B()
	if c.waitReplicas > 0 {
		b = c.confirm.B() // run on its connections (admitConfirmed)
	}
	cmd := b.Evalsha().Sha1(c.admitLua.sha).Numkeys(5).Key(k.Stock, k.Meta, k.Buyers, k.Orders, k.Cancelled).Arg(argv[:]...).Build()
	var res []rueidis.RedisMessage
	if c.waitReplicas > 0 {
		res, err = c.admitConfirmed(ctx, k.Stock, cmd)
	} else {
		res, err = c.rdb.Do(ctx, cmd).ToArray()
	}
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		return 0, fmt.Errorf("redis: admit: %w", seckill.ErrCacheUnverified)
	}
	if err != nil {
		return 0, redisErr("admit", err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("redis: admit: %d values returned, want 2", len(res))
	}
	code, err := res[0].AsInt64()
	if err != nil {
		return 0, fmt.Errorf("redis: admit: code: %w", err)
	}
	switch code {
	case admitted:
		return 0, nil
	case admitDuplicate:
		s, err := res[1].ToString()
		if err != nil {
			return 0, fmt.Errorf("redis: admit: existing order: %w", err)
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redis: admit: existing order %q: %w", s, err)
		}
		return 0, &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: id}
	case admitSoldOut:
		return 0, seckill.Errorf(seckill.ErrSoldOut, "voucher %d is sold out", a.VoucherID)
	case admitNotStarted:
		return 0, seckill.Errorf(seckill.ErrNotStarted, "the sale of voucher %d has not started", a.VoucherID)
	case admitEnded:
		return 0, seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", a.VoucherID)
	case admitNotLoaded:
		return 0, fmt.Errorf("redis: voucher %d generation %d: %w", a.VoucherID, a.Generation, seckill.ErrVoucherNotLoaded)
	case admitPaused:
		return 0, seckill.Errorf(seckill.ErrPaused, "the sale of voucher %d is paused; try again later", a.VoucherID)
	case admitHeld:
		// Nothing was written: running the script again is safe.
		ms, _ := res[1].AsInt64()
		held = min(max(time.Duration(ms)*time.Millisecond, time.Millisecond), Hold)
		return held, &seckill.Error{Kind: seckill.ErrUnavailable, Message: "units given back are about to be sold again; try again", RetryAfter: time.Second}
	}
	return 0, fmt.Errorf("redis: admit: unknown code %d", code)
}

// BuyerOrder returns the order id Redis holds for the user in the
// voucher, or 0 if none: a sold-out answer reads it, so that a buyer who
// holds an order is told of it (G5). Admission records the buyer and its
// order in one script, so an order found here was admitted.
func (c *Client) BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	k, err := c.buyerKeys(ctx, voucherID, userID)
	if err != nil {
		return 0, err
	}
	cmd := c.rdb.B().Hget().Key(k.Buyers).Field(strconv.FormatInt(userID, 10)).Build()
	id, err := c.rdb.Do(ctx, cmd).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, redisErr("read buyer", err)
	}
	return id, nil
}

// BuyerOrders returns the order id Redis holds for the user in each of the
// vouchers, in one round trip per node; vouchers where the user has none
// are absent. Admission records the buyer and its order in one script, so
// an order found here was admitted.
func (c *Client) BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error) {
	if len(voucherIDs) == 0 {
		return map[int64]int64{}, nil
	}
	user := strconv.FormatInt(userID, 10)
	cmds := make(rueidis.Commands, len(voucherIDs))
	for i, v := range voucherIDs {
		k, err := c.buyerKeys(ctx, v, userID)
		if err != nil {
			return nil, err
		}
		cmds[i] = c.rdb.B().Hget().Key(k.Buyers).Field(user).Build()
	}
	found := make(map[int64]int64)
	for i, res := range c.rdb.DoMulti(ctx, cmds...) {
		id, err := res.AsInt64()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return nil, redisErr("read buyer", err)
		}
		found[voucherIDs[i]] = id
	}
	return found, nil
}
