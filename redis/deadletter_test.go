package redis

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seckill/seckill"
)

// deadLetterN dead-letters, as the workers do, the first n orders admitted
// by admitN to voucher v (users 1..n, orders v*1000+user), the second with
// its stock kept; then it adds a malformed message and dead-letters it too.
// It returns the records DeadLetters should return, without At.
func deadLetterN(t *testing.T, c *Client, v, n int64) []seckill.DeadLetterRecord {
	t.Helper()
	ctx := context.Background()
	admitN(t, c, v, 10, n)
	k := c.keys.voucher(v)
	do(t, c, "XADD", k.Orders, "*", "junk", "1")
	read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: v}, "a", int(n)+1, 10*time.Millisecond)
	if err != nil || int64(len(read)) != n+1 {
		t.Fatalf("ReadOrders = %d messages, %v; want %d", len(read), err, n+1)
	}
	var want []seckill.DeadLetterRecord
	for i, m := range read {
		dl := seckill.DeadLetter{Reason: "reason " + m.EntryID, KeepStock: i == 1}
		if moved, err := c.DeadLetter(ctx, m, dl); err != nil || !moved {
			t.Fatalf("DeadLetter(%s) = %v, %v", m.EntryID, moved, err)
		}
		want = append(want, seckill.DeadLetterRecord{VoucherID: v, OrderID: m.Order.ID, UserID: m.Order.UserID,
			Reason: dl.Reason, StockReturned: m.Err == nil && !dl.KeepStock})
	}
	es := entries(t, c, k.DLQ)
	if len(es) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(es), len(want))
	}
	for i, e := range es {
		want[i].EntryID = e.ID
	}
	return want
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		want := append(deadLetterN(t, c, 1, 3), deadLetterN(t, c, 2, 1)...)
		after := time.Now().Add(time.Second)
		if len(want) != 6 || want[3].OrderID != 0 || want[1].StockReturned || !want[0].StockReturned {
			t.Fatalf("the scenario is not as meant: %+v", want)
		}

		// Voucher 3 has no dead-letter stream at all.
		got, err := c.DeadLetters(ctx, 1, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.At.Before(before) || r.At.After(after) {
				t.Errorf("dead letter %s at %v, want between %v and %v", r.EntryID, r.At, before, after)
			}
		}
		noAt := cmpopts.IgnoreFields(seckill.DeadLetterRecord{}, "At")
		if diff := cmp.Diff(want, got, noAt); diff != "" {
			t.Errorf("DeadLetters (-want +got):\n%s", diff)
		}
		// Read a page at a time, the same.
		for _, page := range []int64{1, 2, 3, 4, 5} {
			got, err := c.deadLetters(ctx, []int64{1, 2, 3}, page)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, noAt); diff != "" {
				t.Errorf("DeadLetters by pages of %d (-want +got):\n%s", page, diff)
			}
		}
		if got, err := c.DeadLetters(ctx); err != nil || len(got) != 0 {
			t.Errorf("DeadLetters() = %v, %v; want none", got, err)
		}

		// Removal: each entry once, of its own voucher only.
		// Entry ids are per stream: one of voucher 1's made in the same
		// millisecond as one of voucher 2's has the same id. Take one
		// voucher 2 has not.
		foreign := ""
		for _, w := range want[:4] {
			if w.EntryID != want[4].EntryID && w.EntryID != want[5].EntryID {
				foreign = w.EntryID
			}
		}
		if n, err := c.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: 2}, foreign); err != nil || n != 0 {
			t.Errorf("RemoveDeadLetters(another voucher's entry %s) = %d, %v; want 0", foreign, n, err)
		}
		if n, err := c.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: 1}, want[0].EntryID, want[2].EntryID); err != nil || n != 2 {
			t.Errorf("RemoveDeadLetters(two) = %d, %v; want 2", n, err)
		}
		if n, err := c.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: 1}, want[0].EntryID); err != nil || n != 0 {
			t.Errorf("RemoveDeadLetters(removed) = %d, %v; want 0", n, err)
		}
		if n, err := c.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: 1}); err != nil || n != 0 {
			t.Errorf("RemoveDeadLetters() = %d, %v; want 0", n, err)
		}
		got, err = c.DeadLetters(ctx, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]seckill.DeadLetterRecord{want[1], want[3], want[4], want[5]}, got, noAt); diff != "" {
			t.Errorf("DeadLetters after removals (-want +got):\n%s", diff)
		}
	})
}

// TestDeadLettersLenient: an entry written by hand or by an older version
// is listed with what can be read from it, never refused.
func TestDeadLettersLenient(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		k := c.keys.voucher(7)
		id, err := do(t, c, "XADD", k.DLQ, "1700000000123-4", "id", "x", "user", "-5", "stock_returned", "yes").ToString()
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.DeadLetters(context.Background(), 7)
		if err != nil {
			t.Fatal(err)
		}
		want := []seckill.DeadLetterRecord{{EntryID: id, VoucherID: 7, At: time.UnixMilli(1700000000123).UTC()}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DeadLetters (-want +got):\n%s", diff)
		}
	})
}
