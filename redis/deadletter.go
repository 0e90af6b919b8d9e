package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// deadLetterPage is how many dead letters one XRANGE reads: a voucher
// whose sale went badly may have many, and one reply should stay small.
const deadLetterPage = 1000

// DeadLetters reads the dead-letter streams of the vouchers, every shard's,
// as scripts/dead_letter.lua writes them, each voucher's oldest first.
func (c *Client) DeadLetters(ctx context.Context, voucherIDs ...int64) ([]seckill.DeadLetterRecord, error) {
	return c.deadLetters(ctx, voucherIDs, deadLetterPage)
}

func (c *Client) deadLetters(ctx context.Context, voucherIDs []int64, page int64) ([]seckill.DeadLetterRecord, error) {
	var out []seckill.DeadLetterRecord
	for _, v := range voucherIDs {
		l, err := c.layoutOf(ctx, v)
		if err != nil {
			return nil, err
		}
		first := len(out)
		for i, k := range l.shards {
			s := seckill.Shard{VoucherID: v, Index: i}
			if out, err = c.shardDeadLetters(ctx, s, k.DLQ, page, out); err != nil {
				return nil, err
			}
		}
		if len(l.shards) > 1 {
			// Each shard's are in their stream's order; the voucher's, by
			// time (the shards' clocks are their masters').
			slices.SortStableFunc(out[first:], func(a, b seckill.DeadLetterRecord) int {
				return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Shard, b.Shard))
			})
		}
	}
	return out, nil
}

// shardDeadLetters appends to out the dead letters of shard s, held in key,
// page by page.
func (c *Client) shardDeadLetters(ctx context.Context, s seckill.Shard, key string, page int64, out []seckill.DeadLetterRecord) ([]seckill.DeadLetterRecord, error) {
	start := "-"
	for {
		es, err := c.rdb.Do(ctx, c.rdb.B().Xrange().Key(key).Start(start).End("+").Count(page).Build()).AsXRange()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, redisErr("read dead letters of "+streamName(s), err)
		}
		for _, e := range es {
			out = append(out, parseDeadLetter(s, e))
		}
		if int64(len(es)) < page {
			return out, nil
		}
		if start, err = nextID(es[len(es)-1].ID); err != nil {
			return nil, fmt.Errorf("redis: read dead letters of %s: %w", streamName(s), err)
		}
	}
}

// parseDeadLetter reads a dead-letter entry of shard s. It is read
// leniently: a dead letter is often there because its message was
// malformed, and an operator must still see it (and discard it) whatever
// it holds.
func parseDeadLetter(s seckill.Shard, e rueidis.XRangeEntry) seckill.DeadLetterRecord {
	num := func(name string) int64 {
		n, err := strconv.ParseInt(e.FieldValues[name], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	r := seckill.DeadLetterRecord{
		EntryID:       e.ID,
		VoucherID:     s.VoucherID,
		Shard:         s.Index,
		OrderID:       num("id"),
		UserID:        num("user"),
		Reason:        e.FieldValues["reason"],
		StockReturned: e.FieldValues["stock_returned"] == "1",
	}
	ms, _, _ := strings.Cut(e.ID, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		r.At = time.UnixMilli(n).UTC()
	}
	return r
}

// RemoveDeadLetters deletes entries of the shard's dead-letter stream
// (XDEL) and returns how many it held.
func (c *Client) RemoveDeadLetters(ctx context.Context, s seckill.Shard, entryIDs ...string) (int64, error) {
	if len(entryIDs) == 0 {
		return 0, nil
	}
	k, err := c.shardKeys(ctx, s)
	if err != nil {
		return 0, err
	}
	n, err := c.rdb.Do(ctx, c.rdb.B().Xdel().Key(k.DLQ).Id(entryIDs...).Build()).AsInt64()
	if err != nil {
		return 0, redisErr("remove dead letters of "+streamName(s), err)
	}
	return n, nil
}
