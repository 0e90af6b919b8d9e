package redis

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// tombstoneFor is how long a dropped voucher's tombstone stays (see
// DropVoucher): longer than anything that began before the drop can go
// on, a rebuild (RebuildTimeout, 10 minutes by default) or a worker's
// batch held up by the database; and as long as the pool looks back for
// vouchers to retire.
const tombstoneFor = 7 * 24 * time.Hour

// DropVoucher deletes every key of the voucher once its order stream is
// drained (scripts/drop_voucher.lua), and reports whether it did. For a
// voucher whose sale ended longer ago than the retention: Redis runs with
// noeviction, and ended vouchers would fill it.
//
// It leaves a tombstone in the voucher's meta for tombstoneFor, so that
// nothing that began before the drop makes its keys again: a rebuild
// answers ErrEnded, an unload and a count of persisted orders do nothing.
// Loading a new voucher of the id (another generation) replaces it.
//
// A voucher with shards is dropped once every shard's stream is drained,
// shard by shard, each as above; none is dropped before: a shard dropped
// alone would have its reader find its stream gone, and stop reading the
// voucher (past its retention, a rebuild is ErrEnded) while its other
// shards still have orders to write. No order comes to a voucher past its
// retention, so the shards found drained are when dropped; should one not
// be, it stays, the voucher is not reported dropped, and a later call
// drops the rest (dropping a shard again only renews its tombstone). A
// dropped shard's transfers (xout, xin) go with it: nothing is sold past
// the retention.
func (c *Client) DropVoucher(ctx context.Context, voucherID int64) (bool, error) {
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return false, err
	}
	if len(l.shards) > 1 {
		for i, k := range l.shards {
			drained, err := c.drained(ctx, k.Orders)
			if err != nil {
				return false, redisErr("drop "+streamName(seckill.Shard{VoucherID: voucherID, Index: i}), err)
			}
			if !drained {
				return false, nil
			}
		}
	}
	dropped := true
	for i, k := range l.shards {
		op := "drop " + streamName(seckill.Shard{VoucherID: voucherID, Index: i})
		n, err := dropVoucherScript.runInt(ctx, c, op, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ, k.Cancelled, k.Returned},
			args{Group, ms(tombstoneFor)})
		if err != nil {
			return false, err
		}
		if n != 1 {
			dropped = false
			continue
		}
		if len(l.shards) > 1 {
			if err := c.rdb.Do(ctx, c.rdb.B().Unlink().Key(k.Xout, k.Xin).Build()).Error(); err != nil {
				return false, redisErr(op, err)
			}
		}
	}
	return dropped, nil
}

// drained reports whether an order stream is drained as drop_voucher.lua
// tells it: absent or empty, or delivered to its last entry with nothing
// pending.
func (c *Client) drained(ctx context.Context, stream string) (bool, error) {
	res := c.rdb.DoMulti(ctx,
		c.rdb.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build(),
		c.rdb.B().XinfoGroups().Key(stream).Build())
	last, err := res[0].AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, err
	}
	if len(last) == 0 {
		return true, nil
	}
	groups, err := res[1].ToArray()
	if err != nil {
		return false, err
	}
	g, err := workersGroup(groups)
	if err != nil || g == nil {
		return false, err
	}
	if pending, _ := field(g, "pending").AsInt64(); pending > 0 {
		return false, nil
	}
	delivered, err := field(g, "last-delivered-id").ToString()
	if err != nil {
		return false, err
	}
	return compareIDs(delivered, last[0].ID) >= 0, nil
}
