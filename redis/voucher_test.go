package redis

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

func TestLoadVoucher(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		begin := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		v := &seckill.Voucher{ID: 7, Stock: 100, BeginTime: begin, EndTime: begin.Add(time.Hour)}

		loaded, err := c.LoadVoucher(ctx, v)
		if err != nil || !loaded {
			t.Fatalf("first LoadVoucher = %v, %v; want true, nil", loaded, err)
		}
		// Admissions take from the stock; loading again must not restore it.
		k := c.keys.voucher(7)
		if err := c.rdb.Do(ctx, c.rdb.B().Decrby().Key(k.Stock).Decrement(30).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		later := *v
		later.EndTime = begin.Add(2 * time.Hour)
		loaded, err = c.LoadVoucher(ctx, &later)
		if err != nil || loaded {
			t.Fatalf("second LoadVoucher = %v, %v; want false, nil", loaded, err)
		}
		got, err := c.Remaining(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{7: 70}, got); diff != "" {
			t.Errorf("Remaining after a second load (-want +got):\n%s", diff)
		}
		window, err := c.rdb.Do(ctx, c.rdb.B().Hgetall().Key(k.Window).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"begin": "1893553445000", "end": "1893560645000"}
		if diff := cmp.Diff(want, window); diff != "" {
			t.Errorf("window (-want +got):\n%s", diff)
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
