package worker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// persistedCounter counts orders written by the workers of either mode.
func persistedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seckill_orders_persisted_total",
		Help: "Orders written to the database by the workers.",
	})
}

// metrics are the workers' event counters, recorded where the events happen.
type metrics struct {
	persisted        prometheus.Counter
	redelivered      prometheus.Counter
	deadLetters      prometheus.Counter
	doubleAdmissions prometheus.Counter
	reclaimed        prometheus.Counter
	deletedEntries   prometheus.Counter
	streamsLost      prometheus.Counter
	retries          prometheus.Counter
	backpressure     prometheus.Counter
	batchSeconds     prometheus.Histogram
	batchSize        prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		persisted:        persistedCounter(),
		redelivered:      counter("seckill_orders_redelivered_total", "Order messages found already persisted (redeliveries), acknowledged again."),
		deadLetters:      counter("seckill_dead_letters_total", "Order messages moved to the dead letters, their orders failed."),
		doubleAdmissions: counter("seckill_double_admissions_total", "Buyers Redis admitted twice to one voucher (Redis lost data); the second order was dead-lettered."),
		reclaimed:        counter("seckill_orders_reclaimed_total", "Order messages taken over from consumers that stopped."),
		deletedEntries:   counter("seckill_stream_deleted_entries_total", "Pending order messages found deleted from their stream (Redis lost data)."),
		streamsLost:      counter("seckill_streams_lost_total", "Order streams or groups found missing in Redis, and rebuilt."),
		retries:          counter("seckill_worker_retries_total", "Retries after transient failures of the database or Redis."),
		backpressure:     counter("seckill_backpressure_pauses_total", "Times admission to a voucher paused because its order backlog reached the high-water mark."),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seckill_order_batch_seconds",
			Help:    "Time to settle one batch of order messages.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_order_batch_size",
			Help: "Order messages in one batch a worker settled: near --batch-size when the workers are behind, small when they keep up.",
			// 1 to 1,024, doubling: the default batch is 100 and the
			// largest allowed is far above what one transaction should hold.
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
	}
	for _, c := range []prometheus.Collector{m.persisted, m.redelivered, m.deadLetters, m.doubleAdmissions, m.reclaimed, m.deletedEntries, m.streamsLost, m.retries, m.backpressure, m.batchSeconds, m.batchSize} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker: register metrics: %w", err)
		}
	}
	return m, nil
}
