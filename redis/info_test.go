package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
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

// shardFixture writes one shard's state under its keys as the scripts
// would leave it: stock (none if negative), the buyers, an order entry per
// buyer, the workers' group (if group) of which consumer read the first
// read entries, dead letters, and xout's transfers (id -> value).
type shardFixture struct {
	stock   int64
	buyers  []int64
	group   bool
	read    int
	dead    int
	xout    map[string]string
	orderID func(user int64) int64
}

func (f shardFixture) write(t *testing.T, c *Client, voucherID int64, k *voucherKeys, consumer string) {
	t.Helper()
	if f.stock >= 0 {
		do(t, c, "SET", k.Stock, strconv.FormatInt(f.stock, 10))
	}
	for _, u := range f.buyers {
		user := strconv.FormatInt(u, 10)
		do(t, c, "HSET", k.Buyers, user, "1")
		do(t, c, "XADD", k.Orders, "*", "id", strconv.FormatInt(f.orderID(u), 10), "user", user,
			"voucher", strconv.FormatInt(voucherID, 10), "at", "1700000000000")
	}
	if f.group {
		do(t, c, "XGROUP", "CREATE", k.Orders, Group, "0", "MKSTREAM")
	}
	if f.read > 0 {
		do(t, c, "XREADGROUP", "GROUP", Group, consumer, "COUNT", strconv.Itoa(f.read), "STREAMS", k.Orders, ">")
	}
	for range f.dead {
		do(t, c, "XADD", k.DLQ, "*", "reason", "test")
	}
	for id, v := range f.xout {
		do(t, c, "HSET", k.Xout, id, v)
	}
}

// TestStateSharded: a sharded voucher's state is its shards', each with
// its tag, master, stock, buyers, stream and transfers out, and their sums;
// Summary sums them alike.
func TestStateSharded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(7, 12)
		v.Shards = 3
		l := c.Learn(v)
		order := func(u int64) int64 { return 7000 + u }
		fixtures := []shardFixture{
			{stock: 4, buyers: []int64{1, 2}, group: true, read: 1, dead: 1, orderID: order,
				xout: map[string]string{"t1": "1:3:1700000000000:0", "t2": "2:2:1700000000000:0"}},
			{stock: 0, buyers: []int64{3}, group: true, read: 1, orderID: order},
			{stock: -1, orderID: order}, // not loaded: lost, or not yet rebuilt
		}
		for i, f := range fixtures {
			f.write(t, c, 7, l.shards[i], "w1")
		}
		topo, err := c.Topology(ctx)
		if err != nil {
			t.Fatal(err)
		}
		master := func(i int) string { return topo.KeyMaster(l.shards[i].Stock) }
		want := &seckill.CacheState{
			Loaded: false, Buyers: 3, Length: 3, Pending: 2, Lag: nil, DeadLetters: 1,
			PendingOrders: []int64{7001, 7003},
			Consumers:     []seckill.StreamConsumer{{Name: "w1", Pending: 2}},
			Shards: []seckill.ShardState{
				{Index: 0, Tag: "v7.0", Node: master(0), Loaded: true, Remaining: 4, Buyers: 2, Length: 2, Pending: 1, Lag: ptr(1), DeadLetters: 1, TransfersOut: 2, TransferredOut: 5},
				{Index: 1, Tag: "v7.1", Node: master(1), Loaded: true, Remaining: 0, Buyers: 1, Length: 1, Pending: 1, Lag: ptr(0)},
				{Index: 2, Tag: "v7.2", Node: master(2)},
			},
		}
		ignore := cmp.Options{cmpopts.IgnoreFields(seckill.StreamConsumer{}, "Idle"), cmpopts.IgnoreFields(seckill.CacheState{}, "OldestPending")}
		if diff := cmp.Diff(want, state(t, c, 7, defaultInfoLimits), ignore); diff != "" {
			t.Errorf("a shard not loaded (-want +got):\n%s", diff)
		}
		for i := range want.Shards {
			if want.Shards[i].Node == "" {
				t.Errorf("shard %d: no master", i)
			}
		}

		// The last shard loaded: the voucher is, and its figures add up.
		fixtures[2] = shardFixture{stock: 6, group: true}
		fixtures[2].write(t, c, 7, l.shards[2], "w1")
		want.Loaded, want.Remaining, want.Lag = true, 10, ptr(1)
		want.Shards[2] = seckill.ShardState{Index: 2, Tag: "v7.2", Node: master(2), Loaded: true, Remaining: 6, Lag: ptr(0)}
		if diff := cmp.Diff(want, state(t, c, 7, defaultInfoLimits), ignore); diff != "" {
			t.Errorf("every shard loaded (-want +got):\n%s", diff)
		}
		sum, err := c.Summary(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		want.PendingOrders, want.Unlisted, want.Bounded = nil, 2, true
		if diff := cmp.Diff(want, sum, ignore); diff != "" {
			t.Errorf("Summary (-want +got):\n%s", diff)
		}

		// An unsharded voucher has no shards listed, and its node.
		admitN(t, c, 1, 10, 2)
		if st := state(t, c, 1, defaultInfoLimits); st.Shards != nil || st.Node == "" || st.Remaining != 8 {
			t.Errorf("unsharded voucher: %+v; want no shards, a node, 8 remaining", st)
		}
	})
}

// TestStateShardMoved: on a Cluster, each shard of a voucher names the
// master that holds it, from the slot map: a shard whose slot is moved to
// another master (resharding) is read there, and shows its new master.
func TestStateShardMoved(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	c := openCluster(t, cl)
	masters := cl.Masters(t)
	// A tag per master, as placement chooses them: shard i on master i.
	v := onSale(9, 30)
	v.Shards = 3
	for i, m := range masters {
		for n := 0; ; n++ {
			tag := fmt.Sprintf("gtest.%d.%d", i, n)
			if cl.MasterOf(t, c.keys.shard(9, tag).Stock).Addr == m.Addr {
				v.ShardTags = append(v.ShardTags, tag)
				break
			}
		}
	}
	l := c.Learn(v)
	for i, k := range l.shards {
		shardFixture{stock: int64(10 + i), group: true}.write(t, c, 9, k, "w1")
	}
	nodes := func() []string {
		t.Helper()
		st := state(t, c, 9, defaultInfoLimits)
		var out []string
		for _, sh := range st.Shards {
			out = append(out, sh.Node)
		}
		if st.Remaining != 33 {
			t.Errorf("remaining %d; want 33, every shard's", st.Remaining)
		}
		return out
	}
	want := []string{masters[0].Addr, masters[1].Addr, masters[2].Addr}
	if diff := cmp.Diff(want, nodes()); diff != "" {
		t.Errorf("the shards' masters (-want +got):\n%s", diff)
	}

	cl.MoveSlot(t, faults.KeySlot(l.shards[0].Stock), masters[1])
	want[0] = masters[1].Addr
	testenv.WaitFor(t, defaultWait, "shard 0 to show its new master", func() bool {
		return cmp.Equal(want, nodes())
	})
}
