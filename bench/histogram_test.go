package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	t.Parallel()
	prev := -1
	for v := int64(0); v < 1<<22; v += 1 + v/97 {
		b := bucket(v)
		if b < prev {
			t.Fatalf("bucket(%d) = %d after %d: not monotonic", v, b, prev)
		}
		prev = b
		if hi := bucketValue(b); v > hi || float64(hi-v) > float64(v)/subBuckets+1 {
			t.Fatalf("value %d in bucket %d whose top is %d: not within 1/%d", v, b, hi, subBuckets)
		}
	}
}

// TestQuantiles compares the histogram's quantiles with the exact ones of
// a skewed sample: each within 2%.
func TestQuantiles(t *testing.T) {
	t.Parallel()
	var h histogram
	r := rand.New(rand.NewPCG(1, 2))
	var vals []time.Duration
	for range 100_000 {
		d := time.Duration(r.ExpFloat64()*800) * time.Microsecond
		if r.IntN(100) == 0 {
			d *= 50 // a tail
		}
		vals = append(vals, d)
		h.record(d)
	}
	slices.Sort(vals)
	s := h.take(false)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(q*float64(len(vals)))-1]
		got := s.quantile(q)
		if diff := float64(got-exact) / float64(exact); diff < -0.02 || diff > 0.02 {
			t.Errorf("p%v = %v, exact %v (%.1f%% off)", q*100, got, exact, diff*100)
		}
	}
	if s.n != 100_000 || s.max != vals[len(vals)-1].Microseconds() {
		t.Errorf("n %d, max %dµs; want 100000, %v", s.n, s.max, vals[len(vals)-1])
	}
	if h.take(true).n != 100_000 || h.take(false).n != 0 {
		t.Error("take(true) does not empty the histogram")
	}
}
