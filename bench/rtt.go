package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Added is what a delaying proxy really adds to a round trip, measured:
// timers wake late, so it is not what was asked. Median and P99 are those
// quantiles of the round trips through the proxy less the median of the
// direct ones: what a typical and a slow trip through the proxy cost
// beyond a typical direct one.
type Added struct {
	Asked  time.Duration `json:"askedNs"`
	Median time.Duration `json:"medianNs"`
	P99    time.Duration `json:"p99Ns"`
	// Direct is the direct round trip's median, and Samples the round
	// trips timed each way.
	Direct  time.Duration `json:"directMedianNs"`
	Samples int           `json:"samples"`
}

func (a Added) String() string {
	return fmt.Sprintf("asked %v: adds %v median, %v p99 (%d round trips each way; direct %v median)",
		a.Asked, a.Median.Round(time.Microsecond), a.P99.Round(time.Microsecond), a.Samples, a.Direct.Round(time.Microsecond))
}

// MeasureAdded times n round trips direct and n through a proxy that was
// asked to add asked, alternated so that both see the same machine, and
// returns what the proxy added. Each round trip should be one small
// request and its answer on a connection kept open (e.g. a database ping
// on a pool of one), so that a dial is not timed.
func MeasureAdded(ctx context.Context, n int, asked time.Duration, direct, via func(context.Context) error) (Added, error) {
	if n < 1 {
		return Added{}, errors.New("bench: measure the added round trip: want 1 or more round trips")
	}
	// One untimed round trip each: the connections are dialled.
	if err := errors.Join(direct(ctx), via(ctx)); err != nil {
		return Added{}, fmt.Errorf("bench: measure the added round trip: %w", err)
	}
	d, v := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for range n {
		for _, s := range []struct {
			rt  func(context.Context) error
			out *[]time.Duration
		}{{direct, &d}, {via, &v}} {
			start := time.Now()
			if err := s.rt(ctx); err != nil {
				return Added{}, fmt.Errorf("bench: measure the added round trip: %w", err)
			}
			*s.out = append(*s.out, time.Since(start))
		}
	}
	slices.Sort(d)
	slices.Sort(v)
	return Added{
		Asked: asked, Median: quantile(v, 0.5) - quantile(d, 0.5), P99: quantile(v, 0.99) - quantile(d, 0.5),
		Direct: quantile(d, 0.5), Samples: n,
	}, nil
}

// quantile returns the q quantile of sorted, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
