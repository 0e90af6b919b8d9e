package redis

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// admitN loads voucher id with stock and admits users 1..n with orders
// id*1000+user, and returns the stream's entries.
func admitN(t *testing.T, c *Client, id, stock, n int64) []rueidis.XRangeEntry {
	t.Helper()
	mustLoad(t, c, onSale(id, stock))
	for u := int64(1); u <= n; u++ {
		mustAdmit(t, c, id, u, id*1000+u)
	}
	es := entries(t, c, c.keys.voucher(id).Orders)
	if int64(len(es)) != n {
		t.Fatalf("stream holds %d entries, want %d", len(es), n)
	}
	return es
}

func readOrders(t *testing.T, c *Client, voucherID int64, consumer string, count int) []msg {
	t.Helper()
	got, err := c.ReadOrders(context.Background(), seckill.Shard{VoucherID: voucherID}, consumer, count, 10*time.Millisecond)
	if err != nil {
		t.Fatalf("ReadOrders(%s): %v", consumer, err)
	}
	return msgs(got)
}

func readPending(t *testing.T, c *Client, voucherID int64, consumer, after string, count int) []msg {
	t.Helper()
	got, err := c.ReadPending(context.Background(), seckill.Shard{VoucherID: voucherID}, consumer, after, count)
	if err != nil {
		t.Fatalf("ReadPending(%s, %s): %v", consumer, after, err)
	}
	return msgs(got)
}

func ack(t *testing.T, c *Client, voucherID int64, ids ...string) {
	t.Helper()
	if n, err := c.AckOrders(context.Background(), seckill.Shard{VoucherID: voucherID}, ids...); err != nil || n != int64(len(ids)) {
		t.Fatalf("AckOrders(%v) = %d, %v; want %d acknowledged", ids, n, err, len(ids))
	}
}

func TestReadOrders(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		es := admitN(t, c, 1, 10, 3)
		want := wantMsgs(t, 1, es, 0)

		// Each new message goes to one consumer of the group, once.
		if diff := cmp.Diff(want[:2], readOrders(t, c, 1, "a", 2)); diff != "" {
			t.Errorf("ReadOrders(a, 2) (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want[2:], readOrders(t, c, 1, "b", 10)); diff != "" {
			t.Errorf("ReadOrders(b) (-want +got):\n%s", diff)
		}
		for _, consumer := range []string{"a", "b", "c"} {
			if got := readOrders(t, c, 1, consumer, 10); len(got) != 0 {
				t.Errorf("ReadOrders(%s) once all are read: %v, want none", consumer, got)
			}
		}
		wantPEL := map[string]pel{es[0].ID: {"a", 1}, es[1].ID: {"a", 1}, es[2].ID: {"b", 1}}
		if diff := cmp.Diff(wantPEL, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries (-want +got):\n%s", diff)
		}
	})
}

func TestReadPending(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		es := admitN(t, c, 1, 10, 3)
		want := wantMsgs(t, 1, es, 0)
		readOrders(t, c, 1, "a", 2)
		readOrders(t, c, 1, "b", 10)

		tests := []struct {
			consumer, after string
			count           int
			want            []msg
		}{
			{"a", "0", 10, want[:2]},
			{"a", "0", 1, want[:1]},
			{"a", es[0].ID, 10, want[1:2]},
			{"a", es[1].ID, 10, nil},
			{"b", "0", 10, want[2:]},
			{"c", "0", 10, nil},
		}
		for _, tt := range tests {
			if tt.count < len(want) && c.server != nil {
				continue // miniredis v2.40 ignores COUNT when it reads a consumer's history
			}
			got := readPending(t, c, 1, tt.consumer, tt.after, tt.count)
			if diff := cmp.Diff(counted(t, c, 1, tt.want), got); diff != "" {
				t.Errorf("ReadPending(%s, after %s, %d) (-want +got):\n%s", tt.consumer, tt.after, tt.count, diff)
			}
		}

		ack(t, c, 1, es[0].ID, es[1].ID)
		ack(t, c, 1) // no ids: nothing to do
		if got := readPending(t, c, 1, "a", "0", 10); len(got) != 0 {
			t.Errorf("ReadPending(a) after acking its messages: %v, want none", got)
		}
		got := readPending(t, c, 1, "b", "0", 10)
		if diff := cmp.Diff(counted(t, c, 1, want[2:]), got); diff != "" {
			t.Errorf("ReadPending(b) after acking a's (-want +got):\n%s", diff)
		}
		if got := pending(t, c, 1); len(got) != 1 || got[es[2].ID].Consumer != "b" {
			t.Errorf("pending entries %v, want only %s of b", got, es[2].ID)
		}
	})
}

// counted returns want with the delivery counts the pending list holds.
func counted(t *testing.T, c *Client, voucherID int64, want []msg) []msg {
	t.Helper()
	pel := pending(t, c, voucherID)
	out := slices.Clone(want)
	for i := range out {
		out[i].Deliveries = pel[out[i].EntryID].Deliveries
	}
	return out
}

// TestReadPendingDeliveries: a message read back from the consumer's own
// pending list carries its delivery count, this read included, so that the
// workers can dead-letter one delivered too often.
func TestReadPendingDeliveries(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		es := admitN(t, c, 1, 10, 2)
		readOrders(t, c, 1, "a", 10)
		// Five deliveries of e0 so far, as if a had restarted four times.
		do(t, c, "XCLAIM", c.keys.voucher(1).Orders, Group, "a", "0", es[0].ID, "RETRYCOUNT", "5", "JUSTID")
		want := wantMsgs(t, 1, es, 0)
		want[0].Deliveries, want[1].Deliveries = 6, 2
		if diff := cmp.Diff(want, readPending(t, c, 1, "a", "0", 10)); diff != "" {
			t.Errorf("ReadPending (-want +got):\n%s", diff)
		}
		wantPEL := map[string]pel{es[0].ID: {"a", 6}, es[1].ID: {"a", 2}}
		if diff := cmp.Diff(wantPEL, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries (-want +got):\n%s", diff)
		}
	})
}

func TestReadOrdersBlocks(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		mustLoad(t, c, onSale(1, 10))
		start := time.Now()
		got, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 50*time.Millisecond)
		if err != nil || len(got) != 0 {
			t.Fatalf("ReadOrders on an empty stream = %v, %v; want none, nil", got, err)
		}
		if waited := time.Since(start); waited < 40*time.Millisecond {
			t.Errorf("ReadOrders returned after %v, want it to wait about 50ms", waited)
		}

		admitted := make(chan error, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			admitted <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1001})
		}()
		got, err = c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 5*time.Second)
		if err := <-admitted; err != nil {
			t.Fatal(err)
		}
		if err != nil || len(got) != 1 || got[0].Order.ID != 1001 {
			t.Fatalf("ReadOrders while an order comes = %v, %v; want order 1001", got, err)
		}
	})
}

// TestReadOrdersNoBlock: a read told not to wait (block 0) must not wait;
// XREADGROUP BLOCK 0 waits forever.
func TestReadOrdersNoBlock(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		mustLoad(t, c, onSale(1, 10))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 0)
		if err != nil || len(got) != 0 {
			t.Fatalf("ReadOrders(block 0) on an empty stream = %v, %v; want none, nil at once", got, err)
		}
	})
}

func TestClaimStale(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 3)
		readOrders(t, c, 1, "a", 10)
		ack(t, c, 1, es[0].ID)

		claim := func(consumer string, minIdle time.Duration, count int) []msg {
			t.Helper()
			got, deleted, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, consumer, minIdle, count)
			if err != nil || len(deleted) != 0 {
				t.Fatalf("ClaimStale(%s, %v) = %v, deleted %v, %v", consumer, minIdle, got, deleted, err)
			}
			return msgs(got)
		}
		if got := claim("b", time.Hour, 10); len(got) != 0 {
			t.Errorf("ClaimStale(min idle 1h) = %v, want none", got)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[1:], 2), claim("b", 0, 10)); diff != "" {
			t.Errorf("first ClaimStale (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[1:2], 3), claim("c", 0, 1)); diff != "" {
			t.Errorf("second ClaimStale (-want +got):\n%s", diff)
		}
		wantPEL := map[string]pel{es[1].ID: {"c", 3}, es[2].ID: {"b", 2}}
		if diff := cmp.Diff(wantPEL, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries (-want +got):\n%s", diff)
		}
		// The claimer reads its claimed messages back as its own: a delivery.
		if diff := cmp.Diff(wantMsgs(t, 1, es[2:], 3), readPending(t, c, 1, "b", "0", 10)); diff != "" {
			t.Errorf("ReadPending(b) (-want +got):\n%s", diff)
		}
		if got := readPending(t, c, 1, "a", "0", 10); len(got) != 0 {
			t.Errorf("ReadPending(a) after its messages were claimed: %v, want none", got)
		}
	})
}

func TestClaimStaleWaitsForIdle(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 1)
		const minIdle = time.Second // the claim "at once" may come late on a loaded machine
		read := time.Now()
		readOrders(t, c, 1, "a", 10)
		got, _, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", minIdle, 10)
		if err != nil || len(got) != 0 {
			t.Fatalf("ClaimStale at once = %v, %v; want none", msgs(got), err)
		}
		var claimed []seckill.OrderMessage
		testenv.WaitFor(t, 5*time.Second, "ClaimStale takes the idle message", func() bool {
			claimed, _, err = c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", minIdle, 10)
			if err != nil {
				t.Fatal(err)
			}
			return len(claimed) > 0
		})
		if idle := time.Since(read); idle < minIdle {
			t.Errorf("claimed after %v, want no sooner than %v", idle, minIdle)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es, 2), msgs(claimed)); diff != "" {
			t.Errorf("ClaimStale (-want +got):\n%s", diff)
		}
	})
}

// TestClaimStaleDeleted: ClaimStale reports the pending entries deleted
// from the stream and drops them from the group, as XAUTOCLAIM (Redis 7)
// does; XCLAIM drops them without a word.
func TestClaimStaleDeleted(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		readOrders(t, c, 1, "a", 10)
		do(t, c, "XDEL", c.keys.voucher(1).Orders, es[0].ID)
		got, deleted, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[1:], 2), msgs(got)); diff != "" {
			t.Errorf("ClaimStale messages (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{es[0].ID}, deleted); diff != "" {
			t.Errorf("ClaimStale deleted (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]pel{es[1].ID: {"b", 2}}, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries (-want +got):\n%s", diff)
		}
	})
}

// TestClaimStaleFromLiveConsumer: a message taken from a consumer that is
// alive (it renewed another claim within the lease) keeps its delivery
// count; one taken from a consumer that went quiet counts a delivery more.
func TestClaimStaleFromLiveConsumer(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 3)
		readOrders(t, c, 1, "live", 2) // e0, e1
		readOrders(t, c, 1, "dead", 1) // e2
		// Wide enough that the steps below, from the renewal to the claim,
		// take less on a loaded machine.
		const lease = time.Second
		testenv.WaitFor(t, 5*time.Second, "the entries stale", func() bool {
			rows, err := do(t, c, "XPENDING", c.keys.voucher(1).Orders, Group, "IDLE", "1000", "-", "+", "10").ToArray()
			return err == nil && len(rows) == 3
		})
		// live renews e1 and lets e0 go stale: it fell behind on e0.
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "live", es[1].ID); err != nil {
			t.Fatal(err)
		}
		before := pending(t, c, 1)
		got, deleted, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", lease, 10)
		if err != nil || len(deleted) != 0 {
			t.Fatalf("ClaimStale = %v, deleted %v, %v", msgs(got), deleted, err)
		}
		want := wantMsgs(t, 1, []rueidis.XRangeEntry{es[0], es[2]}, 0)
		want[0].Deliveries = before[es[0].ID].Deliveries     // from live: not counted
		want[1].Deliveries = before[es[2].ID].Deliveries + 1 // from dead: counted
		if diff := cmp.Diff(want, msgs(got)); diff != "" {
			t.Errorf("ClaimStale (-want +got):\n%s", diff)
		}
		wantPEL := map[string]pel{es[0].ID: {"b", want[0].Deliveries}, es[1].ID: {"live", before[es[1].ID].Deliveries}, es[2].ID: {"b", want[1].Deliveries}}
		if diff := cmp.Diff(wantPEL, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries (-want +got):\n%s", diff)
		}
	})
}

// TestClaimStaleBounded: one call of the claim script looks at no more
// than ten pending entries per message wanted, and ClaimStale follows its
// cursor to the stale ones behind.
func TestClaimStaleBounded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 40, 25)
		readOrders(t, c, 1, "dead", 1) // e0
		readOrders(t, c, 1, "live", 23)
		readOrders(t, c, 1, "dead", 1) // e24
		// Idle past a lease of 500ms, which the refreshed entries must not
		// reach again before the claims below, on a loaded machine too.
		testenv.WaitFor(t, 5*time.Second, "the entries idle", func() bool {
			rows, err := do(t, c, "XPENDING", c.keys.voucher(1).Orders, Group, "IDLE", "600", "-", "+", "100").ToArray()
			return err == nil && len(rows) == 25
		})
		ids := make([]string, 23)
		for i := range ids {
			ids[i] = es[i+1].ID
		}
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "live", ids...); err != nil {
			t.Fatal(err)
		}
		res, err := claimStaleScript.run(ctx, c, []string{c.keys.voucher(1).Orders},
			claimStaleArgs{Consumer: "b", MinIdle: 500 * time.Millisecond, Cursor: "0-0", Count: 1, Scan: 10}).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		cursor, claimed, _, err := parseClaimed(seckill.Shard{VoucherID: 1}, res)
		if err != nil || len(claimed) != 1 || claimed[0].EntryID != es[0].ID || cursor != es[1].ID {
			t.Fatalf("claim_stale(count 1) = cursor %s, %v, %v; want %s and cursor %s", cursor, msgs(claimed), err, es[0].ID, es[1].ID)
		}
		res, err = claimStaleScript.run(ctx, c, []string{c.keys.voucher(1).Orders},
			claimStaleArgs{Consumer: "b", MinIdle: 500 * time.Millisecond, Cursor: cursor, Count: 1, Scan: 10}).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		next, claimed, _, err := parseClaimed(seckill.Shard{VoucherID: 1}, res)
		if err != nil || len(claimed) != 0 {
			t.Fatalf("claim_stale over fresh entries = %v, %v; want none", msgs(claimed), err)
		}
		if want, _ := nextID(es[10].ID); next != want {
			t.Errorf("cursor after ten fresh entries = %s, want %s", next, want)
		}
		got, _, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", 500*time.Millisecond, 1)
		if err != nil || len(got) != 1 || got[0].EntryID != es[24].ID {
			t.Errorf("ClaimStale(count 1) = %v, %v; want the stale %s behind 23 fresh entries", msgs(got), err, es[24].ID)
		}
	})
}

// TestGiveUp: messages a consumer gives up on are handed, their delivery
// counts as they were, to a consumer that never reads; reclaimed after the
// lease, they count a delivery, although the consumer that gave them up is
// alive. A message it does not hold is left alone.
func TestGiveUp(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		readOrders(t, c, 1, "a", 1) // e0
		readOrders(t, c, 1, "b", 1) // e1
		before := pending(t, c, 1)
		if err := c.GiveUp(ctx, seckill.Shard{VoucherID: 1}, "a", es[0].ID, es[1].ID); err != nil {
			t.Fatal(err)
		}
		if err := c.GiveUp(ctx, seckill.Shard{VoucherID: 1}, "a"); err != nil {
			t.Fatalf("GiveUp of no ids: %v", err)
		}
		want := map[string]pel{es[0].ID: {Abandoned("a"), before[es[0].ID].Deliveries}, es[1].ID: before[es[1].ID]}
		if diff := cmp.Diff(want, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries after GiveUp (-want +got):\n%s", diff)
		}

		// Long enough that b's refreshed e1 does not turn stale before the
		// claim on a loaded machine.
		const lease = time.Second
		testenv.WaitFor(t, 5*time.Second, "the abandoned entry stale", func() bool {
			rows, err := do(t, c, "XPENDING", c.keys.voucher(1).Orders, Group, "IDLE", strconv.FormatInt(lease.Milliseconds(), 10), "-", "+", "10", Abandoned("a")).ToArray()
			return err == nil && len(rows) == 1
		})
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "b", es[1].ID); err != nil { // b is at work on e1
			t.Fatal(err)
		}
		got, _, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "c", lease, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[:1], before[es[0].ID].Deliveries+1), msgs(got)); diff != "" {
			t.Errorf("ClaimStale of the abandoned message (-want +got):\n%s", diff)
		}
	})
}

func TestRefreshClaims(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		if c.server != nil {
			t.Skip("a known difference of the embedded server (miniredis v2.40): XCLAIM ... JUSTID counts a delivery, " +
				"so RefreshClaims raises the delivery count and a slow message reaches the dead-letter limit early")
		}
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		readOrders(t, c, 1, "a", 10)
		// Some idle time to reset. The lease must outlast the time from the
		// refresh to the claim, on a loaded machine too, and a's being alive
		// counts for half of it (ClaimStale).
		const lease = 2 * time.Second
		testenv.WaitFor(t, 10*time.Second, "the entries idle a lease", func() bool {
			rows, err := do(t, c, "XPENDING", c.keys.voucher(1).Orders, Group, "IDLE", strconv.FormatInt(lease.Milliseconds(), 10), "-", "+", "10").ToArray()
			return err == nil && len(rows) == 2
		})
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "a", es[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "a"); err != nil {
			t.Fatalf("RefreshClaims of no ids: %v", err)
		}
		want := map[string]pel{es[0].ID: {"a", 1}, es[1].ID: {"a", 1}}
		if diff := cmp.Diff(want, pending(t, c, 1)); diff != "" {
			t.Errorf("pending entries after RefreshClaims (-want +got):\n%s", diff)
		}
		// The refreshed message is fresh again; the other is not. Its
		// consumer renewed a claim just now: alive, so the claim does not
		// count a delivery.
		got, _, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", lease, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[1:], 1), msgs(got)); diff != "" {
			t.Errorf("ClaimStale after a refresh (-want +got):\n%s", diff)
		}
	})
}

func TestParseMessage(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_900_000_000_123).UTC()
	tests := []struct {
		name   string
		fields map[string]string
		want   msg
	}{
		{"whole", map[string]string{"id": "11", "user": "22", "voucher": "3", "at": "1900000000123"},
			msg{EntryID: "1-1", VoucherID: 3, Order: seckill.Order{ID: 11, UserID: 22, VoucherID: 3, Status: seckill.OrderPending, CreatedAt: at}}},
		{"no user, bad time", map[string]string{"id": "11", "voucher": "3", "at": "soon"},
			msg{EntryID: "1-1", VoucherID: 3, Order: seckill.Order{ID: 11, VoucherID: 3, Status: seckill.OrderPending},
				Err: `malformed order message 1-1: no user, at "soon" is not a positive integer`}},
		{"garbage", map[string]string{"id": "abc", "user": "-4", "voucher": "9", "at": "1900000000123"},
			msg{EntryID: "1-1", VoucherID: 3, Order: seckill.Order{VoucherID: 3, Status: seckill.OrderPending, CreatedAt: at},
				Err: `malformed order message 1-1: id "abc" is not a positive integer, user "-4" is not a positive integer, voucher 9 in the stream of voucher 3`}},
		{"empty", nil,
			msg{EntryID: "1-1", VoucherID: 3, Order: seckill.Order{VoucherID: 3, Status: seckill.OrderPending},
				Err: `malformed order message 1-1: no id, no user, no voucher, no at`}},
	}
	for _, tt := range tests {
		got := msgs([]seckill.OrderMessage{parseMessage(3, rueidis.XRangeEntry{ID: "1-1", FieldValues: tt.fields})})
		if diff := cmp.Diff([]msg{tt.want}, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestReadOrdersMalformed: a malformed entry in the stream is delivered as
// a message with Err and the fields that could be read.
func TestReadOrdersMalformed(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		mustLoad(t, c, onSale(1, 10))
		k := c.keys.voucher(1)
		id1, err := do(t, c, "XADD", k.Orders, "*", "id", "12", "voucher", "1", "at", "x").ToString()
		if err != nil {
			t.Fatal(err)
		}
		id2, err := do(t, c, "XADD", k.Orders, "*", "id", "13", "user", "7", "voucher", "2", "at", "1900000000123").ToString()
		if err != nil {
			t.Fatal(err)
		}
		want := []msg{
			{EntryID: id1, VoucherID: 1, Order: seckill.Order{ID: 12, VoucherID: 1, Status: seckill.OrderPending},
				Err: "malformed order message " + id1 + `: no user, at "x" is not a positive integer`},
			{EntryID: id2, VoucherID: 1, Order: seckill.Order{ID: 13, UserID: 7, VoucherID: 1, Status: seckill.OrderPending, CreatedAt: time.UnixMilli(1900000000123).UTC()},
				Err: "malformed order message " + id2 + ": voucher 2 in the stream of voucher 1"},
		}
		if diff := cmp.Diff(want, readOrders(t, c, 1, "a", 10)); diff != "" {
			t.Errorf("ReadOrders (-want +got):\n%s", diff)
		}
	})
}

func TestStreamLost(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 1)
		readOrders(t, c, 1, "a", 10)
		admitN(t, c, 2, 10, 1)
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(1).Orders, Group)
		do(t, c, "DEL", c.keys.voucher(2).Orders)

		for _, v := range []int64{1, 2, 3} { // 3: never loaded
			ops := map[string]error{}
			_, ops["ReadOrders"] = c.ReadOrders(ctx, seckill.Shard{VoucherID: v}, "a", 10, 10*time.Millisecond)
			_, ops["ReadPending"] = c.ReadPending(ctx, seckill.Shard{VoucherID: v}, "a", "0", 10)
			_, _, ops["ClaimStale"] = c.ClaimStale(ctx, seckill.Shard{VoucherID: v}, "a", 0, 10)
			_, ops["TrimOrders"] = c.TrimOrders(ctx, seckill.Shard{VoucherID: v})
			if v == 1 {
				// XINFO CONSUMERS of a stream that is gone says "no such
				// key", not NOGROUP: only a lost group is told here.
				_, ops["ReapConsumers"] = c.ReapConsumers(ctx, seckill.Shard{VoucherID: v}, "a", 0)
			}
			for op, err := range ops {
				if !errors.Is(err, seckill.ErrStreamLost) {
					t.Errorf("voucher %d: %s: got %v, want ErrStreamLost", v, op, err)
				}
			}
		}
		// The entry itself is still there: losing the group lost no order.
		if got := xlen(t, c, c.keys.voucher(1).Orders); got != int64(len(es)) {
			t.Errorf("stream length %d, want %d", got, len(es))
		}
	})
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const v = 1
		k := c.keys.voucher(v)
		es := admitN(t, c, v, 10, 5) // users 1..5, orders 1001..1005; stock 5
		read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: v}, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 5 {
			t.Fatalf("ReadOrders = %d messages, %v; want 5", len(read), err)
		}
		type state struct {
			Stock   int64
			Buyers  map[string]string
			DLQ     []map[string]string
			Pending []string
		}
		current := func() state {
			t.Helper()
			st := state{Stock: stock(t, c, v), Buyers: hash(t, c, k.Buyers)}
			for _, e := range entries(t, c, k.DLQ) {
				st.DLQ = append(st.DLQ, e.FieldValues)
			}
			for id := range pending(t, c, v) {
				st.Pending = append(st.Pending, id)
			}
			slices.Sort(st.Pending)
			return st
		}
		dead := func(i int, dl seckill.DeadLetter) bool {
			t.Helper()
			moved, err := c.DeadLetter(ctx, read[i], dl)
			if err != nil {
				t.Fatalf("DeadLetter(%s): %v", read[i].EntryID, err)
			}
			return moved
		}
		dlq := func(i int, user, reason, returned string) map[string]string {
			return map[string]string{"entry": es[i].ID, "id": es[i].FieldValues["id"], "user": user,
				"voucher": "1", "reason": reason, "stock_returned": returned}
		}
		want := state{Stock: 5,
			Buyers:  map[string]string{"1": "1001", "2": "1002", "3": "1003", "4": "1004", "5": "1005"},
			Pending: []string{es[0].ID, es[1].ID, es[2].ID, es[3].ID, es[4].ID}}
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Fatalf("before (-want +got):\n%s", diff)
		}

		// Stock and slot given back, message moved and acked.
		if !dead(0, seckill.DeadLetter{Reason: "voucher gone"}) {
			t.Error("DeadLetter of a pending message = false, want true")
		}
		want.Stock = 6
		delete(want.Buyers, "1")
		want.DLQ = append(want.DLQ, dlq(0, "1", "voucher gone", "1"))
		want.Pending = want.Pending[1:]
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after DeadLetter (-want +got):\n%s", diff)
		}
		// Settled already: nothing happens.
		if dead(0, seckill.DeadLetter{Reason: "again"}) {
			t.Error("second DeadLetter of a message = true, want false")
		}
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after a second DeadLetter (-want +got):\n%s", diff)
		}

		// KeepStock: the slot is freed, the stock stays taken.
		if !dead(1, seckill.DeadLetter{Reason: "no stock in the database", KeepStock: true}) {
			t.Error("DeadLetter(KeepStock) = false, want true")
		}
		delete(want.Buyers, "2")
		want.DLQ = append(want.DLQ, dlq(1, "2", "no stock in the database", "0"))
		want.Pending = want.Pending[1:]
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after DeadLetter(KeepStock) (-want +got):\n%s", diff)
		}

		// BuyerOrder: the buyer keeps their order in the database.
		if !dead(2, seckill.DeadLetter{Reason: "buyer has an order", BuyerOrder: 999}) {
			t.Error("DeadLetter(BuyerOrder) = false, want true")
		}
		want.Stock = 7
		want.Buyers["3"] = "999"
		want.DLQ = append(want.DLQ, dlq(2, "3", "buyer has an order", "1"))
		want.Pending = want.Pending[1:]
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after DeadLetter(BuyerOrder) (-want +got):\n%s", diff)
		}

		// The buyer's slot holds another order: this message did not take
		// it, so neither stock nor slot goes back; the message still leaves.
		do(t, c, "HSET", k.Buyers, "4", "555")
		want.Buyers["4"] = "555"
		if !dead(3, seckill.DeadLetter{Reason: "id conflict"}) {
			t.Error("DeadLetter of a message whose buyer has another order = false, want true")
		}
		want.DLQ = append(want.DLQ, dlq(3, "4", "id conflict", "0"))
		want.Pending = want.Pending[1:]
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after DeadLetter of a message not holding the slot (-want +got):\n%s", diff)
		}

		// Acked by someone else first: nothing happens.
		ack(t, c, v, es[4].ID)
		want.Pending = nil
		if dead(4, seckill.DeadLetter{Reason: "late"}) {
			t.Error("DeadLetter of an acked message = true, want false")
		}
		if diff := cmp.Diff(want, current()); diff != "" {
			t.Errorf("after DeadLetter of an acked message (-want +got):\n%s", diff)
		}
	})
}

// TestDeadLetterMalformed: a message with no order or buyer is moved and
// acked, and gives nothing back.
func TestDeadLetterMalformed(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		mustLoad(t, c, onSale(1, 10))
		k := c.keys.voucher(1)
		entry, err := do(t, c, "XADD", k.Orders, "*", "junk", "1").ToString()
		if err != nil {
			t.Fatal(err)
		}
		read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 1 || read[0].Err == nil {
			t.Fatalf("ReadOrders = %v, %v; want one malformed message", msgs(read), err)
		}
		moved, err := c.DeadLetter(ctx, read[0], seckill.DeadLetter{Reason: "malformed"})
		if err != nil || !moved {
			t.Fatalf("DeadLetter = %v, %v; want true, nil", moved, err)
		}
		var got []map[string]string
		for _, e := range entries(t, c, k.DLQ) {
			got = append(got, e.FieldValues)
		}
		want := []map[string]string{{"entry": entry, "id": "", "user": "", "voucher": "1", "reason": "malformed", "stock_returned": "0"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("dead letters (-want +got):\n%s", diff)
		}
		if n := stock(t, c, 1); n != 10 {
			t.Errorf("stock %d, want 10", n)
		}
		if p := pending(t, c, 1); len(p) != 0 {
			t.Errorf("pending %v, want none", p)
		}
	})
}

func trim(t *testing.T, c *Client, voucherID int64) int64 {
	t.Helper()
	n, err := c.TrimOrders(context.Background(), seckill.Shard{VoucherID: voucherID})
	if err != nil {
		t.Fatalf("TrimOrders: %v", err)
	}
	return n
}

func TestTrimOrders(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		es := admitN(t, c, 1, 10, 5)
		key := c.keys.voucher(1).Orders
		check := func(step string, trimmed, wantTrimmed int64, wantFirst int) {
			t.Helper()
			if trimmed != wantTrimmed {
				t.Errorf("%s: TrimOrders = %d, want %d", step, trimmed, wantTrimmed)
			}
			var ids, want []string
			for _, e := range entries(t, c, key) {
				ids = append(ids, e.ID)
			}
			for _, e := range es[wantFirst:] {
				want = append(want, e.ID)
			}
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("%s: entries left (-want +got):\n%s", step, diff)
			}
		}

		readOrders(t, c, 1, "a", 3) // e0..e2 pending, e3, e4 undelivered
		check("all delivered pending", trim(t, c, 1), 0, 0)
		ack(t, c, 1, es[0].ID, es[2].ID) // e1 pending
		check("e1 pending", trim(t, c, 1), 1, 1)
		// e1 claimed by another consumer is still pending.
		if _, _, err := c.ClaimStale(context.Background(), seckill.Shard{VoucherID: 1}, "b", 0, 10); err != nil {
			t.Fatal(err)
		}
		check("e1 claimed", trim(t, c, 1), 0, 1)
		ack(t, c, 1, es[1].ID) // nothing pending; e3, e4 undelivered
		check("nothing pending", trim(t, c, 1), 2, 3)
		readOrders(t, c, 1, "a", 10)
		ack(t, c, 1, es[3].ID, es[4].ID)
		check("all acked", trim(t, c, 1), 2, 5)
		check("empty", trim(t, c, 1), 0, 5)
		if n := xlen(t, c, key); n != 0 {
			t.Errorf("XLEN = %d, want 0", n)
		}
	})
}

// TestTrimOrdersNothingDelivered: with nothing delivered yet there is
// nothing to trim, and no error.
func TestTrimOrdersNothingDelivered(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		if c.server != nil {
		}
		admitN(t, c, 1, 10, 2)
		if n := trim(t, c, 1); n != 0 {
			t.Errorf("TrimOrders = %d, want 0", n)
		}
		if n := xlen(t, c, c.keys.voucher(1).Orders); n != 2 {
			t.Errorf("XLEN = %d, want 2", n)
		}
	})
}

// TestTrimOrdersReadBetween runs a read of the group at the worst moment of
// TrimOrders: after it saw nothing pending, before it reads the group's
// last delivered id. The entry delivered then is pending and must stay.
func TestTrimOrdersReadBetween(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		if c.Kind() == KindCluster {
			t.Skip("the hook is a proxy in front of one server; the other runs cover the script")
		}
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		readOrders(t, c, 1, "a", 1)
		ack(t, c, 1, es[0].ID) // nothing pending; e1 undelivered

		var hookErr error
		u := &url.URL{Scheme: "redis", Host: c.Addr()}
		if c.server == nil {
			var err error
			if u, err = url.Parse(testenv.RedisURL(t)); err != nil {
				t.Fatal(err)
			}
		}
		p := startHookProxy(t, u.Host, "XINFO", func() {
			_, hookErr = c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "b", 10, 10*time.Millisecond)
		})
		u.Host = p.Addr()
		tc, err := Open(ctx, Config{URL: u.String(), Prefix: c.keys.prefix, Embedded: c.server != nil}, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		n, err := tc.TrimOrders(ctx, seckill.Shard{VoucherID: 1})
		if hookErr != nil || !p.Hooked() {
			t.Fatalf("the read between did not happen: hooked %v, %v", p.Hooked(), hookErr)
		}
		if err != nil || n != 1 {
			t.Errorf("TrimOrders = %d, %v; want 1 (e0 only)", n, err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es[1:], 2), readPending(t, c, 1, "b", "0", 10)); diff != "" {
			t.Errorf("b's pending message after the trim (-want +got):\n%s", diff)
		}
	})
}

func TestReapConsumers(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 3)
		for i, name := range []string{"old", "busy", "self"} {
			readOrders(t, c, 1, name, 1)
			// A refresh, as a worker on a slow batch does; it also gives the
			// embedded server, which does not time XREADGROUP, a seen time.
			if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, name, es[i].ID); err != nil {
				t.Fatal(err)
			}
		}
		ack(t, c, 1, es[0].ID, es[2].ID)

		reap := func(idle time.Duration) []string {
			t.Helper()
			reaped, err := c.ReapConsumers(ctx, seckill.Shard{VoucherID: 1}, "self", idle)
			if err != nil {
				t.Fatalf("ReapConsumers: %v", err)
			}
			return reaped
		}
		if got := reap(time.Hour); len(got) != 0 {
			t.Errorf("ReapConsumers(idle 1h) = %v, want none", got)
		}
		const idle = 50 * time.Millisecond
		testenv.WaitFor(t, 5*time.Second, "consumers idle", func() bool {
			_, idles := consumers(t, c, 1)
			return idles["old"] > idle && idles["busy"] > idle && idles["self"] > idle
		})
		if diff := cmp.Diff([]string{"old"}, reap(idle)); diff != "" {
			t.Errorf("ReapConsumers (-want +got):\n%s", diff)
		}
		names, _ := consumers(t, c, 1)
		if diff := cmp.Diff([]string{"busy", "self"}, names); diff != "" {
			t.Errorf("consumers left (-want +got):\n%s", diff)
		}
		if got := reap(idle); len(got) != 0 {
			t.Errorf("second ReapConsumers = %v, want none", got)
		}
		if p := pending(t, c, 1); len(p) != 1 || p[es[1].ID].Consumer != "busy" {
			t.Errorf("pending entries %v, want only %s of busy", p, es[1].ID)
		}
	})
}

// hookProxy forwards TCP connections to a server and, the first time a
// client sends bytes that contain a marker, runs a hook before it forwards
// them: it puts another client's command between two of this one's.
type hookProxy struct {
	ln     net.Listener
	target string
	marker []byte
	hook   func()
	once   sync.Once
	hooked atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startHookProxy(t *testing.T, target, marker string, hook func()) *hookProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hookProxy{ln: ln, target: target, marker: []byte(marker), hook: hook}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *hookProxy) Addr() string { return p.ln.Addr().String() }
func (p *hookProxy) Hooked() bool { return p.hooked.Load() }

func (p *hookProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(client, server)
			client.Close()
		}()
		go func() {
			defer p.wg.Done()
			defer server.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if bytes.Contains(buf[:n], p.marker) {
						p.once.Do(func() { p.hook(); p.hooked.Store(true) })
					}
					if _, err := server.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *hookProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestDeadLetterStreamLost: dead-lettering into a voucher whose group is
// gone cannot succeed by retrying; it must say the stream is lost, not
// that Redis is unavailable (which the workers retry until they stop).
func TestDeadLetterStreamLost(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		admitN(t, c, 1, 10, 1)
		read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 1 {
			t.Fatalf("ReadOrders = %d, %v", len(read), err)
		}
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(1).Orders, Group)
		_, err = c.DeadLetter(ctx, read[0], seckill.DeadLetter{Reason: "failed"})
		if !errors.Is(err, seckill.ErrStreamLost) {
			t.Errorf("DeadLetter with the group gone: got %v, want ErrStreamLost", err)
		}
		if got := stock(t, c, 1); got != 9 {
			t.Errorf("stock %d, want 9 (untouched)", got)
		}
	})
}

// TestClaimStaleBehindFreshEntries: stale messages of a dead consumer lie
// behind more fresh ones of a live consumer than one XAUTOCLAIM scans
// (10 × COUNT in Redis 7). ClaimStale must still find them.
func TestClaimStaleBehindFreshEntries(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 20, 12)
		readOrders(t, c, 1, "live", 11) // e0..e10
		readOrders(t, c, 1, "dead", 1)  // e11
		// Long enough that the live consumer's entries, refreshed below,
		// do not turn idle again before ClaimStale on a loaded machine
		// (50 ms did, once, in CI).
		const minIdle = time.Second
		testenv.WaitFor(t, 5*time.Second, "the entries idle", func() bool {
			rows, err := do(t, c, "XPENDING", c.keys.voucher(1).Orders, Group, "IDLE", strconv.FormatInt(minIdle.Milliseconds(), 10), "-", "+", "100").ToArray()
			return err == nil && len(rows) == 12
		})
		ids := make([]string, 11)
		for i := range ids {
			ids[i] = es[i].ID
		}
		if err := c.RefreshClaims(ctx, seckill.Shard{VoucherID: 1}, "live", ids...); err != nil {
			t.Fatal(err)
		}
		got, _, err := c.ClaimStale(ctx, seckill.Shard{VoucherID: 1}, "b", minIdle, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].EntryID != es[11].ID {
			t.Errorf("ClaimStale(count 1) = %v, want the dead consumer's %s", msgs(got), es[11].ID)
		}
	})
}

// loadShardStreams puts v's shards in Redis as loading a voucher with
// shards does: load_voucher.lua on each shard's keys with its part of the
// stock, and the shard's place in meta; and makes c learn v's layout.
func loadShardStreams(t *testing.T, c *Client, v *seckill.Voucher) {
	t.Helper()
	ctx := context.Background()
	c.Learn(v)
	for i := range v.ShardCount() {
		k := c.keys.shard(v.ID, v.ShardTag(i))
		if _, err := loadVoucherScript.runInt(ctx, c, "load a shard", []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.DLQ, k.Cancelled, k.Returned},
			loadVoucherArgs{Stock: seckill.ShardStock(v.Stock, v.ShardCount(), i), Begin: v.BeginTime, End: v.EndTime, Generation: v.Generation}); err != nil {
			t.Fatal(err)
		}
		do(t, c, "HSET", k.Meta, "shards", strconv.Itoa(v.ShardCount()), "index", strconv.Itoa(i), "xgen", "0")
	}
}

// admitOnShard admits user with order on the user's home shard of v, as
// the admission of a voucher with shards does: admit.lua on that shard's
// keys.
func admitOnShard(t *testing.T, c *Client, v *seckill.Voucher, user, order int64) {
	t.Helper()
	k := c.keys.shard(v.ID, v.ShardTag(seckill.HomeShard(user, v.ShardCount())))
	res, err := admitScript.run(context.Background(), c, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.Cancelled},
		admitArgs{UserID: user, OrderID: order, VoucherID: k.ID, Append: true, Generation: v.Generation}).AsIntSlice()
	if err != nil || len(res) == 0 || res[0] != admitted {
		t.Fatalf("admit user %d on shard %d: %v, %v", user, seckill.HomeShard(user, v.ShardCount()), res, err)
	}
}

// TestShardedStreams: each shard of a voucher with shards has its own
// order stream and group, read, acknowledged, claimed, dead-lettered and
// dropped through the Shard it is named by; the buyers' home shards hold
// their messages; nothing is written under the voucher's unsharded tag.
func TestShardedStreams(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(7, 30)
		v.Shards = 3
		loadShardStreams(t, c, v)
		shard := func(i int) seckill.Shard { return seckill.Shard{VoucherID: v.ID, Index: i} }
		keys := func(i int) voucherKeys { return c.keys.shard(v.ID, v.ShardTag(i)) }
		// Two buyers or more on each shard.
		homes := make([][]int64, 3)
		for u := int64(1); len(homes[0]) < 2 || len(homes[1]) < 2 || len(homes[2]) < 2; u++ {
			admitOnShard(t, c, v, u, 7000+u)
			i := seckill.HomeShard(u, 3)
			homes[i] = append(homes[i], u)
		}

		read := make([][]seckill.OrderMessage, 3)
		for i := range 3 {
			got, err := c.ReadOrders(ctx, shard(i), "a", 100, 0)
			if err != nil {
				t.Fatalf("ReadOrders(shard %d): %v", i, err)
			}
			var users []int64
			for _, m := range got {
				if m.VoucherID != v.ID || m.Shard != i || m.Err != nil || m.Order.ID != 7000+m.Order.UserID {
					t.Errorf("shard %d's message %+v: want voucher %d, shard %d, well formed", i, m, v.ID, i)
				}
				users = append(users, m.Order.UserID)
			}
			if !slices.Equal(users, homes[i]) {
				t.Errorf("shard %d's stream holds buyers %v, want its home buyers %v", i, users, homes[i])
			}
			read[i] = got
		}
		backlogs := func() []int64 {
			var b []int64
			for i := range 3 {
				n, err := c.Backlog(ctx, shard(i))
				if err != nil {
					t.Fatalf("Backlog(shard %d): %v", i, err)
				}
				b = append(b, n)
			}
			return b
		}
		backlog := backlogs()
		// The embedded server cannot tell the lag, and counts the stream's
		// length instead: there only the changes are compared.
		if want := []int64{int64(len(homes[0])), int64(len(homes[1])), int64(len(homes[2]))}; !c.embedded && !slices.Equal(backlog, want) {
			t.Errorf("backlogs %v, want each shard's own %v", backlog, want)
		}
		if _, err := c.ReadOrders(ctx, shard(3), "a", 100, 0); err == nil {
			t.Error("ReadOrders(shard 3 of 3): no error")
		}

		// Shard 0 acknowledged: its backlog only.
		var ids []string
		for _, m := range read[0] {
			ids = append(ids, m.EntryID)
		}
		if n, err := c.AckOrders(ctx, shard(0), ids...); err != nil || n != int64(len(ids)) {
			t.Fatalf("AckOrders(shard 0) = %d, %v; want %d", n, err, len(ids))
		}
		if got, want := backlogs(), []int64{backlog[0] - int64(len(ids)), backlog[1], backlog[2]}; !slices.Equal(got, want) {
			t.Errorf("backlogs after shard 0's ack: %v, want %v", got, want)
		}

		// Shard 1's messages, idle, are claimed from its group alone.
		claimed, _, err := c.ClaimStale(ctx, shard(1), "b", 0, 100)
		if err != nil || len(claimed) != len(homes[1]) {
			t.Fatalf("ClaimStale(shard 1) = %d messages, %v; want %d", len(claimed), err, len(homes[1]))
		}
		for _, m := range claimed {
			if m.Shard != 1 {
				t.Errorf("claimed from shard 1: %+v", m)
			}
		}
		if held, err := c.Held(ctx, shard(1), "b", claimed[0].EntryID); err != nil || !held[claimed[0].EntryID] {
			t.Errorf("Held(shard 1, b) = %v, %v; want the claimed message", held, err)
		}

		// A dead letter of shard 2 gives its unit and slot back to shard 2.
		stocks := func() []int64 {
			var s []int64
			for i := range 3 {
				n, _ := do(t, c, "GET", keys(i).Stock).AsInt64()
				s = append(s, n)
			}
			return s
		}
		before := stocks()
		dead := read[2][0]
		if ok, err := c.DeadLetter(ctx, dead, seckill.DeadLetter{Reason: "r"}); err != nil || !ok {
			t.Fatalf("DeadLetter(shard 2's message) = %v, %v", ok, err)
		}
		if got, want := stocks(), []int64{before[0], before[1], before[2] + 1}; !slices.Equal(got, want) {
			t.Errorf("stocks after a dead letter of shard 2: %v, want %v", got, want)
		}
		if err := do(t, c, "HGET", keys(2).Buyers, strconv.FormatInt(dead.Order.UserID, 10)).Error(); !rueidis.IsRedisNil(err) {
			t.Errorf("the dead letter's buyer still holds a slot on shard 2 (%v)", err)
		}
		recs, err := c.DeadLetters(ctx, v.ID)
		if err != nil || len(recs) != 1 || recs[0].Shard != 2 || recs[0].OrderID != dead.Order.ID || !recs[0].StockReturned {
			t.Fatalf("DeadLetters = %+v, %v; want shard 2's, order %d, stock returned", recs, err, dead.Order.ID)
		}
		if n, err := c.RemoveDeadLetters(ctx, shard(0), recs[0].EntryID); err != nil || n != 0 {
			t.Errorf("RemoveDeadLetters(shard 0, shard 2's entry) = %d, %v; want 0", n, err)
		}
		if n, err := c.RemoveDeadLetters(ctx, shard(recs[0].Shard), recs[0].EntryID); err != nil || n != 1 {
			t.Errorf("RemoveDeadLetters(shard 2's entry) = %d, %v; want 1", n, err)
		}

		// Orders Redis did not know are counted on their buyers' homes.
		var lost []*seckill.Order
		want := stocks()
		for u := int64(100); u < 110; u++ {
			lost = append(lost, &seckill.Order{ID: 9000 + u, UserID: u, VoucherID: v.ID})
			want[seckill.HomeShard(u, 3)]--
		}
		if err := c.CountPersisted(ctx, v.ID, lost); err != nil {
			t.Fatal(err)
		}
		if got := stocks(); !slices.Equal(got, want) {
			t.Errorf("stocks after counting 10 persisted orders: %v, want %v", got, want)
		}
		for _, o := range lost {
			k := keys(seckill.HomeShard(o.UserID, 3))
			if got, _ := do(t, c, "HGET", k.Buyers, strconv.FormatInt(o.UserID, 10)).ToString(); got != strconv.FormatInt(o.ID, 10) {
				t.Errorf("buyer %d's slot on its home shard holds %q, want %d", o.UserID, got, o.ID)
			}
		}

		// Dropped only once every shard's stream is drained; then all of
		// every shard goes, transfers included.
		do(t, c, "HSET", keys(1).Xout, "t1", "2:1:0:0")
		do(t, c, "HSET", keys(2).Xin, "t1", "1")
		if dropped, err := c.DropVoucher(ctx, v.ID); err != nil || dropped {
			t.Fatalf("DropVoucher with shards 1 and 2 pending = %v, %v; want false", dropped, err)
		}
		// Shard 0, drained, stays too: dropped alone, its reader would find
		// its stream gone and stop reading the voucher's other shards.
		if n, _ := do(t, c, "EXISTS", keys(0).Stock, keys(0).Orders).AsInt64(); n != 2 {
			t.Errorf("shard 0 dropped while shards 1 and 2 are not drained")
		}
		for i, msgs := range [][]seckill.OrderMessage{claimed, read[2][1:]} {
			var ids []string
			for _, m := range msgs {
				ids = append(ids, m.EntryID)
			}
			if _, err := c.AckOrders(ctx, shard(i+1), ids...); err != nil {
				t.Fatal(err)
			}
		}
		if dropped, err := c.DropVoucher(ctx, v.ID); err != nil || !dropped {
			t.Fatalf("DropVoucher drained = %v, %v; want true", dropped, err)
		}
		for i := range 3 {
			k := keys(i)
			if n, _ := do(t, c, "EXISTS", k.Stock).AsInt64(); n != 0 {
				t.Errorf("shard %d's stock is left after the drop", i)
			}
			for _, key := range []string{k.Buyers, k.Orders, k.DLQ, k.Xout, k.Xin} {
				if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
					t.Errorf("%s is left after the drop", key)
				}
			}
			if n, _ := do(t, c, "HEXISTS", k.Meta, "dropped").AsInt64(); n != 1 {
				t.Errorf("shard %d's meta is no tombstone after the drop", i)
			}
		}

		// A voucher with shards keeps nothing under its unsharded tag.
		u := c.keys.voucher(v.ID)
		for _, key := range []string{u.Stock, u.Meta, u.Buyers, u.Orders, u.DLQ, u.Changes} {
			if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
				t.Errorf("%s was written for a voucher with shards", key)
			}
		}
	})
}
