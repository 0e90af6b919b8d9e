package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// Backlog returns how many orders wait in the shard's stream: pending
// (delivered, not acknowledged) plus lag (not delivered yet), from XINFO
// GROUPS. Redis cannot always tell the lag (after deletions in the stream):
// then the stream's length stands in, an overestimate until it is trimmed.
func (c *Client) Backlog(ctx context.Context, s seckill.Shard) (int64, error) {
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return 0, err
	}
	op := "read the backlog of " + streamName(s)
	res := c.rdb.DoMulti(ctx, c.rdb.B().XinfoGroups().Key(k.Orders).Build(), c.rdb.B().Xlen().Key(k.Orders).Build())
	groups, err := res[0].ToArray()
	if err != nil {
		return 0, streamErr(op, err)
	}
	length, err := res[1].AsInt64()
	if err != nil {
		return 0, streamErr(op, err)
	}
	g, err := workersGroup(groups)
	if err != nil {
		return 0, fmt.Errorf("redis: %s: %w", op, err)
	}
	if g == nil {
		return length, nil
	}
	pending, _ := field(g, "pending").AsInt64()
	lag, err := field(g, "lag").AsInt64()
	if err != nil {
		return max(length, pending), nil
	}
	return pending + lag, nil
}

// workersGroup returns the workers' group's fields from an XINFO GROUPS
// reply, or nil when the stream has no such group.
func workersGroup(groups []rueidis.RedisMessage) (map[string]rueidis.RedisMessage, error) {
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return nil, err
		}
		if name, _ := field(m, "name").ToString(); name == Group {
			return m, nil
		}
	}
	return nil, nil
}
