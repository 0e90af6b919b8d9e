package monitor

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// gauges are the descriptions of the state the monitor exports. Each is
// read from Redis and the database per open voucher, at most once per
// MetricsCacheFor, at a cost that does not grow with the backlog.
type gauges struct {
	up, streamLength, streamPending, streamLag, oldestPending, consumers, deadLetters,
	remaining, created, failed, pending, initialStock, drift *prometheus.Desc
	// The shards of a sharded voucher, by voucher and shard: at most
	// seckill.MaxShards series of each per voucher, and none for an
	// unsharded voucher.
	shardRemaining, shardBuyers, shardStreamLength, shardStreamLag, shardTransfersOut *prometheus.Desc
}

func newGauges() gauges {
	voucher := []string{"voucher"}
	shard := []string{"voucher", "shard"}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return gauges{
		up:            desc("seckill_stats_up", "1 if the last read of the open vouchers in Redis and the database (shared by the scrapes of a few seconds) succeeded, else 0 (and no voucher series).", nil),
		streamLength:  desc("seckill_stream_length", "Entries in the voucher's order stream: not yet delivered, delivered and not acknowledged, and settled but not yet trimmed.", voucher),
		streamPending: desc("seckill_stream_pending", "Order messages delivered to a worker and not yet acknowledged.", voucher),
		streamLag:     desc("seckill_stream_lag", "Order messages not yet delivered to the workers; absent when Redis cannot tell.", voucher),
		oldestPending: desc("seckill_stream_oldest_pending_age_seconds", "The longest a pending order message has gone since its delivery or claim refresh (of the first 100 pending and the consumers holding any: the true figure or less); above the claim lease no live worker holds it.", voucher),
		consumers:     desc("seckill_stream_consumers", "Consumers (service instances) that read the voucher's order stream within the last minute.", voucher),
		deadLetters:   desc("seckill_dead_letters", "Entries in the voucher's dead-letter stream, waiting for an operator.", voucher),
		remaining:     desc("seckill_voucher_remaining", "Stock left to admit, in Redis (the database's in the sync mode); absent when Redis does not hold the voucher.", voucher),
		created:       desc("seckill_voucher_orders_created", "The voucher's created orders in the database (its initial stock less the database's stock).", voucher),
		failed:        desc("seckill_voucher_orders_failed", "The voucher's failed orders in the database (dead-lettered, or refused by the database).", voucher),
		pending:       desc("seckill_voucher_orders_pending", "The voucher's admitted orders queued and not yet acknowledged (an order just committed counts here and in created until its acknowledgement).", voucher),
		initialStock:  desc("seckill_voucher_initial_stock", "The voucher's stock when created.", voucher),
		drift:         desc("seckill_voucher_drift", "Initial stock - (remaining + created + pending): stock Redis and the database disagree about; 0 when they agree.", voucher),

		shardRemaining:    desc("seckill_shard_remaining", "Stock left to admit on a shard of a sharded voucher, in Redis; absent when Redis does not hold the shard.", shard),
		shardBuyers:       desc("seckill_shard_buyers", "Buyers admitted on a shard of a sharded voucher: those whose home shard it is.", shard),
		shardStreamLength: desc("seckill_shard_stream_length", "Entries in the order stream of a shard of a sharded voucher.", shard),
		shardStreamLag:    desc("seckill_shard_stream_lag", "Order messages of a shard of a sharded voucher not yet delivered to the workers; absent when Redis cannot tell.", shard),
		shardTransfersOut: desc("seckill_shard_transfers_out", "Transfers of stock out of a shard of a sharded voucher not yet settled: in flight, or received and not yet settled.", shard),
	}
}

// Describe sends the descriptions of the monitor's gauges.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	g := m.gauges
	for _, d := range []*prometheus.Desc{g.up, g.streamLength, g.streamPending, g.streamLag, g.oldestPending, g.consumers,
		g.deadLetters, g.remaining, g.created, g.failed, g.pending, g.initialStock, g.drift,
		g.shardRemaining, g.shardBuyers, g.shardStreamLength, g.shardStreamLag, g.shardTransfersOut} {
		ch <- d
	}
}

// Collect reads the open vouchers' counts (or takes the read of the last
// MetricsCacheFor, or shares the read under way) and sends their gauges. A failed read sends seckill_stats_up 0 and no
// voucher series, rather than failing the whole scrape: the service's other
// metrics matter most when Redis or the database is in trouble.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	r, err := m.read(context.Background(), &m.counts)
	if err != nil {
		m.cfg.Logger.Warn("metrics: could not read the open vouchers", "err", err)
		ch <- prometheus.MustNewConstMetric(m.gauges.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(m.gauges.up, prometheus.GaugeValue, 1)
	g := m.gauges
	for _, vs := range r.vouchers {
		id := strconv.FormatInt(vs.Voucher.ID, 10)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id)
		}
		if m.cfg.Streams != nil {
			s := vs.Stream
			gauge(g.streamLength, float64(s.Length))
			gauge(g.streamPending, float64(s.Pending))
			if s.Lag != nil {
				gauge(g.streamLag, float64(*s.Lag))
			}
			gauge(g.oldestPending, s.OldestAge.Seconds())
			gauge(g.consumers, float64(s.Consumers))
			gauge(g.deadLetters, float64(s.DeadLetters))
		}
		if vs.Remaining != nil {
			gauge(g.remaining, float64(*vs.Remaining))
		}
		gauge(g.created, float64(vs.Created))
		gauge(g.failed, float64(vs.Failed))
		gauge(g.pending, float64(vs.Pending))
		gauge(g.initialStock, float64(vs.Voucher.InitialStock))
		gauge(g.drift, float64(vs.Drift))
		for _, sh := range vs.Shards {
			i := strconv.Itoa(sh.Index)
			shardGauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id, i)
			}
			if sh.Loaded {
				shardGauge(g.shardRemaining, float64(sh.Remaining))
			}
			shardGauge(g.shardBuyers, float64(sh.Buyers))
			shardGauge(g.shardStreamLength, float64(sh.Length))
			if sh.Lag != nil {
				shardGauge(g.shardStreamLag, float64(*sh.Lag))
			}
			shardGauge(g.shardTransfersOut, float64(sh.TransfersOut))
		}
	}
}
