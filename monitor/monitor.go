// Package monitor watches a sale for its operators. A Monitor reads, for
// each open voucher, the database's record and counts and Redis's stock and
// order stream, and serves them two ways: as a seckill.Stats snapshot (the
// admin API, the admin page, `seckill stats`), exact, which looks up the
// order of every pending stream entry; and as Prometheus gauges (the state
// of the sale; the events are counted where they happen, in the http and
// worker packages), from reads whose cost does not grow with the backlog,
// made at most once per Config.MetricsCacheFor however many scrape.
//
// Every instance of the service reads the same Redis and database, so each
// reports the same sale-wide gauges: aggregate them with max by (voucher).
package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill"
)

// Vouchers names the vouchers to watch (seckill.VoucherService).
type Vouchers interface {
	// OpenVoucherIDs returns the vouchers on sale or ended within seckill.DefaultRetention.
	OpenVoucherIDs(ctx context.Context) ([]int64, error)
}

// Store is what the monitor reads of the database.
type Store interface {
	Voucher(ctx context.Context, id int64) (*seckill.Voucher, error)
	CountOrders(ctx context.Context, voucherID int64) (int64, error)
	CountFailedOrders(ctx context.Context, voucherID int64) (int64, error)
	OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error)
	LifecycleCounts(ctx context.Context, voucherID int64) (*seckill.LifecycleCounts, error)
}

// Streams reads what Redis holds of a voucher's sale: its stock and order
// stream (redis.Client).
type Streams interface {
	// State lists the orders of the pending entries, for Stats.
	State(ctx context.Context, voucherID int64) (*seckill.CacheState, error)
	// Summary reads only what Redis counts, at a cost that does not grow
	// with the backlog, for the gauges: PendingOrders is empty and every
	// pending entry is Unlisted.
	Summary(ctx context.Context, voucherID int64) (*seckill.CacheState, error)
}

// WorkerInfo tells how this instance's workers are doing.
type WorkerInfo interface {
	WorkerStats() seckill.WorkerStats
}

// Config configures a Monitor. Zero fields take the defaults in their
// comments.
type Config struct {
	// Vouchers, Store and Streams are where the monitor reads. Required,
	// but Streams in the sync mode, whose ledger is the database: it is
	// dropped there, and a voucher's remaining stock is its row's.
	Vouchers Vouchers
	Store    Store
	Streams  Streams
	// Workers, if set, reports this instance's workers; otherwise Stats
	// reports Consumer and Mode only.
	Workers  WorkerInfo
	Consumer string
	// Mode is how the service takes orders. In the sync mode a voucher's
	// remaining stock is the database's and there are no streams. In the
	// queue mode the orders in the in-memory queue show as drift until
	// they are written. Default seckill.ModeStream.
	Mode seckill.Mode
	// Currency is the service's default currency: that of the vouchers
	// made before prices (seckill.VoucherService.Currency). Default
	// seckill.DefaultCurrency.
	Currency string
	// ActiveWithin is how recently a consumer must have read its stream to
	// count as one: a running instance reads every few seconds, and the
	// workers remove consumers idle for twice the claim lease. Default 60s
	// (twice the default lease).
	ActiveWithin time.Duration
	// Timeout bounds a read of Redis and the database. Default 5s.
	Timeout time.Duration
	// CacheFor is how long a read of Stats serves again: a page refreshed
	// by several admins costs one read. Default 1s; negative: no cache.
	CacheFor time.Duration
	// MetricsCacheFor is how long a read of the gauges serves scrapes: any
	// number of scrapers, or a flood of requests to /metrics, cost one
	// read per MetricsCacheFor. Default 10s, below Prometheus's usual
	// scrape interval (15s in deploy/prometheus), so that each scrape of
	// one Prometheus still sees a fresh read; negative: no cache.
	MetricsCacheFor time.Duration
	// Now returns the current time; tests replace it. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = seckill.ModeStream
	}
	if c.Mode == seckill.ModeSync {
		// The database is the sale: there are no streams to read.
		c.Streams = nil
	}
	if c.ActiveWithin <= 0 {
		c.ActiveWithin = 60 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.CacheFor == 0 {
		c.CacheFor = time.Second
	}
	if c.MetricsCacheFor == 0 {
		c.MetricsCacheFor = DefaultMetricsCacheFor
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Vouchers == nil {
		errs = append(errs, errors.New("monitor: Config.Vouchers is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("monitor: Config.Store is required"))
	}
	if c.Streams == nil && c.Mode != seckill.ModeSync {
		errs = append(errs, errors.New("monitor: Config.Streams is required but in the sync mode"))
	}
	if _, err := seckill.ParseMode(string(c.Mode)); err != nil {
		errs = append(errs, fmt.Errorf("monitor: %w", err))
	}
	return errors.Join(errs...)
}

// DefaultMetricsCacheFor is Config.MetricsCacheFor's default.
const DefaultMetricsCacheFor = 10 * time.Second

// Monitor reads the state of the open vouchers. It implements
// seckill.StatsSource and prometheus.Collector.
type Monitor struct {
	cfg    Config
	reads  singleflight.Group
	stats  cache // Stats: exact
	counts cache // the gauges: cheap
	gauges gauges
}

// cache holds the last reading of one kind, which serves for ttl; key names
// its read among the monitor's singleflight calls.
type cache struct {
	key  string
	ttl  time.Duration
	read func(ctx context.Context, id int64) (*seckill.VoucherStats, error)
	mu   sync.Mutex
	last *reading
	// failed is the last read's error, at failedAt: it answers for ttl
	// too, so that a read that fails fast (a CLUSTERDOWN) is not made
	// again by every scrape of a flood (found by review: 4,689 reads in a
	// second).
	failed   error
	failedAt time.Time
}

var _ seckill.StatsSource = (*Monitor)(nil)

// reading is one read of every open voucher.
type reading struct {
	at       time.Time
	vouchers []seckill.VoucherStats
}

// New returns a monitor of cfg.
func New(cfg Config) (*Monitor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Monitor{cfg: cfg, gauges: newGauges()}
	m.stats = cache{key: "stats", ttl: cfg.CacheFor, read: m.readVoucher}
	m.counts = cache{key: "counts", ttl: cfg.MetricsCacheFor, read: m.countVoucher}
	return m, nil
}

// Stats returns a snapshot of the open vouchers and of this instance's
// workers. Its Admissions are nil: they are counted where the requests
// are served (the http package adds its own).
func (m *Monitor) Stats(ctx context.Context) (*seckill.Stats, error) {
	r, err := m.read(ctx, &m.stats)
	if err != nil {
		return nil, err
	}
	st := &seckill.Stats{Time: r.at, Vouchers: make([]seckill.VoucherStats, len(r.vouchers))}
	copy(st.Vouchers, r.vouchers)
	st.Workers = seckill.WorkerStats{Consumer: m.cfg.Consumer, Mode: m.cfg.Mode}
	if m.cfg.Workers != nil {
		st.Workers = m.cfg.Workers.WorkerStats()
		if st.Workers.Consumer == "" {
			st.Workers.Consumer = m.cfg.Consumer
		}
		if st.Workers.Mode == "" {
			st.Workers.Mode = m.cfg.Mode
		}
	}
	return st, nil
}

// read returns c's reading of at most c.ttl ago, or makes one; callers at
// the same moment share it.
func (m *Monitor) read(ctx context.Context, c *cache) (*reading, error) {
	if last, err := m.fresh(c); last != nil || err != nil {
		return last, err
	}
	ch := m.reads.DoChan(c.key, func() (any, error) {
		// A read that ended between the look above and this call serves:
		// a flood of callers makes one read, not one per moment it ends.
		if last, err := m.fresh(c); last != nil || err != nil {
			return last, err
		}
		// The read is shared: it does not end with the first caller.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.Timeout)
		defer cancel()
		r, err := m.readAll(rctx, c.read)
		c.mu.Lock()
		if err != nil {
			c.failed, c.failedAt = err, m.cfg.Now()
		} else {
			c.last, c.failed = r, nil
		}
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return r, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*reading), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fresh returns c's last reading if it is younger than c.ttl, or the
// last read's error if that is; else nil, nil.
func (m *Monitor) fresh(c *cache) (*reading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := m.cfg.Now()
	if c.failed != nil && c.ttl > 0 && now.Sub(c.failedAt) < c.ttl {
		return nil, c.failed
	}
	if c.last != nil && c.ttl > 0 && now.Sub(c.last.at) < c.ttl {
		return c.last, nil
	}
	return nil, nil
}

// readAll reads every open voucher with read, a few at a time.
func (m *Monitor) readAll(ctx context.Context, read func(ctx context.Context, id int64) (*seckill.VoucherStats, error)) (*reading, error) {
	at := m.cfg.Now()
	ids, err := m.cfg.Vouchers.OpenVoucherIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	out := make([]*seckill.VoucherStats, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() error {
			vs, err := read(gctx, id)
			if err != nil {
				return fmt.Errorf("monitor: voucher %d: %w", id, err)
			}
			out[i] = vs
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	r := &reading{at: at, vouchers: make([]seckill.VoucherStats, 0, len(out))}
	for _, vs := range out {
		if vs != nil {
			r.vouchers = append(r.vouchers, *vs)
		}
	}
	return r, nil
}

// currency is the default currency (Config.Currency).
func (m *Monitor) currency() string {
	if m.cfg.Currency == "" {
		return seckill.DefaultCurrency
	}
	return m.cfg.Currency
}

// readVoucher reads one voucher, Redis first, then the database, and
// compares them as seckill.Reconciler does (seckill.Compare). A busy sale
// can show a passing drift; a second look clears it.
func (m *Monitor) readVoucher(ctx context.Context, id int64) (*seckill.VoucherStats, error) {
	v, err := m.cfg.Store.Voucher(ctx, id)
	if errors.Is(err, seckill.ErrVoucherNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if v.Currency == "" {
		v.Currency = m.currency()
	}
	vs := &seckill.VoucherStats{Voucher: v}
	if vs.Failed, err = m.cfg.Store.CountFailedOrders(ctx, id); err != nil {
		return nil, err
	}
	// The database is the sync mode's sale: what remains is its stock, and
	// nothing is queued.
	st := &seckill.CacheState{Loaded: true, Remaining: v.Stock}
	var stored map[int64]seckill.OrderStatus
	if m.cfg.Streams != nil {
		if st, err = m.cfg.Streams.State(ctx, id); err != nil {
			return nil, err
		}
		// Pending entries the database holds are committed and about to be
		// acknowledged: not pending any more.
		if stored, err = m.cfg.Store.OrderStatuses(ctx, st.PendingOrders); err != nil {
			return nil, err
		}
	}
	// Before the orders, as the reconciler counts: an order cancelled in
	// between counts in neither, never in both.
	var lc seckill.LifecycleCounts
	if v.PayWithin > 0 {
		c, err := m.cfg.Store.LifecycleCounts(ctx, id)
		if err != nil {
			return nil, err
		}
		lc = *c
	}
	created, err := m.cfg.Store.CountOrders(ctx, id)
	if err != nil {
		return nil, err
	}
	rec := seckill.Compare(v, st, created, stored)
	if m.cfg.Streams != nil {
		// A cancelled order's unit the cache has not taken back yet.
		rec.Drift -= lc.Unreturned
	}
	m.fill(vs, st, rec)
	vs.AwaitingPayment, vs.Paid, vs.Cancelled, vs.Returned = lc.Created, lc.Paid, lc.Cancelled, lc.Cancelled-lc.Unreturned
	return vs, nil
}

// countVoucher reads one voucher for the gauges, at a cost that does not
// grow with its orders: Redis's counts (Streams.Summary), the voucher's row
// and its failed orders. Its created orders are its initial stock less the
// database's stock, which each created order takes in the transaction that
// writes it (seckill.OrderStore) and nothing else changes: one row read,
// not a count of a million rows. Every pending entry counts as pending, so
// an order committed and not yet acknowledged shows in created and in
// pending for that moment, a passing drift below zero of at most the
// batches in flight; Stats and `seckill reconcile` look up each entry's
// order and show none.
func (m *Monitor) countVoucher(ctx context.Context, id int64) (*seckill.VoucherStats, error) {
	// Redis first, as readVoucher: an order persisted in between then
	// counts in the database (and maybe pending), never in neither.
	st := &seckill.CacheState{}
	if m.cfg.Streams != nil {
		var err error
		if st, err = m.cfg.Streams.Summary(ctx, id); err != nil {
			return nil, err
		}
	}
	v, err := m.cfg.Store.Voucher(ctx, id)
	if errors.Is(err, seckill.ErrVoucherNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if v.Currency == "" {
		v.Currency = m.currency()
	}
	vs := &seckill.VoucherStats{Voucher: v}
	if vs.Failed, err = m.cfg.Store.CountFailedOrders(ctx, id); err != nil {
		return nil, err
	}
	if m.cfg.Streams == nil {
		st = &seckill.CacheState{Loaded: true, Remaining: v.Stock}
	}
	counted := *st
	counted.PendingOrders, counted.Unlisted = nil, st.Pending
	m.fill(vs, &counted, seckill.Compare(v, &counted, v.InitialStock-v.Stock, nil))
	return vs, nil
}

// fill sets vs from the cache's state st and its comparison rec.
func (m *Monitor) fill(vs *seckill.VoucherStats, st *seckill.CacheState, rec *seckill.Reconciliation) {
	vs.Created, vs.Pending, vs.Drift = rec.Orders, rec.Pending, rec.Drift
	vs.RedisNode = st.Node
	if rec.Loaded {
		vs.Remaining = &rec.Remaining
	}
	if m.cfg.Streams == nil {
		return
	}
	vs.Shards = st.Shards
	vs.Stream = seckill.StreamStats{
		Length:      st.Length,
		Pending:     st.Pending,
		Lag:         st.Lag,
		OldestAge:   st.OldestPending,
		Consumers:   m.activeConsumers(st),
		DeadLetters: st.DeadLetters,
	}
}

// activeConsumers counts the consumers that read their stream within
// ActiveWithin: a consumer whose instance died stays in the group until
// another instance removes it, and none does if all died.
func (m *Monitor) activeConsumers(st *seckill.CacheState) int64 {
	var n int64
	for _, c := range st.Consumers {
		if c.Idle <= m.cfg.ActiveWithin {
			n++
		}
	}
	return n
}
