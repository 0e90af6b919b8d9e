package redis

import (
	"context"
	"fmt"

	"github.com/seckill/seckill"
)

var _ seckill.UnitReturner = (*Client)(nil)

// ReturnUnit gives the unit of the buyer's cancelled order orderID back to
// v's stock on the buyer's home shard (return_unit.lua), if the buyer's
// slot still holds that order, and reports whether it did. The slot is
// freed, and the order kept as the buyer's cancelled one unless
// v.RebuyAfterCancel: admission then answers the buyer with it, as a
// duplicate. With v.RebuyAfterCancel the order id is recorded as returned
// instead (whether or not the slot held it), which admission ignores and
// a rebuild and CountPersisted heed: the order never holds a unit again.
// A second call, or one racing it, finds the slot freed: a unit goes back
// once per order id, however many callers try.
//
// False also when the voucher is not in Redis in v's generation, or was
// rebuilt since the cancellation without the order: the rebuild counted
// the database's stock, which took the unit back with the cancellation.
// While a rebuild is under way the unit goes to its count, not the stock.
func (c *Client) ReturnUnit(ctx context.Context, v *seckill.Voucher, userID, orderID int64) (bool, error) {
	shards := c.Learn(v).shards
	k := shards[seckill.HomeShard(userID, len(shards))]
	n, err := returnUnitScript.runInt(ctx, c, fmt.Sprintf("return the unit of order %d", orderID),
		[]string{k.Stock, k.Buyers, k.Cancelled, k.Meta, k.Changes, k.Returned},
		returnUnitArgs{UserID: userID, OrderID: orderID, Rebuy: v.RebuyAfterCancel, Generation: v.Generation})
	return n == 1, err
}
