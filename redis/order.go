package redis

import (
	"context"
	"fmt"
	"strconv"

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
)

// Admit runs the admission script for the buyer with orderID. It returns
// nil when the buyer is admitted; else an error of kind ErrDuplicateOrder
// (with the buyer's existing order id), ErrSoldOut, ErrNotStarted,
// ErrEnded or ErrVoucherNotLoaded. A failure to hear from Redis is
// ErrUnavailable: the script may or may not have run.
//
// This is the one place where the script's return values become domain
// errors.
func (c *Client) Admit(ctx context.Context, voucherID, userID, orderID int64) error {
	k := c.keys.voucher(voucherID)
	res, err := c.scripts.admit.Exec(ctx, c.rdb,
		[]string{k.Stock, k.Window, k.Buyers, k.Orders},
		[]string{strconv.FormatInt(userID, 10), strconv.FormatInt(orderID, 10), strconv.FormatInt(voucherID, 10)},
	).ToArray()
	if err != nil {
		return redisErr("admit", err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redis: admit: %d values returned, want 2", len(res))
	}
	code, err := res[0].AsInt64()
	if err != nil {
		return fmt.Errorf("redis: admit: code: %w", err)
	}
	switch code {
	case admitted:
		return nil
	case admitDuplicate:
		s, err := res[1].ToString()
		if err != nil {
			return fmt.Errorf("redis: admit: existing order: %w", err)
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("redis: admit: existing order %q: %w", s, err)
		}
		return &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: id}
	case admitSoldOut:
		return seckill.Errorf(seckill.ErrSoldOut, "voucher %d is sold out", voucherID)
	case admitNotStarted:
		return seckill.Errorf(seckill.ErrNotStarted, "the sale of voucher %d has not started", voucherID)
	case admitEnded:
		return seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", voucherID)
	case admitNotLoaded:
		return fmt.Errorf("redis: voucher %d: %w", voucherID, seckill.ErrVoucherNotLoaded)
	}
	return fmt.Errorf("redis: admit: unknown code %d", code)
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
		cmds[i] = c.rdb.B().Hget().Key(c.keys.voucher(v).Buyers).Field(user).Build()
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
