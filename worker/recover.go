package worker

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/internal/startstop"
)

// PanicCounter returns the counter of panics recovered in the workers'
// goroutines, by where they happened, registered with reg; or the one
// already registered there, so that a pool, a queue and their caller (the
// node lease's renewal, say) count in one.
func PanicCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_worker_panics_total",
		Help: "Panics recovered in the workers' goroutines, by where: each ended one iteration (a batch, a read, a pass of a loop), and the goroutine went on.",
	}, []string{"where"})
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("worker: register metrics: %w", err)
	}
	return c, nil
}

// recoverer keeps a panic in one iteration of a goroutine from killing the
// process: a bug that one message or one pass triggers must not stop the
// orders of every voucher.
type recoverer struct {
	panics *prometheus.CounterVec
	logger *slog.Logger
}

// do runs fn under startstop.Guard and reports whether it returned. A
// panic of fn is logged with its stack and counted as where's; it ends fn
// alone.
func (r recoverer) do(where string, fn func()) (returned bool) {
	err := startstop.Guard(r.logger.With("where", where), "running the workers' "+where, func() error {
		fn()
		return nil
	})
	if err != nil {
		r.panics.WithLabelValues(where).Inc()
	}
	return err == nil
}
