package redis

import (
	"context"
	"time"

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
// A voucher with shards is dropped shard by shard, each as above, and
// reported dropped only once every shard is: a shard whose stream is not
// drained stays, and a later call drops it (dropping a shard again only
// renews its tombstone). A dropped shard's transfers (xout, xin) go with
// it: nothing is sold past the retention.
func (c *Client) DropVoucher(ctx context.Context, voucherID int64) (bool, error) {
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return false, err
	}
	dropped := true
	for i, k := range l.shards {
		op := "drop " + streamName(seckill.Shard{VoucherID: voucherID, Index: i})
		n, err := dropVoucherScript.runInt(ctx, c, op, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ},
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
