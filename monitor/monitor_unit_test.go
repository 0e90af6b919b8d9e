package monitor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/seckill/seckill"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakes stand in for the database and Redis: the unit tests of what the
// monitor makes of what it reads. (monitor_test.go reads the real ones.)
type fakes struct {
	mu       sync.Mutex
	ids      []int64
	vouchers map[int64]*seckill.Voucher
	created  map[int64]int64
	failed   map[int64]int64
	stored   map[int64]seckill.OrderStatus
	infos    map[int64]*seckill.CacheState
	err      error
	reads    int
	// calls counts the calls of each method that reads.
	calls map[string]int
	// block, if set, holds each read of Redis until it is closed.
	block chan struct{}
}

func (f *fakes) called(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[name]++
}

func (f *fakes) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakes) OpenVoucherIDs(context.Context) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.ids, f.err
}

func (f *fakes) Voucher(_ context.Context, id int64) (*seckill.Voucher, error) {
	if v, ok := f.vouchers[id]; ok {
		return v, nil
	}
	return nil, seckill.ErrVoucherNotFound
}

func (f *fakes) CountOrders(_ context.Context, id int64) (int64, error) {
	f.called("CountOrders")
	return f.created[id], nil
}

func (f *fakes) LifecycleCounts(context.Context, int64) (*seckill.LifecycleCounts, error) {
	return &seckill.LifecycleCounts{}, nil
}

func (f *fakes) CountFailedOrders(_ context.Context, id int64) (int64, error) {
	return f.failed[id], nil
}

func (f *fakes) OrderStatuses(_ context.Context, ids []int64) (map[int64]seckill.OrderStatus, error) {
	f.called("OrderStatuses")
	out := map[int64]seckill.OrderStatus{}
	for _, id := range ids {
		if s, ok := f.stored[id]; ok {
			out[id] = s
		}
	}
	return out, nil
}

func (f *fakes) State(_ context.Context, id int64) (*seckill.CacheState, error) {
	f.called("State")
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return f.infos[id], nil
}

// Summary is State without the pending entries' orders, as redis.Client's.
func (f *fakes) Summary(_ context.Context, id int64) (*seckill.CacheState, error) {
	f.called("Summary")
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	st := *f.infos[id]
	st.PendingOrders, st.Unlisted, st.Bounded = nil, st.Pending, st.Pending > 0
	return &st, nil
}

func ptr(n int64) *int64 { return &n }

// clock is a frozen time that tests move.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newFakes() *fakes {
	return &fakes{
		ids: []int64{7},
		vouchers: map[int64]*seckill.Voucher{
			7: {ID: 7, Title: "seven", Stock: 96, InitialStock: 100},
			// Not open: OpenVoucherIDs does not name it, so it has no series.
			8: {ID: 8, Title: "eight", Stock: 10, InitialStock: 10},
		},
		created: map[int64]int64{7: 4},
		failed:  map[int64]int64{7: 1},
		// Order 11 is pending and committed already (not yet acknowledged).
		stored: map[int64]seckill.OrderStatus{11: seckill.OrderCreated},
		infos: map[int64]*seckill.CacheState{7: {
			Loaded: true, Remaining: 80, Length: 16, Pending: 3, Lag: ptr(12),
			OldestPending: 1500 * time.Millisecond,
			Consumers: []seckill.StreamConsumer{
				{Name: "a", Pending: 3, Idle: 2 * time.Second},
				{Name: "dead", Idle: 5 * time.Minute},
			},
			PendingOrders: []int64{10, 11, 12},
			DeadLetters:   1,
		}},
	}
}

func newMonitor(t *testing.T, f *fakes, cfg Config) *Monitor {
	t.Helper()
	cfg.Vouchers, cfg.Store, cfg.Streams = f, f, f
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCollect(t *testing.T) {
	t.Parallel()
	f := newFakes()
	m := newMonitor(t, f, Config{CacheFor: -1, MetricsCacheFor: -1})
	// pending = lag 12 + the 3 pending entries (a scrape does not look
	// up that 11 is in the database; Stats does); created = 100 - 96;
	// drift = 100 - (80 + 4 + 15) = 1.
	want := `
# HELP seckill_dead_letters Entries in the voucher's dead-letter stream, waiting for an operator.
# TYPE seckill_dead_letters gauge
seckill_dead_letters{voucher="7"} 1
# HELP seckill_stats_up 1 if the last read of the open vouchers in Redis and the database (shared by the scrapes of a few seconds) succeeded, else 0 (and no voucher series).
# TYPE seckill_stats_up gauge
seckill_stats_up 1
# HELP seckill_stream_consumers Consumers (service instances) that read the voucher's order stream within the last minute.
# TYPE seckill_stream_consumers gauge
seckill_stream_consumers{voucher="7"} 1
# HELP seckill_stream_lag Order messages not yet delivered to the workers; absent when Redis cannot tell.
# TYPE seckill_stream_lag gauge
seckill_stream_lag{voucher="7"} 12
# HELP seckill_stream_length Entries in the voucher's order stream: not yet delivered, delivered and not acknowledged, and settled but not yet trimmed.
# TYPE seckill_stream_length gauge
seckill_stream_length{voucher="7"} 16
# HELP seckill_stream_oldest_pending_age_seconds The longest a pending order message has gone since its delivery or claim refresh (of the first 100 pending and the consumers holding any: the true figure or less); above the claim lease no live worker holds it.
# TYPE seckill_stream_oldest_pending_age_seconds gauge
seckill_stream_oldest_pending_age_seconds{voucher="7"} 1.5
# HELP seckill_stream_pending Order messages delivered to a worker and not yet acknowledged.
# TYPE seckill_stream_pending gauge
seckill_stream_pending{voucher="7"} 3
# HELP seckill_voucher_drift Initial stock - (remaining + created + pending): stock Redis and the database disagree about; 0 when they agree.
# TYPE seckill_voucher_drift gauge
seckill_voucher_drift{voucher="7"} 1
# HELP seckill_voucher_initial_stock The voucher's stock when created.
# TYPE seckill_voucher_initial_stock gauge
seckill_voucher_initial_stock{voucher="7"} 100
# HELP seckill_voucher_orders_created The voucher's created orders in the database (its initial stock less the database's stock).
# TYPE seckill_voucher_orders_created gauge
seckill_voucher_orders_created{voucher="7"} 4
# HELP seckill_voucher_orders_failed The voucher's failed orders in the database (dead-lettered, or refused by the database).
# TYPE seckill_voucher_orders_failed gauge
seckill_voucher_orders_failed{voucher="7"} 1
# HELP seckill_voucher_orders_pending The voucher's admitted orders queued and not yet acknowledged (an order just committed counts here and in created until its acknowledgement).
# TYPE seckill_voucher_orders_pending gauge
seckill_voucher_orders_pending{voucher="7"} 15
# HELP seckill_voucher_remaining Stock left to admit, in Redis (the database's in the sync mode); absent when Redis does not hold the voucher.
# TYPE seckill_voucher_remaining gauge
seckill_voucher_remaining{voucher="7"} 80
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestCollectShards: a sharded voucher has a series of each shard gauge per
// shard (none for a figure Redis cannot tell), and an unsharded one none.
func TestCollectShards(t *testing.T) {
	t.Parallel()
	f := newFakes()
	m := newMonitor(t, f, Config{CacheFor: -1, MetricsCacheFor: -1})
	shardGauges := []string{"seckill_shard_remaining", "seckill_shard_buyers", "seckill_shard_stream_length", "seckill_shard_stream_lag", "seckill_shard_transfers_out"}
	if n := testutil.CollectAndCount(m, shardGauges...); n != 0 {
		t.Errorf("an unsharded voucher: %d shard series, want none", n)
	}
	f.infos[7].Shards = []seckill.ShardState{
		{Index: 0, Loaded: true, Remaining: 30, Buyers: 5, Length: 6, Lag: ptr(1), TransfersOut: 2},
		{Index: 1, Buyers: 2, Length: 3},
	}
	want := `
# HELP seckill_shard_buyers Buyers admitted on a shard of a sharded voucher: those whose home shard it is.
# TYPE seckill_shard_buyers gauge
seckill_shard_buyers{shard="0",voucher="7"} 5
seckill_shard_buyers{shard="1",voucher="7"} 2
# HELP seckill_shard_remaining Stock left to admit on a shard of a sharded voucher, in Redis; absent when Redis does not hold the shard.
# TYPE seckill_shard_remaining gauge
seckill_shard_remaining{shard="0",voucher="7"} 30
# HELP seckill_shard_stream_lag Order messages of a shard of a sharded voucher not yet delivered to the workers; absent when Redis cannot tell.
# TYPE seckill_shard_stream_lag gauge
seckill_shard_stream_lag{shard="0",voucher="7"} 1
# HELP seckill_shard_stream_length Entries in the order stream of a shard of a sharded voucher.
# TYPE seckill_shard_stream_length gauge
seckill_shard_stream_length{shard="0",voucher="7"} 6
seckill_shard_stream_length{shard="1",voucher="7"} 3
# HELP seckill_shard_transfers_out Transfers of stock out of a shard of a sharded voucher not yet settled: in flight, or received and not yet settled.
# TYPE seckill_shard_transfers_out gauge
seckill_shard_transfers_out{shard="0",voucher="7"} 2
seckill_shard_transfers_out{shard="1",voucher="7"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), shardGauges...); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestCollectUnknown: a lag Redis cannot tell and a voucher Redis lost
// have no series, never a 0 that would read as "nothing waiting"; the
// pending orders are then the entries not pending, at most.
func TestCollectUnknown(t *testing.T) {
	t.Parallel()
	f := newFakes()
	info := f.infos[7]
	info.Lag, info.Loaded, info.Remaining = nil, false, 0
	m := newMonitor(t, f, Config{CacheFor: -1, MetricsCacheFor: -1})
	if n := testutil.CollectAndCount(m, "seckill_stream_lag", "seckill_voucher_remaining"); n != 0 {
		t.Errorf("%d series of lag and remaining, want none", n)
	}
	want := `
# HELP seckill_voucher_orders_pending The voucher's admitted orders queued and not yet acknowledged (an order just committed counts here and in created until its acknowledgement).
# TYPE seckill_voucher_orders_pending gauge
seckill_voucher_orders_pending{voucher="7"} 16
# HELP seckill_voucher_drift Initial stock - (remaining + created + pending): stock Redis and the database disagree about; 0 when they agree.
# TYPE seckill_voucher_drift gauge
seckill_voucher_drift{voucher="7"} 80
`
	// pending = (16 - 3) not pending + the 3 pending; drift = 100 - (0 + 4 + 16).
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "seckill_voucher_orders_pending", "seckill_voucher_drift"); err != nil {
		t.Error(err)
	}
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if vs := st.Vouchers[0]; vs.Remaining != nil || vs.Stream.Lag != nil {
		t.Errorf("Stats: remaining %v, lag %v; want nil, nil", vs.Remaining, vs.Stream.Lag)
	}
}

// TestCollectReadFails: the scrape goes on with seckill_stats_up 0.
func TestCollectReadFails(t *testing.T) {
	t.Parallel()
	f := newFakes()
	f.err = errors.New("redis down")
	m := newMonitor(t, f, Config{CacheFor: -1, MetricsCacheFor: -1})
	want := `
# HELP seckill_stats_up 1 if the last read of the open vouchers in Redis and the database (shared by the scrapes of a few seconds) succeeded, else 0 (and no voucher series).
# TYPE seckill_stats_up gauge
seckill_stats_up 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, err := m.Stats(context.Background()); err == nil {
		t.Error("Stats with Redis down: no error")
	}
}

// TestCollectCached: scrapes within MetricsCacheFor (default 10s, under
// the 15s scrape interval of deploy/prometheus) share one read, so that a
// second Prometheus, or a flood of requests to /metrics, costs nothing
// more; Stats keeps its own second.
func TestCollectCached(t *testing.T) {
	t.Parallel()
	f := newFakes()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	m := newMonitor(t, f, Config{Now: c.Now})
	for range 3 {
		testutil.CollectAndCount(m)
	}
	if f.reads != 1 {
		t.Errorf("3 scrapes at once read %d times, want 1", f.reads)
	}
	f.infos[7].DeadLetters = 5
	deadLetters := func(n string) string {
		return `
# HELP seckill_dead_letters Entries in the voucher's dead-letter stream, waiting for an operator.
# TYPE seckill_dead_letters gauge
seckill_dead_letters{voucher="7"} ` + n + "\n"
	}
	for _, d := range []time.Duration{time.Second, 4 * time.Second, 4999 * time.Millisecond} {
		c.add(d)
		if err := testutil.CollectAndCompare(m, strings.NewReader(deadLetters("1")), "seckill_dead_letters"); err != nil {
			t.Errorf("within 10s, want the cached read: %v", err)
		}
	}
	if f.reads != 1 {
		t.Errorf("scrapes over 9.999s read %d times, want 1", f.reads)
	}
	c.add(time.Millisecond)
	if err := testutil.CollectAndCompare(m, strings.NewReader(deadLetters("5")), "seckill_dead_letters"); err != nil {
		t.Errorf("10s later, want a new read: %v", err)
	}
	if f.reads != 2 {
		t.Errorf("reads = %d, want 2", f.reads)
	}
	// Stats reads on its own, and keeps its read a second.
	if _, err := m.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.add(999 * time.Millisecond)
	if _, err := m.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.reads != 3 {
		t.Errorf("reads = %d after two Stats within a second, want 3", f.reads)
	}
}

// TestCollectConcurrent: scrapes at the same moment share one read, which
// the first of them started.
func TestCollectConcurrent(t *testing.T) {
	t.Parallel()
	f := newFakes()
	f.block = make(chan struct{})
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	m := newMonitor(t, f, Config{Now: c.Now})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { testutil.CollectAndCount(m) })
	}
	// Let the read finish once it has begun: the others wait for it, or
	// come after it and take what it read.
	for f.count("Summary")+f.count("State") == 0 {
		time.Sleep(time.Millisecond)
	}
	close(f.block)
	wg.Wait()
	if n := f.count("Summary") + f.count("State"); f.reads != 1 || n != 1 {
		t.Errorf("50 scrapes at once: %d reads of the open vouchers, %d of the voucher; want 1, 1", f.reads, n)
	}
}

// TestCollectReadsCounts: a scrape reads what Redis and the database
// count, never each pending entry's order (State, OrderStatuses) nor a
// count of the voucher's orders (CountOrders); Stats does, to be exact.
func TestCollectReadsCounts(t *testing.T) {
	t.Parallel()
	f := newFakes()
	m := newMonitor(t, f, Config{CacheFor: -1, MetricsCacheFor: -1})
	testutil.CollectAndCount(m)
	got := map[string]int{}
	for _, name := range []string{"Summary", "State", "OrderStatuses", "CountOrders"} {
		got[name] = f.count(name)
	}
	if diff := cmp.Diff(map[string]int{"Summary": 1, "State": 0, "OrderStatuses": 0, "CountOrders": 0}, got); diff != "" {
		t.Errorf("reads of a scrape (-want +got):\n%s", diff)
	}
	if _, err := m.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("State") != 1 || f.count("OrderStatuses") != 1 || f.count("CountOrders") != 1 {
		t.Errorf("Stats: %v; want a State, an OrderStatuses and a CountOrders", f.calls)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	f := newFakes()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	m := newMonitor(t, f, Config{Now: c.Now, Consumer: "me", CacheFor: -1})
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := &seckill.Stats{
		Time: c.now,
		Vouchers: []seckill.VoucherStats{{
			Voucher: f.vouchers[7], Remaining: ptr(80), Created: 4, Failed: 1, Pending: 14, Drift: 2,
			Stream: seckill.StreamStats{Length: 16, Pending: 3, Lag: ptr(12), OldestAge: 1500 * time.Millisecond, Consumers: 1, DeadLetters: 1},
		}},
		Workers: seckill.WorkerStats{Consumer: "me", Mode: seckill.ModeStream},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// With the workers' own report.
	m = newMonitor(t, f, Config{Consumer: "me", Workers: workerInfo{Busy: 2, Allowed: 4, Breaker: "closed"}})
	st, err = m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (seckill.WorkerStats{Consumer: "me", Mode: seckill.ModeStream, Busy: 2, Allowed: 4, Breaker: "closed"}); st.Workers != want {
		t.Errorf("Workers = %+v, want %+v", st.Workers, want)
	}
}

type workerInfo seckill.WorkerStats

func (w workerInfo) WorkerStats() seckill.WorkerStats { return seckill.WorkerStats(w) }

// TestSyncMode: the database is the sale; there are no streams to read.
func TestSyncMode(t *testing.T) {
	t.Parallel()
	f := newFakes()
	f.infos = nil
	m := newMonitor(t, f, Config{Mode: seckill.ModeSync, CacheFor: -1, MetricsCacheFor: -1})
	want := `
# HELP seckill_voucher_remaining Stock left to admit, in Redis (the database's in the sync mode); absent when Redis does not hold the voucher.
# TYPE seckill_voucher_remaining gauge
seckill_voucher_remaining{voucher="7"} 96
# HELP seckill_voucher_drift Initial stock - (remaining + created + pending): stock Redis and the database disagree about; 0 when they agree.
# TYPE seckill_voucher_drift gauge
seckill_voucher_drift{voucher="7"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "seckill_voucher_remaining", "seckill_voucher_drift"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "seckill_stream_length"); n != 0 {
		t.Errorf("%d stream series in the sync mode, want none", n)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Vouchers") || !strings.Contains(err.Error(), "Streams") {
		t.Errorf("New(Config{}) = %v, want errors naming the missing fields", err)
	}
	f := newFakes()
	if _, err := New(Config{Vouchers: f, Store: f, Mode: seckill.ModeSync}); err != nil {
		t.Errorf("sync mode without Streams: %v", err)
	}
	if _, err := New(Config{Vouchers: f, Store: f, Streams: f, Mode: "fast"}); err == nil {
		t.Error("mode fast: no error")
	}
}

// TestCollectFailureCached: a read that fails serves its failure for the
// cache's time too: a flood of scrapes while a read fails fast (a
// CLUSTERDOWN) made a read of every open voucher each (found by review).
func TestCollectFailureCached(t *testing.T) {
	t.Parallel()
	f := newFakes()
	f.err = errors.New("CLUSTERDOWN")
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	m := newMonitor(t, f, Config{Now: c.Now})
	for range 20 {
		testutil.CollectAndCount(m)
		c.add(100 * time.Millisecond)
	}
	if f.reads != 1 {
		t.Errorf("20 scrapes over 2s of a failing read read %d times, want 1", f.reads)
	}
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	c.add(8 * time.Second)
	if err := testutil.CollectAndCompare(m, strings.NewReader("# HELP seckill_stats_up 1 if the last read of the open vouchers in Redis and the database (shared by the scrapes of a few seconds) succeeded, else 0 (and no voucher series).\n# TYPE seckill_stats_up gauge\nseckill_stats_up 1\n"), "seckill_stats_up"); err != nil {
		t.Errorf("10s after the failure, want a new read that succeeds: %v", err)
	}
}
