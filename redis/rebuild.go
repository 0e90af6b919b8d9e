package redis

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// StageBuyers records a page of the voucher's buyers while it is being
// rebuilt. It reports false once the voucher has a stock again: someone
// else finished the rebuild, and staging can stop.
func (c *Client) StageBuyers(ctx context.Context, voucherID int64, orders []*seckill.Order) (bool, error) {
	k := c.keys.voucher(voucherID)
	args := make([]string, 0, 2*len(orders))
	for _, o := range orders {
		args = append(args, strconv.FormatInt(o.UserID, 10), strconv.FormatInt(o.ID, 10))
	}
	n, err := c.scripts.get("stage_buyers").Exec(ctx, c.rdb, []string{k.Stock, k.Buyers}, args).AsInt64()
	if err != nil {
		return false, redisErr(fmt.Sprintf("stage buyers of voucher %d", voucherID), err)
	}
	return n == 1, nil
}

// FinishRebuild adds the buyers of the orders still in the voucher's stream,
// sets its window and its stock (its initial stock less its buyers), and
// makes its group, unless it has a stock already. It reports whether it set
// the stock, and the stock it set.
func (c *Client) FinishRebuild(ctx context.Context, v *seckill.Voucher) (bool, int64, error) {
	k := c.keys.voucher(v.ID)
	res, err := c.scripts.get("finish_rebuild").Exec(ctx, c.rdb,
		[]string{k.Stock, k.Window, k.Buyers, k.Orders},
		[]string{
			strconv.FormatInt(v.InitialStock, 10),
			strconv.FormatInt(v.BeginTime.UnixMilli(), 10),
			strconv.FormatInt(v.EndTime.UnixMilli(), 10),
			Group,
		}).ToArray()
	if err != nil {
		return false, 0, redisErr(fmt.Sprintf("rebuild voucher %d", v.ID), err)
	}
	if done, _ := res[0].AsInt64(); done != 1 {
		return false, 0, nil
	}
	s, _ := res[1].ToString()
	left, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("redis: rebuild voucher %d: stock %q: %w", v.ID, s, err)
	}
	return true, left, nil
}

// Unload deletes the voucher's stock and buyers, so that it is rebuilt from
// the database. Admission refuses it from that moment until the rebuild.
// The stock goes first, in the same transaction: admission never sees the
// buyers gone while the stock is there.
func (c *Client) Unload(ctx context.Context, voucherID int64) error {
	k := c.keys.voucher(voucherID)
	if err := c.rdb.Do(ctx, c.rdb.B().Del().Key(k.Stock, k.Buyers).Build()).Error(); err != nil {
		return redisErr(fmt.Sprintf("unload voucher %d", voucherID), err)
	}
	return nil
}

// State reads the voucher's state in Redis.
func (c *Client) State(ctx context.Context, voucherID int64) (*seckill.CacheState, error) {
	k := c.keys.voucher(voucherID)
	op := fmt.Sprintf("read state of voucher %d", voucherID)
	res := c.rdb.DoMulti(ctx,
		c.rdb.B().Get().Key(k.Stock).Build(),
		c.rdb.B().Hlen().Key(k.Buyers).Build(),
		c.rdb.B().Xrange().Key(k.Orders).Start("-").End("+").Build(),
		c.rdb.B().Xlen().Key(k.DLQ).Build(),
	)
	st := &seckill.CacheState{}
	stock, err := res[0].AsInt64()
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return nil, redisErr(op, err)
	default:
		st.Loaded, st.Remaining = true, stock
	}
	if st.Buyers, err = res[1].AsInt64(); err != nil {
		return nil, redisErr(op, err)
	}
	entries, err := res[2].AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, redisErr(op, err)
	}
	for _, e := range entries {
		st.Queued = append(st.Queued, parseMessage(voucherID, e))
	}
	if st.DeadLetters, err = res[3].AsInt64(); err != nil {
		return nil, redisErr(op, err)
	}
	summary, err := c.rdb.Do(ctx, c.rdb.B().Xpending().Key(k.Orders).Group(Group).Build()).ToArray()
	switch {
	case err != nil && isNoGroup(err):
	case err != nil:
		return nil, redisErr(op, err)
	default:
		st.Pending, _ = summary[0].AsInt64()
		last, err := c.lastDelivered(ctx, k.Orders)
		if err != nil {
			return nil, redisErr(op, err)
		}
		for _, m := range st.Queued {
			if compareIDs(m.EntryID, last) > 0 {
				st.Undelivered++
			}
		}
	}
	return st, nil
}

// compareIDs orders two stream ids "ms-seq".
func compareIDs(a, b string) int {
	parse := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		s, _ := strconv.ParseUint(seq, 10, 64)
		return m, s
	}
	am, as := parse(a)
	bm, bs := parse(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}
