package redis

import (
	"context"
	"testing"

	"github.com/seckill/seckill"
)

// TestDropVoucher: a voucher's keys go only once its stream is drained:
// nothing undelivered, nothing pending with a consumer.
func TestDropVoucher(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		k := c.keys.voucher(1)
		admitN(t, c, 1, 5, 3)
		drop := func(want bool, when string) {
			t.Helper()
			got, err := c.DropVoucher(ctx, 1)
			if err != nil || got != want {
				t.Fatalf("DropVoucher %s = %v, %v; want %v", when, got, err, want)
			}
		}
		drop(false, "with orders not delivered")
		read := readOrders(t, c, 1, "a", 2)
		drop(false, "with an order not delivered and two pending")
		if _, err := c.DeadLetter(ctx, seckill.OrderMessage{EntryID: read[0].EntryID, VoucherID: 1, Order: read[0].Order}, seckill.DeadLetter{Reason: "r"}); err != nil {
			t.Fatal(err)
		}
		ack(t, c, 1, read[1].EntryID)
		drop(false, "with an order not delivered")
		last := readOrders(t, c, 1, "b", 10)
		drop(false, "with an order pending")
		ack(t, c, 1, last[0].EntryID)
		drop(true, "once drained")
		for _, key := range []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ} {
			if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
				t.Errorf("key %s is still there after DropVoucher", key)
			}
		}
		drop(true, "of a voucher with no keys")

		// A stream whose group was lost still holds orders to deliver.
		admitN(t, c, 2, 5, 1)
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(2).Orders, Group)
		if got, err := c.DropVoucher(ctx, 2); err != nil || got {
			t.Errorf("DropVoucher of a stream without its group = %v, %v; want false", got, err)
		}
	})
}
