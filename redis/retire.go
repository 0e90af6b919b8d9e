package redis

import (
	"context"
	"fmt"
	"time"
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
func (c *Client) DropVoucher(ctx context.Context, voucherID int64) (bool, error) {
	k := c.keys.voucher(voucherID)
	n, err := dropVoucherScript.runInt(ctx, c, fmt.Sprintf("drop voucher %d", voucherID), []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ},
		args{Group, ms(tombstoneFor)})
	return n == 1, err
}
