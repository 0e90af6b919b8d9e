package redis

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestTransfersHoldDrainedShards: once a borrow found a sharded voucher
// sold out, each shard is marked drained, and units a transfer gives a
// drained shard (transfer_give.lua), or gives back to its donor when the
// receiver refused it (transfer_settle.lua), are held for Hold, as a unit
// given back by release.lua is; before, a transfer holds nothing (a live
// sale is not stalled by its borrows).
func TestTransfersHoldDrainedShards(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 30, 3)
		mustLoad(t, c, v)
		shards := c.Learn(v).shards
		held := func(i int) int64 {
			t.Helper()
			ms, _ := strconv.ParseInt(hash(t, c, shards[i].Meta)["held"], 10, 64)
			return ms
		}
		// A held at least half the hold from now: set by what just ran.
		fresh := func(ms int64) bool { return ms > time.Now().Add(Hold/2).UnixMilli() }
		interrupt(t, c, v, "live", 0, 1, 2, true)
		if ms := held(1); ms != 0 {
			t.Errorf("a transfer during the sale held the receiver until %d", ms)
		}
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers = %d, %v", n, err)
		}
		sellOut(t, c, v, 1, 60)
		for i, k := range shards {
			if m := hash(t, c, k.Meta); m["drained"] != "1" {
				t.Fatalf("shard %d after the sell-out: meta %v, want drained", i, m)
			}
		}
		// Give: a unit released on shard 0 moves to shard 1.
		u0 := homed(v, 0, 1, 1)[0]
		if ok, err := c.Release(ctx, v.ID, u0, u0+10_000_000); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		do(t, c, "HDEL", shards[1].Meta, "held")
		interrupt(t, c, v, "give", 0, 1, 1, true)
		if ms := held(1); !fresh(ms) {
			t.Errorf("a transfer gave drained shard 1 a unit, held until %d, want about %v from now", ms, Hold)
		}
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers = %d, %v", n, err)
		}
		// Settle: a unit released on shard 2 taken for shard 0, which
		// refuses it: it goes back to shard 2, held.
		u2 := homed(v, 2, 1, 1)[0]
		if ok, err := c.Release(ctx, v.ID, u2, u2+10_000_000); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		do(t, c, "HDEL", shards[2].Meta, "held")
		interrupt(t, c, v, "refused", 2, 0, 1, false)
		gen := strconv.FormatInt(v.Generation, 10)
		r := shards[0]
		if n, err := transferGiveScript.runInt(ctx, c, "cancel", []string{r.Stock, r.Meta, r.Xin},
			transferGiveArgs{ID: "refused", N: 1, Generation: gen, XGen: "0", Cancel: true}); err != nil || n != xRefused {
			t.Fatalf("cancel = %d, %v", n, err)
		}
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers = %d, %v", n, err)
		}
		if got := stockOf(t, c, shards[2]); got != 1 {
			t.Fatalf("shard 2: stock %d after the refused transfer was settled, want 1", got)
		}
		if ms := held(2); !fresh(ms) {
			t.Errorf("a refused transfer's unit went back to drained shard 2, held until %d, want about %v from now", ms, Hold)
		}
		checkObservedInvariant(t, c, v, "after the transfers")
	})
}
