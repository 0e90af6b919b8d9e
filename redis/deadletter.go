package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

var _ seckill.DeadLetterCache = (*Client)(nil)

// deadLetterPage is how many dead letters one XRANGE reads: a voucher
// whose sale went badly may have many, and one reply should stay small.
const deadLetterPage = 1000

// DeadLetters reads the dead-letter streams of the vouchers, as
// scripts/dead_letter.lua writes them, each voucher's oldest first.
func (c *Client) DeadLetters(ctx context.Context, voucherIDs ...int64) ([]seckill.DeadLetterRecord, error) {
	return c.deadLetters(ctx, voucherIDs, deadLetterPage)
}

func (c *Client) deadLetters(ctx context.Context, voucherIDs []int64, page int64) ([]seckill.DeadLetterRecord, error) {
	var out []seckill.DeadLetterRecord
	for _, v := range voucherIDs {
		key := c.keys.voucher(v).DLQ
		start := "-"
		for {
			es, err := c.rdb.Do(ctx, c.rdb.B().Xrange().Key(key).Start(start).End("+").Count(page).Build()).AsXRange()
			if err != nil && !rueidis.IsRedisNil(err) {
				return nil, redisErr(fmt.Sprintf("read dead letters of voucher %d", v), err)
			}
			for _, e := range es {
				out = append(out, parseDeadLetter(v, e))
			}
			if int64(len(es)) < page {
				break
			}
			if start, err = nextID(es[len(es)-1].ID); err != nil {
				return nil, fmt.Errorf("redis: read dead letters of voucher %d: %w", v, err)
			}
		}
	}
	return out, nil
}

// parseDeadLetter reads a dead-letter entry. It is read leniently: a dead
// letter is often there because its message was malformed, and an operator
// must still see it (and discard it) whatever it holds.
func parseDeadLetter(voucherID int64, e rueidis.XRangeEntry) seckill.DeadLetterRecord {
	num := func(name string) int64 {
		n, err := strconv.ParseInt(e.FieldValues[name], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	r := seckill.DeadLetterRecord{
		EntryID:       e.ID,
		VoucherID:     voucherID,
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

// RemoveDeadLetters deletes entries of the voucher's dead-letter stream
// (XDEL) and returns how many it held.
func (c *Client) RemoveDeadLetters(ctx context.Context, voucherID int64, entryIDs ...string) (int64, error) {
	if len(entryIDs) == 0 {
		return 0, nil
	}
	k := c.keys.voucher(voucherID)
	n, err := c.rdb.Do(ctx, c.rdb.B().Xdel().Key(k.DLQ).Id(entryIDs...).Build()).AsInt64()
	if err != nil {
		return 0, redisErr(fmt.Sprintf("remove dead letters of voucher %d", voucherID), err)
	}
	return n, nil
}
