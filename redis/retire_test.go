package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/seckill/seckill"
)

// TestDropVoucher: a voucher's keys go only once its stream is drained:
// nothing undelivered, nothing pending with a consumer. Its meta stays as a
// tombstone, for a while (TestDroppedVoucherStaysDropped).
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
		for _, key := range []string{k.Stock, k.Buyers, k.Orders, k.DLQ} {
			if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
				t.Errorf("key %s is still there after DropVoucher", key)
			}
		}
		// The meta is a tombstone, for a while.
		if m := hash(t, c, k.Meta); m["dropped"] != "1" || m["begin"] != "" {
			t.Errorf("meta after DropVoucher = %v, want a tombstone", m)
		}
		if ttl, _ := do(t, c, "PTTL", k.Meta).AsInt64(); ttl <= 0 || ttl > tombstoneFor.Milliseconds() {
			t.Errorf("the tombstone expires in %d ms, want within %v", ttl, tombstoneFor)
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

// TestDroppedVoucherStaysDropped: once a voucher past its retention is
// dropped, nothing makes its keys again: not a rebuild that began before
// the drop and started over (the recovery after a failover rebuilds every
// voucher within the retention, one by one), not a rebuild or an unload
// after it, not a worker's late count of persisted orders. Keys made again
// would stay for good: the pool retires a voucher once.
func TestDroppedVoucherStaysDropped(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(1, 10)
		v.Generation = 7
		mustLoad(t, c, v)
		k := c.keys.voucher(1)
		gone := func(when string) {
			t.Helper()
			for _, key := range []string{k.Stock, k.Buyers, k.Orders, k.DLQ} {
				if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
					t.Errorf("%s: key %s is there again", when, key)
				}
			}
			if m := hash(t, c, k.Meta); m["begin"] != "" || m["end"] != "" {
				t.Errorf("%s: the voucher's window is there again: %v", when, m)
			}
		}

		// A rebuild in flight (the voucher unloaded, as the recovery does)
		// when the voucher is dropped.
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		db := &database{}
		for i := range int64(rebuildPage + 10) {
			db.orders = append(db.orders, &seckill.Order{ID: 100 + i, UserID: 1 + i})
		}
		db.onPage = func(page int) {
			if page != 1 {
				return
			}
			if dropped, err := c.DropVoucher(ctx, 1); err != nil || !dropped {
				t.Errorf("DropVoucher during the rebuild = %v, %v; want true", dropped, err)
			}
		}
		_, err := c.Rebuild(ctx, v, db.read)
		if !errors.Is(err, seckill.ErrEnded) {
			t.Errorf("a rebuild across the drop = %v, want ErrEnded", err)
		}
		gone("after a rebuild across the drop")

		// After it.
		db.onPage = nil
		if _, err := c.Rebuild(ctx, v, db.read); !errors.Is(err, seckill.ErrEnded) {
			t.Errorf("a rebuild after the drop = %v, want ErrEnded", err)
		}
		gone("after a rebuild")
		if err := c.Unload(ctx, 1); err != nil {
			t.Errorf("Unload after the drop: %v", err)
		}
		if err := c.UnloadStock(ctx, 1); err != nil {
			t.Errorf("UnloadStock after the drop: %v", err)
		}
		gone("after an unload")
		if err := c.CountPersisted(ctx, 1, []*seckill.Order{{ID: 100, UserID: 1, VoucherID: 1}}); err != nil {
			t.Errorf("CountPersisted after the drop: %v", err)
		}
		gone("after counting persisted orders")
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, Generation: 7, UserID: 99, OrderID: 999}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit after the drop = %v, want ErrVoucherNotLoaded", err)
		}
		gone("after an admission")

		// Another voucher that has the id (a database reset) is loaded
		// and rebuilt as any.
		w := onSale(1, 10)
		w.Generation = 8
		mustLoad(t, c, w)
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, Generation: 8, UserID: 1, OrderID: 1}); err != nil {
			t.Fatalf("Admit to another voucher of the id: %v", err)
		}
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if res := rebuild(t, c, w, &database{orders: []*seckill.Order{{ID: 1, UserID: 1}}}); !res.Done || res.Remaining != 9 {
			t.Errorf("rebuild of another generation after the drop = %+v, want done with 9 left", res)
		}
	})
}
