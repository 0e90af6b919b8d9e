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

// Admit runs the admission script for the buyer with orderID, appending the
// order to the voucher's stream. It returns nil when the buyer is admitted;
// else an error of kind ErrDuplicateOrder (with the buyer's existing order
// id), ErrSoldOut, ErrNotStarted, ErrEnded or ErrVoucherNotLoaded. A failure
// to hear from Redis is ErrUnavailable: the script may or may not have run.
func (c *Client) Admit(ctx context.Context, voucherID, userID, orderID int64) error {
	return c.admit(ctx, voucherID, userID, orderID, true)
}

// Reserve is Admit without the append to the stream: the queue mode keeps
// the order in memory instead.
func (c *Client) Reserve(ctx context.Context, voucherID, userID, orderID int64) error {
	return c.admit(ctx, voucherID, userID, orderID, false)
}

// Release gives back the stock and buyer slot that an admission of orderID
// took, if the slot still holds it, and reports whether it did.
func (c *Client) Release(ctx context.Context, voucherID, userID, orderID int64) (bool, error) {
	k := c.keys.voucher(voucherID)
	n, err := c.scripts.get("release").Exec(ctx, c.rdb, []string{k.Stock, k.Buyers},
		[]string{strconv.FormatInt(userID, 10), strconv.FormatInt(orderID, 10)}).AsInt64()
	if err != nil {
		return false, redisErr(fmt.Sprintf("release order %d", orderID), err)
	}
	return n == 1, nil
}

// admit runs admit.lua. This is the one place where the script's return
// values become domain errors.
func (c *Client) admit(ctx context.Context, voucherID, userID, orderID int64, stream bool) error {
	k := c.keys.voucher(voucherID)
	appendFlag := "0"
	if stream {
		appendFlag = "1"
	}
	res, err := c.scripts.get("admit").Exec(ctx, c.rdb,
		[]string{k.Stock, k.Window, k.Buyers, k.Orders},
		[]string{strconv.FormatInt(userID, 10), strconv.FormatInt(orderID, 10), strconv.FormatInt(voucherID, 10), appendFlag},
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

// Buyers returns every buyer of the voucher and their order, unless there
// are more than limit: then nil.
func (c *Client) Buyers(ctx context.Context, voucherID, limit int64) (map[int64]int64, error) {
	k := c.keys.voucher(voucherID)
	n, err := c.rdb.Do(ctx, c.rdb.B().Hlen().Key(k.Buyers).Build()).AsInt64()
	if err != nil {
		return nil, redisErr("count buyers", err)
	}
	if n > limit {
		return nil, nil
	}
	all, err := c.rdb.Do(ctx, c.rdb.B().Hgetall().Key(k.Buyers).Build()).AsStrMap()
	if err != nil {
		return nil, redisErr("read buyers", err)
	}
	buyers := make(map[int64]int64, len(all))
	for u, o := range all {
		user, err1 := strconv.ParseInt(u, 10, 64)
		order, err2 := strconv.ParseInt(o, 10, 64)
		if err1 == nil && err2 == nil {
			buyers[user] = order
		}
	}
	return buyers, nil
}
