package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// subBuckets is how many buckets each power of two is split into: values
// are kept to within 1/64 (1.6%) of their size, as HdrHistogram does with
// two significant digits, in a fixed 64 × 64 array of counters.
const subBuckets = 64

// histogram counts latencies in log-linear buckets of microseconds,
// safely from many goroutines at once. Its zero value is empty.
type histogram struct {
	counts [64 * subBuckets]atomic.Int64
	n      atomic.Int64
	sum    atomic.Int64 // microseconds
	max    atomic.Int64
}

// bucket returns the bucket of v microseconds.
func bucket(v int64) int {
	if v < subBuckets {
		return int(max(v, 0))
	}
	exp := bits.Len64(uint64(v)) - 7 // v >> exp is in [64, 128)
	return (exp+1)*subBuckets + int(v>>exp) - subBuckets
}

// bucketValue returns the largest value of bucket i, in microseconds.
func bucketValue(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	exp := i/subBuckets - 1
	return (int64(i%subBuckets+subBuckets)+1)<<exp - 1
}

// record counts one latency.
func (h *histogram) record(d time.Duration) {
	v := d.Microseconds()
	h.counts[bucket(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// snapshot is a copy of a histogram's counts.
type snapshot struct {
	counts [64 * subBuckets]int64
	n, sum int64
	max    int64
}

// take copies the histogram; with reset it also empties it (for the
// latencies of the last second).
func (h *histogram) take(reset bool) *snapshot {
	s := &snapshot{}
	for i := range h.counts {
		if reset {
			s.counts[i] = h.counts[i].Swap(0)
		} else {
			s.counts[i] = h.counts[i].Load()
		}
	}
	if reset {
		s.n, s.sum, s.max = h.n.Swap(0), h.sum.Swap(0), h.max.Swap(0)
	} else {
		s.n, s.sum, s.max = h.n.Load(), h.sum.Load(), h.max.Load()
	}
	return s
}

// quantile returns the latency below which a fraction q of the counts lie.
func (s *snapshot) quantile(q float64) time.Duration {
	if s.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(s.n)))
	var seen int64
	for i, c := range s.counts {
		if seen += c; seen >= rank {
			return time.Duration(min(bucketValue(i), s.max)) * time.Microsecond
		}
	}
	return time.Duration(s.max) * time.Microsecond
}

// mean returns the mean latency.
func (s *snapshot) mean() time.Duration {
	if s.n == 0 {
		return 0
	}
	return time.Duration(s.sum/s.n) * time.Microsecond
}
