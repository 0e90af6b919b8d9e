package redis

import (
	"context"
	"fmt"
)

// DropVoucher deletes every key of the voucher once its order stream is
// drained (scripts/drop_voucher.lua), and reports whether it did. For a
// voucher whose sale ended longer ago than the retention: Redis runs with
// noeviction, and ended vouchers would fill it.
func (c *Client) DropVoucher(ctx context.Context, voucherID int64) (bool, error) {
	k := c.keys.voucher(voucherID)
	n, err := c.scripts.get("drop_voucher").Exec(ctx, c.rdb, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ}, []string{Group}).AsInt64()
	if err != nil {
		return false, redisErr(fmt.Sprintf("drop voucher %d", voucherID), err)
	}
	return n == 1, nil
}
