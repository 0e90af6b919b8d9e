package http

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
)

// admissionResults are the results of a buy that the admissions count on
// their own: admitted, and the error codes a buy answers. Any other result
// counts as "other" in the per-second ring (the Prometheus counter keeps
// its name: the codes come from one fixed table).
var admissionResults = [...]string{
	"admitted", "sold_out", "duplicate_order", "not_started", "ended", "paused",
	"rate_limited", "unavailable", "voucher_not_found", "invalid_argument", "internal",
}

// otherResult is the ring's slot for a result not in admissionResults.
const otherResult = len(admissionResults)

// ringSeconds is how many seconds of admissions the ring keeps: 5 minutes.
const ringSeconds = 300

// admissions counts buys by result, where they happen: a Prometheus counter
// and latency histogram, and a ring of the last minutes' counts per second
// for the stats snapshot. Recording allocates nothing and takes no lock.
type admissions struct {
	total    *prometheus.CounterVec
	counters [len(admissionResults)]prometheus.Counter
	duration prometheus.Histogram
	now      func() time.Time
	// ring holds, per second s, at ring[s%ringSeconds], a counter per
	// result. Each counter packs the second it counts (high 32 bits) and
	// its count (low 32 bits), so a counter of an older second restarts
	// at one with a compare-and-swap, and a reader tells stale counts.
	ring [ringSeconds][len(admissionResults) + 1]atomic.Uint64
}

func newAdmissions(reg prometheus.Registerer) (*admissions, error) {
	a := &admissions{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_admissions_total",
			Help: "Buy requests answered, by result: admitted, or the error code (sold_out, duplicate_order, not_started, ended, rate_limited, unavailable, ...).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_admission_duration_seconds",
			Help: "Time to decide a buy request, from the handler's start to its answer's result.",
			// About a millisecond through Redis, less from the sold-out
			// memory; the tail (a slow Redis, a database in the sync mode)
			// matters.
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		now: time.Now,
	}
	// Every result's series exists from the start, at 0: rates and alerts
	// need no special case for a result not seen yet.
	for i, r := range admissionResults {
		a.counters[i] = a.total.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{a.total, a.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("http: register admission metrics: %w", err)
		}
	}
	return a, nil
}

// resultIndex returns result's index in admissionResults, or otherResult.
func resultIndex(result string) int {
	for i, r := range admissionResults {
		if r == result {
			return i
		}
	}
	return otherResult
}

// record counts one admission's result and latency.
func (a *admissions) record(result string, d time.Duration) {
	i := resultIndex(result)
	if i == otherResult {
		a.total.WithLabelValues(result).Inc()
	} else {
		a.counters[i].Inc()
	}
	a.duration.Observe(d.Seconds())

	sec := uint64(uint32(a.now().Unix()))
	c := &a.ring[sec%ringSeconds][i]
	for {
		v := c.Load()
		next := sec<<32 | 1
		if v>>32 == sec {
			next = v + 1
		}
		if c.CompareAndSwap(v, next) {
			return
		}
	}
}

// seconds returns the counts of the last ringSeconds seconds, oldest
// first, the current (partial) second last. A second's Counts holds the
// results counted in it, "other" for results outside the known ones.
func (a *admissions) seconds() []seckill.AdmissionSecond {
	now := a.now().Unix()
	out := make([]seckill.AdmissionSecond, 0, ringSeconds)
	for s := now - ringSeconds + 1; s <= now; s++ {
		sec := uint64(uint32(s))
		slot := &a.ring[sec%ringSeconds]
		counts := map[string]int64{}
		for i := range slot {
			v := slot[i].Load()
			if v>>32 != sec || v&0xffffffff == 0 {
				continue
			}
			name := "other"
			if i < otherResult {
				name = admissionResults[i]
			}
			counts[name] = int64(v & 0xffffffff)
		}
		out = append(out, seckill.AdmissionSecond{Time: time.Unix(s, 0).UTC(), Counts: counts})
	}
	return out
}
