package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// TestLoadVoucher: a new voucher gets its stock, window, generation and
// group; state Redis held under its id for another generation (from a
// database since reset) is replaced; state of its own generation (rebuilt by
// a buyer who came first) is kept, with what was admitted to it.
func TestLoadVoucher(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		begin := time.Now().Truncate(time.Millisecond).Add(-time.Minute)
		v := &seckill.Voucher{ID: 7, Stock: 100, BeginTime: begin, EndTime: begin.Add(time.Hour), Generation: 71}

		replaced, err := c.LoadVoucher(ctx, v)
		if err != nil || replaced {
			t.Fatalf("first LoadVoucher = %v, %v; want false (nothing stale), nil", replaced, err)
		}
		k := c.keys.voucher(7)
		meta := hash(t, c, k.Meta)
		// An epoch is Redis's clock in microseconds, or more: one that
		// never repeats, also after Redis comes back with older data.
		if e, err := strconv.ParseInt(meta["epoch"], 10, 64); err != nil || e < time.Now().Add(-time.Hour).UnixMicro() {
			t.Errorf("epoch %q, want Redis's clock in microseconds", meta["epoch"])
		}
		delete(meta, "epoch")
		want := map[string]string{"begin": fmt.Sprint(begin.UnixMilli()), "end": fmt.Sprint(begin.Add(time.Hour).UnixMilli()), "gen": "71"}
		if diff := cmp.Diff(want, meta); diff != "" {
			t.Errorf("meta (-want +got):\n%s", diff)
		}
		if _, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 7}, "w", 10, 0); err != nil {
			t.Errorf("the group is not there: %v", err)
		}
		// Admission refuses another generation's state as not loaded.
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 7, Generation: 72, UserID: 1, OrderID: 701}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit for generation 72 into generation 71 = %v, want ErrVoucherNotLoaded", err)
		}

		// A sale of another database under the same id: sold, with buyers.
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 7, Generation: 71, UserID: 42, OrderID: 4242}); err != nil {
			t.Fatal(err)
		}
		next := &seckill.Voucher{ID: 7, Stock: 5, BeginTime: begin, EndTime: begin.Add(time.Hour), Generation: 72}
		replaced, err = c.LoadVoucher(ctx, next)
		if err != nil || !replaced {
			t.Fatalf("LoadVoucher over stale state = %v, %v; want true, nil", replaced, err)
		}
		got, err := c.Remaining(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{7: 5}, got); diff != "" {
			t.Errorf("Remaining after replacing stale state (-want +got):\n%s", diff)
		}
		if found, _ := c.BuyerOrders(ctx, 42, 7); len(found) != 0 {
			t.Errorf("the stale buyer is still there: %v", found)
		}
		if n := xlen(t, c, k.Orders); n != 0 {
			t.Errorf("stale stream has %d entries, want 0", n)
		}

		// The same generation again (a buyer rebuilt it before the load):
		// kept, with its buyer and order.
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 7, Generation: 72, UserID: 43, OrderID: 4343}); err != nil {
			t.Fatal(err)
		}
		replaced, err = c.LoadVoucher(ctx, next)
		if err != nil || replaced {
			t.Fatalf("LoadVoucher of the generation there = %v, %v; want false, nil", replaced, err)
		}
		if got, _ := c.Remaining(ctx, 7); got[7] != 4 {
			t.Errorf("Remaining after loading the generation there = %d, want 4 (its admission kept)", got[7])
		}
		if found, _ := c.BuyerOrders(ctx, 43, 7); found[7] != 4343 {
			t.Errorf("the buyer admitted before the load holds %v, want order 4343", found)
		}
		if n := xlen(t, c, k.Orders); n != 1 {
			t.Errorf("stream has %d entries after loading the generation there, want the 1 admitted", n)
		}
	})
}

func TestRemaining(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		now := time.Now()
		for id, stock := range map[int64]int64{1: 10, 2: 20, 3: 30} {
			if _, err := c.LoadVoucher(ctx, &seckill.Voucher{ID: id, Stock: stock, BeginTime: now, EndTime: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.Remaining(ctx, 3, 1, 99, 2)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{1: 10, 2: 20, 3: 30}, got); diff != "" {
			t.Errorf("Remaining (-want +got):\n%s", diff)
		}
		got, err = c.Remaining(ctx)
		if err != nil || len(got) != 0 {
			t.Errorf("Remaining() = %v, %v; want empty", got, err)
		}
	})
}
