package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// TestControlOutlivesRebuild: an operator's pause and end, written into
// what admission reads, hold across an unload and a rebuild that read the
// voucher's row before them (the row then says not paused, ends later);
// only a voucher Redis lost takes them from the row. A buyer who holds an
// order still gets it back (G5).
func TestControlOutlivesRebuild(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		row := onSale(1, 10) // as a rebuild read it, before the controls
		mustLoad(t, c, row)
		mustAdmit(t, c, 1, 100, 1000)
		admit := func(user int64) error {
			return c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: user, OrderID: 1000 + user})
		}
		paused := *row
		paused.Paused = true
		if err := c.Control(ctx, &paused, false); err != nil {
			t.Fatal(err)
		}
		if err := admit(101); !errors.Is(err, seckill.ErrPaused) {
			t.Fatalf("Admit while paused = %v, want ErrPaused", err)
		}
		if err := admit(100); !errors.Is(err, seckill.ErrDuplicateOrder) {
			t.Errorf("Admit of a buyer with an order while paused = %v, want ErrDuplicateOrder", err)
		}

		// Unloaded, and rebuilt from the row read before the pause: the
		// pause holds; so it does when the pause comes mid-rebuild.
		if err := c.UnloadStock(ctx, 1); err != nil {
			t.Fatal(err)
		}
		rebuild(t, c, row, &database{orders: []*seckill.Order{{ID: 1000, UserID: 100, VoucherID: 1}}})
		if err := admit(101); !errors.Is(err, seckill.ErrPaused) {
			t.Fatalf("Admit after a rebuild from an older row = %v, want ErrPaused", err)
		}
		if err := c.Control(ctx, row, false); err != nil { // resumed
			t.Fatal(err)
		}
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		db := &database{orders: []*seckill.Order{{ID: 1000, UserID: 100, VoucherID: 1}}}
		db.onPage = func(page int) {
			if page == 0 {
				if err := c.Control(ctx, &paused, false); err != nil {
					t.Error(err)
				}
			}
		}
		rebuild(t, c, row, db)
		if err := admit(101); !errors.Is(err, seckill.ErrPaused) {
			t.Fatalf("Admit after a pause during a rebuild = %v, want ErrPaused", err)
		}

		// Redis lost the voucher: the rebuild takes the pause from the row.
		k := c.keys.voucher(1)
		do(t, c, "DEL", k.Meta)
		do(t, c, "DEL", k.Stock)
		rebuild(t, c, &paused, db)
		if err := admit(101); !errors.Is(err, seckill.ErrPaused) {
			t.Fatalf("Admit after a rebuild of a lost voucher from a paused row = %v, want ErrPaused", err)
		}
		if err := c.Control(ctx, row, false); err != nil {
			t.Fatal(err)
		}
		if err := admit(101); err != nil {
			t.Fatalf("Admit once resumed = %v", err)
		}

		// Ended now, though the window says an hour more, and though a
		// rebuild reads the row from before.
		ended := *row
		ended.EndTime = time.Now().Add(time.Hour)
		if err := c.Control(ctx, &ended, true); err != nil {
			t.Fatal(err)
		}
		if err := admit(102); !errors.Is(err, seckill.ErrEnded) {
			t.Fatalf("Admit once ended = %v, want ErrEnded", err)
		}
		if err := c.UnloadStock(ctx, 1); err != nil {
			t.Fatal(err)
		}
		rebuild(t, c, row, &database{orders: []*seckill.Order{{ID: 1000, UserID: 100, VoucherID: 1}, {ID: 1101, UserID: 101, VoucherID: 1}}})
		if err := admit(102); !errors.Is(err, seckill.ErrEnded) {
			t.Fatalf("Admit once ended, after a rebuild from an older row = %v, want ErrEnded", err)
		}
		if err := admit(101); !errors.Is(err, seckill.ErrDuplicateOrder) {
			t.Errorf("Admit of a buyer with an order once ended = %v, want ErrDuplicateOrder", err)
		}
	})
}

// TestControlEveryShard: a pause reaches every shard of a sharded voucher,
// and so every buyer, whatever their home shard.
func TestControlEveryShard(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(2, 60)
		v.Shards = 4
		v.Generation = 5
		mustLoad(t, c, v)
		p := *v
		p.Paused = true
		if err := c.Control(ctx, &p, false); err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for user := int64(1); len(seen) < v.Shards && user < 1000; user++ {
			home := seckill.HomeShard(user, v.Shards)
			if seen[home] {
				continue
			}
			seen[home] = true
			err := c.Admit(ctx, seckill.Admission{VoucherID: 2, Generation: 5, UserID: user, OrderID: 5000 + user, Shard: home})
			if !errors.Is(err, seckill.ErrPaused) {
				t.Errorf("Admit on shard %d while paused = %v, want ErrPaused", home, err)
			}
		}
	})
}
