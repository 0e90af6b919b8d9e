package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// LoadVoucher puts a voucher just created into Redis in one script call
// per shard, unless Redis holds this generation of it already, replacing
// any state of another generation held under its id. It reports whether
// there was such stale state, and logs it: two databases may share one key
// prefix.
//
// A sharded voucher (Shards > 1) is loaded shard by shard, each with its
// even part of the stock (seckill.ShardStock), each on its own; a shard
// already there in this generation is kept, as a whole voucher is.
func (c *Client) LoadVoucher(ctx context.Context, v *seckill.Voucher) (bool, error) {
	l := c.Learn(v)
	shards := len(l.shards)
	var replaced, kept bool
	for i, k := range l.shards {
		keys := []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ, k.Cancelled, k.Returned}
		if shards > 1 {
			// Only a sharded voucher's shards have transfers.
			keys = append(keys, k.Xout, k.Xin)
		}
		n, err := loadVoucherScript.runInt(ctx, c, fmt.Sprintf("load voucher %d shard %d", v.ID, i), keys,
			loadVoucherArgs{Stock: seckill.ShardStock(v.Stock, shards, i), Begin: v.BeginTime, End: v.EndTime,
				Generation: v.Generation, Shards: shards, Index: i})
		if err != nil {
			return replaced, err
		}
		replaced = replaced || n == 1
		kept = kept || n == -1
	}
	if replaced {
		c.logger.Warn("Redis held stale state for a new voucher's id, now replaced: was the database reset, or do two databases share this Redis key prefix?",
			"voucher", v.ID, "prefix", c.keys.prefix)
	}
	if kept {
		c.logger.Info("a new voucher was in Redis already: rebuilt from the database by a buyer or another instance first, and kept", "voucher", v.ID)
	}
	return replaced, nil
}

// Remaining reads the stock left of each voucher in one round trip per
// node: a sharded voucher's is the sum of its shards' (units in flight
// between shards are not counted). A voucher not loaded, or a sharded one
// with any shard not loaded, is absent.
func (c *Client) Remaining(ctx context.Context, ids ...int64) (map[int64]int64, error) {
	if len(ids) == 0 {
		return map[int64]int64{}, nil
	}
	cmds := make(rueidis.Commands, 0, len(ids))
	owner := make([]int64, 0, len(ids))
	for _, id := range ids {
		shards, err := c.shardsOf(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, k := range shards {
			cmds = append(cmds, c.rdb.B().Get().Key(k.Stock).Build())
			owner = append(owner, id)
		}
	}
	left := make(map[int64]int64, len(ids))
	missing := make(map[int64]bool)
	for i, res := range c.rdb.DoMulti(ctx, cmds...) {
		n, err := res.AsInt64()
		if rueidis.IsRedisNil(err) {
			missing[owner[i]] = true
			continue
		}
		if err != nil {
			return nil, redisErr("read remaining stock", err)
		}
		left[owner[i]] += n
	}
	for id := range missing {
		delete(left, id)
	}
	return left, nil
}

// Control writes an operator's control of v (v.Paused; ended, the sale
// ended now at v.EndTime) into every shard's meta, one script call per
// shard (control.lua), where admission reads it. It returns once every
// shard took it: from then on no admission on any shard sees the sale
// unpaused (or not ended).
func (c *Client) Control(ctx context.Context, v *seckill.Voucher, ended bool) error {
	end := ""
	if ended {
		end = unixMillis(v.EndTime)
	}
	a := args{strconv.FormatInt(v.Generation, 10), flag(v.Paused), end}
	l := c.Learn(v)
	for i, k := range l.shards {
		if err := controlScript.run(ctx, c, []string{k.Meta}, a).Error(); err != nil {
			return redisErr(fmt.Sprintf("control voucher %d shard %d", v.ID, i), err)
		}
	}
	return nil
}

// LockControl takes the voucher's control lock for the caller (token) for
// ttl, unless another instance holds it, and reports whether it did. An
// operator's control of a voucher holds it from its database write to its
// last write in Redis (seckill.VoucherService.Pause, End, AddStock), so
// that two controls on two instances apply in one order in both.
func (c *Client) LockControl(ctx context.Context, voucherID int64, token string, ttl time.Duration) (bool, error) {
	err := c.rdb.Do(ctx, c.rdb.B().Set().Key(c.keys.control(voucherID)).Value(token).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, redisErr(fmt.Sprintf("lock the controls of voucher %d", voucherID), err)
	}
	return true, nil
}

// UnlockControl ends the caller's hold on the voucher's control lock, if
// it still holds it.
func (c *Client) UnlockControl(ctx context.Context, voucherID int64, token string) error {
	_, err := fenceRenewScript.runInt(ctx, c, "unlock the controls of a voucher", []string{c.keys.control(voucherID)}, args{token, "0"})
	return err
}

// RenewControl extends the caller's hold on the voucher's control lock by
// ttl, and reports false if it no longer held it.
func (c *Client) RenewControl(ctx context.Context, voucherID int64, token string, ttl time.Duration) (bool, error) {
	n, err := fenceRenewScript.runInt(ctx, c, "renew the controls of a voucher", []string{c.keys.control(voucherID)}, args{token, ms(ttl)})
	return n == 1, err
}
