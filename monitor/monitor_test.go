package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/monitor/monitortest"
)

// TestMetricsAfterSale: 30 buyers click twice for a stock of 10; every
// metric of the sale says so, during and after the drain.
func TestMetricsAfterSale(t *testing.T) {
	s := monitortest.Start(t, monitortest.Options{})
	v := s.Voucher(10)
	id := strconv.FormatInt(v.ID, 10)
	results := s.Run(v.ID, 100, 30, 2)
	// Each of 10 buyers is admitted once and told duplicate_order the
	// second time; the other 20 are told sold_out twice.
	if diff := cmp.Diff(map[string]int{"admitted": 10, "duplicate_order": 10, "sold_out": 40}, results); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
	reg := s.Registry
	monitortest.Want(t, reg, 10, "seckill_admissions_total", "result", "admitted")
	monitortest.Want(t, reg, 10, "seckill_admissions_total", "result", "duplicate_order")
	monitortest.Want(t, reg, 40, "seckill_admissions_total", "result", "sold_out")
	monitortest.Want(t, reg, 0, "seckill_admissions_total", "result", "not_started")
	monitortest.Want(t, reg, 60, "seckill_admission_duration_seconds")

	s.WaitCreated(v.ID, 10)
	monitortest.Want(t, reg, 10, "seckill_orders_persisted_total")
	monitortest.Want(t, reg, 10, "seckill_voucher_orders_created", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_voucher_remaining", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_voucher_orders_pending", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_voucher_drift", "voucher", id)
	monitortest.Want(t, reg, 10, "seckill_voucher_initial_stock", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_stream_pending", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_stream_lag", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_stream_oldest_pending_age_seconds", "voucher", id)
	monitortest.Want(t, reg, 1, "seckill_stream_consumers", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_dead_letters", "voucher", id)
	monitortest.Want(t, reg, 1, "seckill_stats_up")
	if n, _ := monitortest.Value(t, reg, "seckill_stream_length", "voucher", id); n > 10 {
		t.Errorf("stream length %v, want at most the 10 admitted (the rest trimmed)", n)
	}

	// The admin API's snapshot says the same, with this server's
	// admissions per second.
	status, body := s.Do("GET", "/api/admin/stats", s.AdminToken)
	if status != 200 {
		t.Fatalf("GET /api/admin/stats = %d %s", status, body)
	}
	var st struct {
		Vouchers []struct {
			ID                                    string
			Stock, InitialStock, Created, Pending int64
			Remaining                             *int64
			Drift                                 int64
			Stream                                struct{ Pending, Consumers, DeadLetters int64 }
		}
		Admissions []struct{ Counts map[string]int64 }
		Workers    struct{ Consumer, Mode string }
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(st.Vouchers) != 1 {
		t.Fatalf("stats name %d vouchers, want 1: %s", len(st.Vouchers), body)
	}
	got := st.Vouchers[0]
	if got.ID != id || got.Stock != 0 || got.InitialStock != 10 || got.Created != 10 || got.Pending != 0 ||
		got.Remaining == nil || *got.Remaining != 0 || got.Drift != 0 || got.Stream.Consumers != 1 {
		t.Errorf("voucher stats: %s", body)
	}
	total := map[string]int64{}
	for _, sec := range st.Admissions {
		for r, n := range sec.Counts {
			total[r] += n
		}
	}
	if diff := cmp.Diff(map[string]int64{"admitted": 10, "duplicate_order": 10, "sold_out": 40}, total); diff != "" {
		t.Errorf("admissions in the last minutes (-want +got):\n%s", diff)
	}
	if len(st.Admissions) != 300 {
		t.Errorf("%d seconds of admissions, want 300", len(st.Admissions))
	}
	if st.Workers.Consumer != s.Consumer || st.Workers.Mode != "stream" {
		t.Errorf("workers = %+v, want consumer %s, mode stream", st.Workers, s.Consumer)
	}
}

// TestMetricsBacklog: with the workers held back, the admitted orders wait
// in the stream, and the gauges follow them through a delivery, a commit
// not yet acknowledged, a stuck message, a dead letter and the drain.
func TestMetricsBacklog(t *testing.T) {
	ctx := context.Background()
	s := monitortest.Start(t, monitortest.Options{HoldWorkers: true})
	v := s.Voucher(10)
	id := strconv.FormatInt(v.ID, 10)
	if diff := cmp.Diff(map[string]int{"admitted": 10, "sold_out": 5}, s.Run(v.ID, 1, 15, 1)); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
	reg := s.Registry
	want := func(stage string, values map[string]float64) {
		t.Helper()
		for name, n := range values {
			if got, ok := monitortest.Value(t, reg, name, "voucher", id); !ok || got != n {
				t.Errorf("%s: %s = %v (present %v), want %v", stage, name, got, ok, n)
			}
		}
	}
	want("held", map[string]float64{
		"seckill_stream_length": 10, "seckill_stream_lag": 10, "seckill_stream_pending": 0,
		"seckill_voucher_orders_pending": 10, "seckill_voucher_remaining": 0, "seckill_voucher_orders_created": 0,
		"seckill_voucher_drift": 0, "seckill_stream_consumers": 0, "seckill_dead_letters": 0,
	})

	// A consumer takes 3; one of them has sat with it for 45s.
	msgs := s.Deliver(v.ID, "stuck", 3)
	s.Redis("XCLAIM", s.OrdersKey(v.ID), "workers", "stuck", "0", msgs[0].EntryID, "IDLE", "45000")
	want("delivered", map[string]float64{
		"seckill_stream_lag": 7, "seckill_stream_pending": 3, "seckill_voucher_orders_pending": 10,
		"seckill_stream_consumers": 1, "seckill_voucher_drift": 0,
	})
	if age, _ := monitortest.Value(t, reg, "seckill_stream_oldest_pending_age_seconds", "voucher", id); age < 45 || age > 60 {
		t.Errorf("oldest pending age %vs, want 45s", age)
	}

	// One is committed to the database, not yet acknowledged: created, and
	// to the gauges, which do not look up each pending entry's order, still
	// pending (a passing drift of -1 until it is acknowledged, below);
	// Stats looks it up: not pending.
	o := msgs[2].Order
	if _, err := s.Store.SaveOrders(ctx, []*seckill.Order{&o}); err != nil {
		t.Fatal(err)
	}
	want("committed", map[string]float64{
		"seckill_stream_pending": 3, "seckill_voucher_orders_created": 1, "seckill_voucher_orders_pending": 10,
		"seckill_voucher_drift": -1,
	})
	stats := func(stage string, created, pending, failed int64) {
		t.Helper()
		st, err := s.Monitor.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Vouchers) != 1 {
			t.Fatalf("%s: Stats: %+v, want voucher %d", stage, st.Vouchers, v.ID)
		}
		if vs := st.Vouchers[0]; vs.Created != created || vs.Pending != pending || vs.Failed != failed || vs.Drift != 0 {
			t.Errorf("%s: Stats: created %d, pending %d, failed %d, drift %d; want %d, %d, %d, 0", stage, vs.Created, vs.Pending, vs.Failed, vs.Drift, created, pending, failed)
		}
	}
	stats("committed", 1, 9, 0)

	// One goes to the dead letters, its stock back on sale.
	s.DeadLetter(msgs[1])
	want("dead letter", map[string]float64{
		"seckill_dead_letters": 1, "seckill_voucher_orders_failed": 1, "seckill_voucher_remaining": 1, "seckill_stream_pending": 2,
		"seckill_stream_length": 9, "seckill_voucher_orders_pending": 9, "seckill_voucher_drift": -1,
	})
	stats("dead letter", 1, 8, 1)

	// The workers drain the rest: the 7 undelivered, and the 2 stuck ones
	// by reclaim (one already in the database).
	s.StartWorkers()
	s.WaitCreated(v.ID, 9)
	want("drained", map[string]float64{
		"seckill_voucher_orders_created": 9, "seckill_voucher_remaining": 1, "seckill_voucher_orders_pending": 0,
		"seckill_voucher_drift": 0, "seckill_dead_letters": 1, "seckill_stream_pending": 0, "seckill_stream_lag": 0,
	})
	monitortest.Want(t, reg, 8, "seckill_orders_persisted_total")
	monitortest.Want(t, reg, 1, "seckill_orders_redelivered_total")
	monitortest.Want(t, reg, 2, "seckill_orders_reclaimed_total")
	// Every message the workers settled was in one batch: the 7 undelivered
	// and the 2 reclaimed.
	monitortest.Want(t, reg, 9, "seckill_order_batch_size_sum")
	if n, _ := monitortest.Value(t, reg, "seckill_order_batch_size"); n < 1 || n > 9 {
		t.Errorf("seckill_order_batch_size counted %v batches; want 1 to 9", n)
	}
	if n, _ := monitortest.Value(t, reg, "seckill_order_batch_seconds"); n < 1 || n > 9 {
		t.Errorf("seckill_order_batch_seconds counted %v batches; want 1 to 9", n)
	}
}

// TestScrapeCost: a scrape's Redis work does not grow with the backlog.
// With 12,000 orders delivered and not acknowledged (a dead instance's, or
// a stalled database's), scrapes of /metrics, 20 at once, make one read of
// a few commands, counted by the Redis server of the test's own (INFO
// commandstats); before, each read listed 10,000 pending entries and read
// each entry's order (10,000 XRANGEs, 39.5 ms of Redis CPU).
func TestScrapeCost(t *testing.T) {
	redis := faults.StartRedisProc(t)
	s := monitortest.Start(t, monitortest.Options{HoldWorkers: true, RedisURL: "redis://" + redis.Addr + "/0", MetricsCacheFor: time.Minute})
	const backlog = 12_000
	v := s.Voucher(backlog + 8_000)
	id := strconv.FormatInt(v.ID, 10)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range int64(backlog) {
		g.Go(func() error {
			return s.Cache.Admit(context.Background(), seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: i + 1, OrderID: 1<<40 + i})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	s.Deliver(v.ID, "held", backlog)

	before := commandStats(t, redis)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if status, body := s.Do("GET", "/metrics", ""); status != 200 {
				t.Errorf("GET /metrics = %d %.200s", status, body)
			}
		})
	}
	wg.Wait()
	after := commandStats(t, redis)
	// The commands a read of the voucher makes, then or now; the service's
	// others (the node lease's renewals, say) are left out.
	reads := []string{"multi", "exec", "get", "hlen", "xlen", "xinfo|groups", "xinfo|consumers", "xpending", "xrange"}
	calls := map[string]string{}
	var total, usec int64
	for _, name := range reads {
		n, d := after[name].calls-before[name].calls, after[name].usec-before[name].usec
		if n == 0 {
			continue
		}
		calls[name] = fmt.Sprintf("%d calls %d µs", n, d)
		total += n
		// EXEC's time is the MULTI's, its commands' included.
		if name == "exec" || name == "xrange" {
			usec += d
		}
	}
	t.Logf("20 scrapes with %d orders pending: %d Redis commands, %d µs of Redis CPU: %v", backlog, total, usec, calls)
	// One read: a MULTI of 7 commands.
	if total > 10 {
		t.Errorf("20 scrapes with %d orders pending made %d Redis commands (%v); want one read of 9", backlog, total, calls)
	}
	reg := s.Registry
	monitortest.Want(t, reg, backlog, "seckill_stream_pending", "voucher", id)
	monitortest.Want(t, reg, backlog, "seckill_voucher_orders_pending", "voucher", id)
	monitortest.Want(t, reg, 8_000, "seckill_voucher_remaining", "voucher", id)
	monitortest.Want(t, reg, 0, "seckill_voucher_drift", "voucher", id)
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats of the test's Redis, by command.
func commandStats(t *testing.T, p *faults.RedisProc) map[string]commandStat {
	t.Helper()
	info := p.Info("commandstats")
	if info == "" {
		t.Fatal("INFO commandstats: no answer")
	}
	out := map[string]commandStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st commandStat
		for f := range strings.SplitSeq(fields, ",") {
			k, val, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		out[name] = st
	}
	return out
}
