package redis

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seckill/seckill"
)

func stage(t *testing.T, c *Client, voucherID int64, orders ...*seckill.Order) bool {
	t.Helper()
	ok, err := c.StageBuyers(context.Background(), voucherID, orders)
	if err != nil {
		t.Fatalf("StageBuyers: %v", err)
	}
	return ok
}

func finish(t *testing.T, c *Client, v *seckill.Voucher) (bool, int64) {
	t.Helper()
	set, left, err := c.FinishRebuild(context.Background(), v)
	if err != nil {
		t.Fatalf("FinishRebuild: %v", err)
	}
	return set, left
}

// queue appends an order message to the voucher's stream as admit.lua does.
func queue(t *testing.T, c *Client, voucherID, userID, orderID int64) {
	t.Helper()
	do(t, c, "XADD", c.keys.voucher(voucherID).Orders, "*", "id", strconv.FormatInt(orderID, 10),
		"user", strconv.FormatInt(userID, 10), "voucher", strconv.FormatInt(voucherID, 10),
		"at", strconv.FormatInt(time.Now().UnixMilli(), 10))
}

// groups returns the stream's groups' names and last delivered ids.
func groups(t *testing.T, c *Client, stream string) map[string]string {
	t.Helper()
	rows, err := do(t, c, "XINFO", "GROUPS", stream).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		m, err := r.AsMap()
		if err != nil {
			t.Fatal(err)
		}
		name, last := m["name"], m["last-delivered-id"]
		n, _ := name.ToString()
		l, _ := last.ToString()
		got[n] = l
	}
	return got
}

func TestRebuild(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(9, 10)
		k := c.keys.voucher(9)

		// Two pages of buyers from the database, then the stream's.
		if !stage(t, c, 9, &seckill.Order{ID: 11, UserID: 1}, &seckill.Order{ID: 12, UserID: 2}) {
			t.Fatal("StageBuyers(page 1) = false, want true")
		}
		if !stage(t, c, 9, &seckill.Order{ID: 13, UserID: 3}, &seckill.Order{ID: 14, UserID: 4}) {
			t.Fatal("StageBuyers(page 2) = false, want true")
		}
		if !stage(t, c, 9) {
			t.Fatal("StageBuyers(no orders) = false, want true")
		}
		if err := c.Admit(ctx, 9, 5, 99); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Fatalf("Admit while staging: got %v, want ErrVoucherNotLoaded", err)
		}
		queue(t, c, 9, 5, 15) // admitted, not in the database yet
		queue(t, c, 9, 2, 12) // admitted and in the database already

		set, left := finish(t, c, v)
		if !set || left != 5 {
			t.Errorf("FinishRebuild = %v, %d; want true, 5 (10 less 5 buyers)", set, left)
		}
		if got := stock(t, c, 9); got != 5 {
			t.Errorf("stock %d, want 5", got)
		}
		wantWindow := map[string]string{
			"begin": strconv.FormatInt(v.BeginTime.UnixMilli(), 10),
			"end":   strconv.FormatInt(v.EndTime.UnixMilli(), 10),
		}
		if diff := cmp.Diff(wantWindow, hash(t, c, k.Window)); diff != "" {
			t.Errorf("window (-want +got):\n%s", diff)
		}
		wantBuyers := map[string]string{"1": "11", "2": "12", "3": "13", "4": "14", "5": "15"}
		if diff := cmp.Diff(wantBuyers, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		g := groups(t, c, k.Orders)
		if last, ok := g[Group]; !ok || len(g) != 1 || (last != "0-0" && last != "0") {
			t.Errorf("groups %v, want only %s at 0", g, Group)
		}
		// Made at 0, the group delivers what the stream holds.
		if got := readOrders(t, c, 9, "a", 10); len(got) != 2 {
			t.Errorf("ReadOrders after the rebuild: %d messages, want the 2 queued", len(got))
		}

		// Rebuilt: admission works, a buyer of the database is known.
		mustAdmit(t, c, 9, 6, 16)
		if e := errKind(t, c.Admit(ctx, 9, 3, 17), seckill.ErrDuplicateOrder); e.OrderID != 13 {
			t.Errorf("Admit of a buyer from the database: duplicate of %d, want 13", e.OrderID)
		}
		wantBuyers["6"] = "16"

		// A second rebuild and late staging change nothing.
		if set, left := finish(t, c, v); set || left != 0 {
			t.Errorf("second FinishRebuild = %v, %d; want false, 0", set, left)
		}
		if stage(t, c, 9, &seckill.Order{ID: 77, UserID: 7}) {
			t.Error("StageBuyers once the stock exists = true, want false")
		}
		if got := stock(t, c, 9); got != 4 {
			t.Errorf("stock %d, want 4", got)
		}
		if diff := cmp.Diff(wantBuyers, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}

		// Unload drops stock and buyers, and admission stops.
		if err := c.Unload(ctx, 9); err != nil {
			t.Fatal(err)
		}
		if got := stock(t, c, 9); got != -1 {
			t.Errorf("stock %d after Unload, want none", got)
		}
		if got := hash(t, c, k.Buyers); len(got) != 0 {
			t.Errorf("buyers %v after Unload, want none", got)
		}
		if err := c.Admit(ctx, 9, 8, 18); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit after Unload: got %v, want ErrVoucherNotLoaded", err)
		}
		if n := xlen(t, c, k.Orders); n != 3 {
			t.Errorf("stream length %d after Unload, want 3: the queue is kept", n)
		}
		// Rebuilt from the queue alone (the group exists: BUSYGROUP is fine).
		if set, left := finish(t, c, v); !set || left != 7 {
			t.Errorf("FinishRebuild after Unload = %v, %d; want true, 7 (10 less the 3 queued buyers)", set, left)
		}
		if diff := cmp.Diff(map[string]string{"5": "15", "2": "12", "6": "16"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers rebuilt from the queue (-want +got):\n%s", diff)
		}
	})
}

// TestRebuildMoreBuyersThanStock: the stock never goes below zero.
func TestRebuildMoreBuyersThanStock(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		stage(t, c, 1, &seckill.Order{ID: 11, UserID: 1}, &seckill.Order{ID: 12, UserID: 2})
		queue(t, c, 1, 3, 13)
		if set, left := finish(t, c, onSale(1, 2)); !set || left != 0 {
			t.Errorf("FinishRebuild = %v, %d; want true, 0", set, left)
		}
		errKind(t, c.Admit(context.Background(), 1, 4, 14), seckill.ErrSoldOut)
	})
}

// TestRebuildAfterDeadLetter: a dead-lettered message gave its stock and
// slot back; it is acked but stays in the stream until a trim. Rebuilding
// must not take them again.
func TestRebuildAfterDeadLetter(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		admitN(t, c, 1, 5, 2) // users 1, 2; orders 1001, 1002
		read, err := c.ReadOrders(ctx, 1, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 2 {
			t.Fatalf("ReadOrders = %d, %v", len(read), err)
		}
		if _, err := c.DeadLetter(ctx, read[0], seckill.DeadLetter{Reason: "failed"}); err != nil {
			t.Fatal(err)
		}
		ack(t, c, 1, read[1].EntryID) // persisted
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		stage(t, c, 1, &seckill.Order{ID: 1002, UserID: 2}) // the database's order
		v := onSale(1, 5)
		if set, left := finish(t, c, v); !set || left != 4 {
			t.Errorf("FinishRebuild = %v, %d; want true, 4 (5 less the one order in the database)", set, left)
		}
		if diff := cmp.Diff(map[string]string{"2": "1002"}, hash(t, c, c.keys.voucher(1).Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if err := c.Admit(ctx, 1, 1, 1003); err != nil {
			t.Errorf("Admit of the buyer whose order failed: %v, want admitted", err)
		}
	})
}

func TestState(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		got, err := c.State(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&seckill.CacheState{}, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("State of a voucher never loaded (-want +got):\n%s", diff)
		}

		es := admitN(t, c, 1, 10, 4)        // stock 6, 4 buyers
		read := readOrders(t, c, 1, "a", 3) // e3 undelivered
		ack(t, c, 1, es[0].ID)              // e0 settled
		if _, err := c.DeadLetter(ctx, seckill.OrderMessage{EntryID: read[1].EntryID, VoucherID: 1, Order: read[1].Order},
			seckill.DeadLetter{Reason: "failed"}); err != nil { // e1: stock 7, 3 buyers
			t.Fatal(err)
		}
		got, err = c.State(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		want := &seckill.CacheState{Loaded: true, Remaining: 7, Buyers: 3, Pending: 1, Undelivered: 1, DeadLetters: 1}
		// Queued is what the stream holds: e0 and e1 are settled, and stay
		// until a trim (or, for e1, a dead-letter that deletes it).
		for _, m := range wantMsgs(t, 1, entries(t, c, c.keys.voucher(1).Orders), 0) {
			want.Queued = append(want.Queued, seckill.OrderMessage{EntryID: m.EntryID, VoucherID: 1, Order: m.Order})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("State (-want +got):\n%s", diff)
		}

		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got, err = c.State(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		want.Loaded, want.Remaining, want.Buyers = false, 0, 0
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("State after Unload (-want +got):\n%s", diff)
		}
	})
}

// TestFinishRebuildRestoresLostGroup: the workers answer ErrStreamLost with
// a rebuild, which "also makes the group" (worker.readFailed). When the
// group is gone and the stock is not, the rebuild must still make it, or
// the readers loop on ErrStreamLost and the queued orders are never read.
func TestFinishRebuildRestoresLostGroup(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(1).Orders, Group)
		if _, err := c.ReadOrders(ctx, 1, "a", 10, 10*time.Millisecond); !errors.Is(err, seckill.ErrStreamLost) {
			t.Fatalf("ReadOrders with the group gone: got %v, want ErrStreamLost", err)
		}
		set, _ := finish(t, c, onSale(1, 10))
		if set {
			t.Errorf("FinishRebuild with the stock there = true, want false")
		}
		if got := stock(t, c, 1); got != 8 {
			t.Errorf("stock %d, want 8 (untouched)", got)
		}
		got, err := c.ReadOrders(ctx, 1, "a", 10, 10*time.Millisecond)
		if err != nil {
			t.Fatalf("ReadOrders after the rebuild: %v", err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es, 0), msgs(got)); diff != "" {
			t.Errorf("ReadOrders after the rebuild (-want +got):\n%s", diff)
		}
	})
}
