package http

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestAdmissions(t testing.TB, now *atomic.Int64) *admissions {
	t.Helper()
	a, err := newAdmissions(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return time.Unix(now.Load(), 0) }
	return a
}

// counts returns the ring's non-empty seconds, by offset from the first
// second of the window.
func counts(a *admissions) map[int]map[string]int64 {
	out := map[int]map[string]int64{}
	for i, s := range a.seconds() {
		if len(s.Counts) > 0 {
			out[i] = s.Counts
		}
	}
	return out
}

func TestAdmissionsRing(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	start := int64(1_800_000_000)
	now.Store(start)
	a := newTestAdmissions(t, &now)
	a.record("admitted", time.Millisecond)
	a.record("admitted", time.Millisecond)
	a.record("sold_out", time.Microsecond)
	now.Add(1)
	a.record("duplicate_order", time.Millisecond)
	a.record("order_not_found", time.Millisecond) // not a buy's result

	secs := a.seconds()
	if len(secs) != ringSeconds {
		t.Fatalf("%d seconds, want %d", len(secs), ringSeconds)
	}
	if first, last := secs[0].Time, secs[len(secs)-1].Time; !last.Equal(time.Unix(start+1, 0)) || !first.Equal(time.Unix(start+1-ringSeconds+1, 0)) {
		t.Errorf("window %v..%v, want the last %d seconds up to now", first, last, ringSeconds)
	}
	want := map[int]map[string]int64{
		ringSeconds - 2: {"admitted": 2, "sold_out": 1},
		ringSeconds - 1: {"duplicate_order": 1, "other": 1},
	}
	if diff := cmp.Diff(want, counts(a)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// The Prometheus counter and histogram count the same.
	if got := testutil.ToFloat64(a.counters[0]); got != 2 {
		t.Errorf("admitted counter = %v, want 2", got)
	}
	if got := testutil.ToFloat64(a.total.WithLabelValues("order_not_found")); got != 1 {
		t.Errorf("order_not_found counter = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(a.duration); n != 1 {
		t.Errorf("%d histograms, want 1", n)
	}

	// Five minutes later the first second has left the window; its slot,
	// reused, counts the new second only.
	now.Store(start + ringSeconds)
	a.record("ended", time.Millisecond)
	want = map[int]map[string]int64{
		0:               {"duplicate_order": 1, "other": 1},
		ringSeconds - 1: {"ended": 1},
	}
	if diff := cmp.Diff(want, counts(a)); diff != "" {
		t.Errorf("5 minutes later (-want +got):\n%s", diff)
	}
	now.Add(ringSeconds)
	if got := counts(a); len(got) != 0 {
		t.Errorf("10 minutes later: %v, want nothing", got)
	}
}

// TestAdmissionsConcurrent: no count is lost under contention, across a
// change of second.
func TestAdmissionsConcurrent(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(1_800_000_000)
	a := newTestAdmissions(t, &now)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				if g == 0 && i == 500 {
					now.Add(1)
				}
				a.record("admitted", time.Millisecond)
			}
		})
	}
	wg.Wait()
	var total int64
	for _, s := range a.seconds() {
		total += s.Counts["admitted"]
	}
	if total != 8000 {
		t.Errorf("ring counts %d admissions, want 8000", total)
	}
	if got := testutil.ToFloat64(a.counters[0]); got != 8000 {
		t.Errorf("counter = %v, want 8000", got)
	}
}

// Not parallel: AllocsPerRun counts the allocations of every goroutine.
func TestAdmissionsRecordAllocs(t *testing.T) {
	var now atomic.Int64
	now.Store(1_800_000_000)
	a := newTestAdmissions(t, &now)
	if n := testing.AllocsPerRun(1000, func() { a.record("sold_out", time.Millisecond) }); n != 0 {
		t.Errorf("record allocates %v times a call, want 0", n)
	}
}

func BenchmarkAdmissionsRecord(b *testing.B) {
	a, err := newAdmissions(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.record("sold_out", time.Millisecond)
		}
	})
}
