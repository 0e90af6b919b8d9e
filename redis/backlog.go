package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
)

// Backlog returns how many orders wait in the voucher's stream: pending
// (delivered, not acknowledged) plus lag (not delivered yet), from XINFO
// GROUPS. Redis cannot always tell the lag (after deletions in the stream):
// then the stream's length stands in, an overestimate until it is trimmed.
func (c *Client) Backlog(ctx context.Context, voucherID int64) (int64, error) {
	k := c.keys.voucher(voucherID)
	op := fmt.Sprintf("read the backlog of voucher %d", voucherID)
	res := c.rdb.DoMulti(ctx, c.rdb.B().XinfoGroups().Key(k.Orders).Build(), c.rdb.B().Xlen().Key(k.Orders).Build())
	groups, err := res[0].ToArray()
	if err != nil {
		return 0, streamErr(op, err)
	}
	length, err := res[1].AsInt64()
	if err != nil {
		return 0, streamErr(op, err)
	}
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return 0, fmt.Errorf("redis: %s: %w", op, err)
		}
		name, pendingMsg, lagMsg := m["name"], m["pending"], m["lag"]
		if n, _ := name.ToString(); n != Group {
			continue
		}
		pending, _ := pendingMsg.AsInt64()
		lag, err := lagMsg.AsInt64()
		if err != nil || rueidis.IsRedisNil(err) {
			return max(length, pending), nil
		}
		return pending + lag, nil
	}
	return length, nil
}
