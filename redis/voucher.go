package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// LoadVoucher puts a voucher just created into Redis in one script call,
// unless Redis holds this generation of it already, replacing any state of
// another generation held under its id. It reports whether there was such
// stale state, and logs it: two databases may share one key prefix.
func (c *Client) LoadVoucher(ctx context.Context, v *seckill.Voucher) (bool, error) {
	k := c.keys.voucher(v.ID)
	n, err := loadVoucherScript.runInt(ctx, c, fmt.Sprintf("load voucher %d", v.ID), []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ},
		loadVoucherArgs{Stock: v.Stock, Begin: v.BeginTime, End: v.EndTime, Generation: v.Generation})
	if err != nil {
		return false, err
	}
	switch n {
	case 1:
		c.logger.Warn("Redis held stale state for a new voucher's id, now replaced: was the database reset, or do two databases share this Redis key prefix?",
			"voucher", v.ID, "prefix", c.keys.prefix)
	case -1:
		c.logger.Info("a new voucher was in Redis already: rebuilt from the database by a buyer or another instance first, and kept", "voucher", v.ID)
	}
	return n == 1, nil
}

// Remaining reads the stock left of each voucher in one round trip per node.
func (c *Client) Remaining(ctx context.Context, ids ...int64) (map[int64]int64, error) {
	if len(ids) == 0 {
		return map[int64]int64{}, nil
	}
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = c.rdb.B().Get().Key(c.keys.voucher(id).Stock).Build()
	}
	left := make(map[int64]int64, len(ids))
	for i, res := range c.rdb.DoMulti(ctx, cmds...) {
		n, err := res.AsInt64()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return nil, redisErr("read remaining stock", err)
		}
		left[ids[i]] = n
	}
	return left, nil
}
