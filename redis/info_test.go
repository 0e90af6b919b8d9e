package redis

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seckill/seckill"
)

func state(t *testing.T, c *Client, voucherID int64, lim infoLimits) *seckill.CacheState {
	t.Helper()
	st, err := c.state(context.Background(), voucherID, lim)
	if err != nil {
		t.Fatalf("State(%d): %v", voucherID, err)
	}
	return st
}

func ptr(n int64) *int64 { return &n }

// TestState follows a voucher's sale through Redis: admitted, delivered,
// acknowledged, dead-lettered, stuck with a consumer, unloaded.
func TestState(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		// The fields a step does not check.
		ignore := cmpopts.IgnoreFields(seckill.CacheState{}, "Consumers", "OldestPending", "Node")

		got := state(t, c, 1, defaultInfoLimits)
		topo, err := c.Topology(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := topo.VoucherMaster(c.keys, 1); got.Node != want || want == "" {
			t.Errorf("Node = %q, want %q, the master of the voucher's slot", got.Node, want)
		}
		if diff := cmp.Diff(&seckill.CacheState{}, got, ignore); diff != "" {
			t.Errorf("unknown voucher (-want +got):\n%s", diff)
		}

		es := admitN(t, c, 1, 10, 5)
		got = state(t, c, 1, defaultInfoLimits)
		want := &seckill.CacheState{Loaded: true, Remaining: 5, Buyers: 5, Length: 5, Lag: ptr(5)}
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("5 admitted (-want +got):\n%s", diff)
		}
		if len(got.Consumers) != 0 || got.OldestPending != 0 {
			t.Errorf("5 admitted: consumers %v, oldest pending %v; want none, 0", got.Consumers, got.OldestPending)
		}

		readOrders(t, c, 1, "c1", 2)
		readOrders(t, c, 1, "c2", 1)
		got = state(t, c, 1, defaultInfoLimits)
		want = &seckill.CacheState{Loaded: true, Remaining: 5, Buyers: 5, Length: 5, Pending: 3, Lag: ptr(2),
			PendingOrders: []int64{1001, 1002, 1003}}
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("3 delivered (-want +got):\n%s", diff)
		}
		consumers := map[string]int64{}
		for _, ci := range got.Consumers {
			consumers[ci.Name] = ci.Pending
			if ci.Idle > time.Minute {
				t.Errorf("consumer %s idle %v; it read just now", ci.Name, ci.Idle)
			}
		}
		if diff := cmp.Diff(map[string]int64{"c1": 2, "c2": 1}, consumers); diff != "" {
			t.Errorf("consumers' pending (-want +got):\n%s", diff)
		}

		// A message sitting with its consumer for 45s: the oldest pending.
		do(t, c, "XCLAIM", c.keys.voucher(1).Orders, Group, "c1", "0", es[1].ID, "IDLE", "45000")
		ack(t, c, 1, es[0].ID)
		got = state(t, c, 1, defaultInfoLimits)
		if got.OldestPending < 45*time.Second || got.OldestPending > 50*time.Second {
			t.Errorf("OldestPending = %v, want 45s (the idle time XCLAIM set)", got.OldestPending)
		}
		want.Pending, want.PendingOrders = 2, []int64{1002, 1003}
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("1 acknowledged (-want +got):\n%s", diff)
		}

		// The last entry delivered goes to the dead letters: Redis can no
		// longer tell the lag (a deletion past the group's last id), so
		// the entries after it are counted.
		msgs, err := c.ReadPending(ctx, seckill.Shard{VoucherID: 1}, "c2", "0", 10)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("ReadPending(c2) = %v, %v", msgs, err)
		}
		if moved, err := c.DeadLetter(ctx, msgs[0], seckill.DeadLetter{Reason: "test"}); err != nil || !moved {
			t.Fatalf("DeadLetter = %v, %v", moved, err)
		}
		got = state(t, c, 1, defaultInfoLimits)
		want = &seckill.CacheState{Loaded: true, Remaining: 6, Buyers: 4, Length: 4, Pending: 1, Lag: ptr(2),
			PendingOrders: []int64{1002}, DeadLetters: 1}
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("after a dead letter (-want +got):\n%s", diff)
		}
		// Too many to count: unknown, not zero.
		got = state(t, c, 1, infoLimits{pending: 10, lagCount: 2})
		if got.Lag != nil {
			t.Errorf("Lag = %d with 2 undelivered past a deletion and a count limit of 2; want nil (unknown)", *got.Lag)
		}
		if !got.Bounded {
			t.Error("Bounded = false with the undelivered entries beyond the count limit; want true (an estimate)")
		}
		// The pending entries listed are bounded.
		readOrders(t, c, 1, "c1", 2)
		got = state(t, c, 1, infoLimits{pending: 2, lagCount: 10})
		if want := []int64{1002, 1004}; !cmp.Equal(want, got.PendingOrders) || got.Pending != 3 || got.Unlisted != 1 {
			t.Errorf("pending limited to 2: PendingOrders %v, Pending %d, Unlisted %d; want %v, 3, 1", got.PendingOrders, got.Pending, got.Unlisted, want)
		}
		if !got.Bounded {
			t.Error("Bounded = false with a pending entry unlisted; want true (an estimate)")
		}

		// Unloaded: no stock, no buyers; the stream stays.
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got = state(t, c, 1, defaultInfoLimits)
		if got.Loaded || got.Remaining != 0 || got.Buyers != 0 || got.Length != 4 || got.Pending != 3 {
			t.Errorf("after Unload = %+v; want not loaded, no buyers, the stream's 4 entries and 3 pending", got)
		}
	})
}

// TestStateLagFromRedis: when Redis knows the lag, it is Redis's, not
// a count (which the limit would stop).
func TestStateLagFromRedis(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		admitN(t, c, 2, 10, 4)
		readOrders(t, c, 2, "c1", 1)
		got := state(t, c, 2, infoLimits{pending: 10, lagCount: 1})
		if c.server != nil {
			// The embedded server does not know: counted, and over the limit.
			if got.Lag != nil {
				t.Errorf("embedded: Lag = %d, want nil (3 to count, limit 1)", *got.Lag)
			}
			return
		}
		if got.Lag == nil || *got.Lag != 3 {
			t.Errorf("Lag = %v, want 3 from XINFO GROUPS", got.Lag)
		}
	})
}

// TestStateLostGroup: a stream without its group (Redis lost it) reads as
// nothing delivered and the lag unknown, not an error.
func TestStateLostGroup(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		admitN(t, c, 3, 10, 2)
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(3).Orders, Group)
		got := state(t, c, 3, defaultInfoLimits)
		want := &seckill.CacheState{Loaded: true, Remaining: 8, Buyers: 2, Length: 2}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(seckill.CacheState{}, "Node")); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// TestSummary: Summary counts what State counts, without listing the
// pending entries' orders (each pending entry is unlisted, so pending),
// and finds a consumer's stale entries beyond the ones it looks at.
func TestSummary(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		summary := func(lim infoLimits) *seckill.CacheState {
			t.Helper()
			st, err := c.summary(ctx, 4, lim)
			if err != nil {
				t.Fatalf("Summary: %v", err)
			}
			return st
		}
		ignore := cmpopts.IgnoreFields(seckill.CacheState{}, "Consumers", "OldestPending", "Node")
		if diff := cmp.Diff(&seckill.CacheState{}, summary(summaryLimits), ignore); diff != "" {
			t.Errorf("unknown voucher (-want +got):\n%s", diff)
		}
		es := admitN(t, c, 4, 10, 5)
		readOrders(t, c, 4, "c1", 1)
		readOrders(t, c, 4, "c2", 1)
		got := summary(summaryLimits)
		want := &seckill.CacheState{Loaded: true, Remaining: 5, Buyers: 5, Length: 5, Pending: 2, Lag: ptr(3), Unlisted: 2, Bounded: true}
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("2 delivered (-want +got):\n%s", diff)
		}
		if full := state(t, c, 4, defaultInfoLimits); full.Pending != got.Pending || *full.Lag != *got.Lag || full.Length != got.Length {
			t.Errorf("State = %+v, Summary = %+v; want the same counts", full, got)
		}

		// c2's entry sits 45s: the oldest pending.
		do(t, c, "XCLAIM", c.keys.voucher(4).Orders, Group, "c2", "0", es[1].ID, "IDLE", "45000")
		if got := summary(summaryLimits); got.OldestPending < 45*time.Second || got.OldestPending > 50*time.Second {
			t.Errorf("OldestPending = %v, want 45s (the idle time XCLAIM set)", got.OldestPending)
		}
		if c.server == nil {
			// Looking at one entry only, c1's, just claimed again: c2's
			// entry is beyond it, and c2 itself has been idle since its
			// read, which its entry has been at least.
			const wait = 300 * time.Millisecond
			time.Sleep(wait)
			do(t, c, "XCLAIM", c.keys.voucher(4).Orders, Group, "c1", "0", es[0].ID)
			if got := summary(infoLimits{pending: 1, lagCount: 100}); got.OldestPending < wait {
				t.Errorf("OldestPending = %v looking at one fresh entry; want c2's idle time, over %v", got.OldestPending, wait)
			}
		}

		// The last entry delivered goes to the dead letters: Redis cannot
		// tell the lag, and the few undelivered entries are counted.
		msgs, err := c.ReadPending(ctx, seckill.Shard{VoucherID: 4}, "c2", "0", 10)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("ReadPending(c2) = %v, %v", msgs, err)
		}
		if moved, err := c.DeadLetter(ctx, msgs[0], seckill.DeadLetter{Reason: "test"}); err != nil || !moved {
			t.Fatalf("DeadLetter = %v, %v", moved, err)
		}
		want = &seckill.CacheState{Loaded: true, Remaining: 6, Buyers: 4, Length: 4, Pending: 1, Lag: ptr(3), Unlisted: 1, Bounded: true, DeadLetters: 1}
		if diff := cmp.Diff(want, summary(summaryLimits), ignore); diff != "" {
			t.Errorf("after a dead letter (-want +got):\n%s", diff)
		}
		if got := summary(infoLimits{pending: 100, lagCount: 2}); got.Lag != nil {
			t.Errorf("Lag = %d with 3 to count and a limit of 2; want nil (unknown)", *got.Lag)
		}
	})
}
