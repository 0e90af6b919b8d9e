package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// TestLoadVoucher: a new voucher gets its stock, window and group; state
// Redis held under its id (from a database since reset) is replaced.
func TestLoadVoucher(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		begin := time.Now().Truncate(time.Millisecond).Add(-time.Minute)
		v := &seckill.Voucher{ID: 7, Stock: 100, BeginTime: begin, EndTime: begin.Add(time.Hour)}

		replaced, err := c.LoadVoucher(ctx, v)
		if err != nil || replaced {
			t.Fatalf("first LoadVoucher = %v, %v; want false (nothing stale), nil", replaced, err)
		}
		k := c.keys.voucher(7)
		window, err := c.rdb.Do(ctx, c.rdb.B().Hgetall().Key(k.Window).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"begin": fmt.Sprint(begin.UnixMilli()), "end": fmt.Sprint(begin.Add(time.Hour).UnixMilli())}
		if diff := cmp.Diff(want, window); diff != "" {
			t.Errorf("window (-want +got):\n%s", diff)
		}
		if _, err := c.ReadOrders(ctx, 7, "w", 10, 0); err != nil {
			t.Errorf("the group is not there: %v", err)
		}

		// A sale of another database under the same id: sold, with buyers.
		if err := c.Admit(ctx, 7, 42, 4242); err != nil {
			t.Fatal(err)
		}
		replaced, err = c.LoadVoucher(ctx, &seckill.Voucher{ID: 7, Stock: 5, BeginTime: begin, EndTime: begin.Add(time.Hour)})
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
		if n, err := c.rdb.Do(ctx, c.rdb.B().Xlen().Key(k.Orders).Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("stale stream has %d entries (%v), want 0", n, err)
		}
	})
}

func TestRemaining(t *testing.T) {
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
