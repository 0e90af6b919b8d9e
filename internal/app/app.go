// Package app wires seckill together: given its adapters (a store, a Redis
// client, the token signer), it builds the domain services, the order-id
// lease, the workers of the mode, the monitor and the HTTP server, and sets
// every collaborator where it is built.
//
// It is the one place the service is assembled: serve, bench and demo run
// it in their process, and the tests that need the whole service run it
// too, so what they test is what runs.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/monitor"
	"github.com/seckill/seckill/orderid"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/soldout"
	"github.com/seckill/seckill/sqlledger"
	"github.com/seckill/seckill/worker"
)

// Config is what the service is built from. Store, Cache, Tokens, Logger
// and, in the stream mode, Stream.Consumer are required; the rest have
// defaults.
type Config struct {
	// Mode is how orders are taken. Default seckill.ModeStream.
	Mode seckill.Mode
	// Store is the database; Cache the Redis client. The caller opens and
	// closes both.
	Store seckill.Store
	Cache *redis.Client
	// Tokens signs and verifies the API's tokens.
	Tokens *auth.Tokens
	// Login is the phone-code login; nil turns it off (both routes answer
	// 503).
	Login  *auth.Login
	Logger *slog.Logger
	// Registry takes every metric of the service and is served at
	// /metrics. Default a new registry.
	Registry *prometheus.Registry

	// HTTP configures the server.
	HTTP sechttp.Config
	// Stream configures the stream mode's workers; Queue the queue mode's.
	// Stream.DrainTimeout and Queue.DrainTimeout default to
	// ShutdownTimeout.
	Stream worker.Config
	Queue  worker.QueueConfig
	// ShutdownTimeout bounds Shutdown: requests in flight, then the
	// workers. Default 15s.
	ShutdownTimeout time.Duration
	// Retention is how long an ended voucher's keys stay in Redis (see
	// seckill.VoucherService). Default the service's.
	Retention time.Duration

	// NoSoldOutCopy turns off the copies of sold-out vouchers' buyers
	// (soldout.Config.Off): every sold-out answer then reads its buyer's
	// slot. They need every instance to run this version's scripts: turn
	// them off while instances of an earlier version still run.
	NoSoldOutCopy bool

	// IDs makes order ids. Default a generator whose node id is leased in
	// Redis.
	IDs seckill.IDGenerator
	// StatsActiveWithin is the monitor's ActiveWithin (see
	// monitor.Config). Default twice the claim lease.
	StatsActiveWithin time.Duration
	// MetricsCacheFor is the monitor's MetricsCacheFor: how long one read
	// of the sale's gauges serves every scrape of /metrics. Default the
	// monitor's (10s).
	MetricsCacheFor time.Duration

	// Payments is the payment provider. Default the fake one
	// (payment.Fake), which pays at once.
	Payments seckill.PaymentProvider
	// Webhook checks the payment provider's signed events; nil: the
	// webhook route answers 503 (the fake provider sends none).
	Webhook sechttp.PaymentWebhook
	// SweepEvery is how often the sweeper cancels the orders not paid by
	// their deadline. Default the sweeper's (1s).
	SweepEvery time.Duration
	// PaymentGrace is how long after its payBy an order whose payment was
	// started before it is held for the provider's confirmation before it
	// is cancelled. Default seckill.DefaultPaymentGrace (5m).
	PaymentGrace time.Duration
	// Challenge configures the challenges of the vouchers that take one
	// (seckill.ChallengeConfig's defaults). ChallengeKey signs them
	// (seckill.ChallengeKey of the token secret, which every instance
	// shares); default a random key of this process, which only it can
	// verify: for one instance alone, and tests.
	Challenge    seckill.ChallengeConfig
	ChallengeKey []byte

	// Currency is the currency of the vouchers created without one and of
	// those made before prices (seckill.VoucherService.Currency): an ISO
	// 4217 code of seckill.Currencies. Default seckill.DefaultCurrency.
	Currency string

	// Test holds what only tests set.
	Test TestConfig
}

// TestConfig holds settings for tests only: no flag sets them, and serve,
// bench and demo leave them zero. Each turns off a safeguard that a test
// with Redis keys of its own does not need, and whose wait or background
// reads would slow it or disturb what it counts.
type TestConfig struct {
	// NoNodeWait makes order ids at once: the node lease skips its
	// FreshWait (see redis.NodeLease). Only where no lease holder
	// predates the test, under a key prefix of its own.
	NoNodeWait bool
	// NoCacheWatch leaves the Redis server unwatched for a restart, a
	// failover or lost data (redisledger.Watch).
	NoCacheWatch bool
	// NoStatsCache makes every read of the admin stats read Redis and the
	// database again (monitor.Config.CacheFor negative).
	NoStatsCache bool
	// Crash is the cancellations' failpoint (seckill.PaymentService.Crash):
	// the crash tests kill the process at a point between a cancellation's
	// writes.
	Crash func(point string)
}

// statsCacheFor is the monitor's CacheFor: its default unless a test turns
// the cache off.
func (t TestConfig) statsCacheFor() time.Duration {
	if t.NoStatsCache {
		return -1
	}
	return 0
}

// withDefaults returns c with every unset setting at its default: the one
// place the defaults are applied.
func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = seckill.ModeStream
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Stream.DrainTimeout <= 0 {
		c.Stream.DrainTimeout = c.ShutdownTimeout
	}
	if c.Queue.DrainTimeout <= 0 {
		c.Queue.DrainTimeout = c.ShutdownTimeout
	}
	if c.Payments == nil {
		c.Payments = payment.Fake{}
	}
	if c.StatsActiveWithin <= 0 {
		// Zero when the lease is the workers' default: the monitor's own
		// default is twice that.
		c.StatsActiveWithin = 2 * c.Stream.Lease
	}
	return c
}

// validate reports the first setting the service cannot be built with.
// It runs after withDefaults, before New starts anything.
func (c Config) validate() error {
	if c.Store == nil || c.Cache == nil || c.Tokens == nil || c.Logger == nil {
		return errors.New("app: Config.Store, Cache, Tokens and Logger are required")
	}
	if _, err := seckill.ParseMode(string(c.Mode)); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if c.Mode == seckill.ModeStream && c.Stream.Consumer == "" {
		return errors.New("app: Config.Stream.Consumer is required in the stream mode")
	}
	if c.Currency != "" {
		if err := seckill.CheckCurrency("--currency", c.Currency); err != nil {
			return err
		}
	}
	return CheckWaitReplicas(c.Mode, c.Cache.WaitReplicas())
}

// CheckWaitReplicas is the rule on --redis-wait-replicas: only the stream
// mode waits for replicas, since only there does the order live in Redis
// until a worker persists it. The queue mode keeps its orders in this
// process's memory, which no replica protects (and an admission answered
// unconfirmed there would never be queued); the sync mode admits in the
// database, not in Redis. New applies it to the Redis client's setting;
// serve applies it to the flag before it opens anything, since the
// embedded Redis has no replicas and its client waits for none.
func CheckWaitReplicas(mode seckill.Mode, replicas int) error {
	if replicas <= 0 || mode == seckill.ModeStream {
		return nil
	}
	where := "in this process's memory"
	if mode == seckill.ModeSync {
		where = "in the database, not in Redis"
	}
	return fmt.Errorf("--redis-wait-replicas needs --mode stream: the %s mode keeps its orders %s", mode, where)
}

// App is a built service. Its fields are for the commands and tests that
// run it; the service itself needs none of them set again.
type App struct {
	Mode     seckill.Mode
	Store    seckill.Store
	Cache    *redis.Client
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Vouchers *seckill.VoucherService
	// Redis is the Redis ledger; nil in the sync mode, whose ledger is the
	// database.
	Redis       *redisledger.Ledger
	Orders      *seckill.OrderService
	DeadLetters *redisledger.DeadLetterService
	Reconciler  *redisledger.Reconciler
	Payments    *seckill.PaymentService
	// Challenges issues and checks the vouchers' challenges.
	Challenges *seckill.ChallengeService
	// Sweeper cancels the orders not paid by their deadline; started with
	// the workers.
	Sweeper *seckill.Sweeper
	// Refunds asks for the refunds of late payments until the provider
	// accepts them; started with the workers. Nil if the provider gives
	// no refunds.
	Refunds *seckill.RefundRequester
	Monitor *monitor.Monitor
	// Pool is the stream mode's workers, Queue the queue mode's; nil in
	// the other modes.
	Pool   *worker.Pool
	Queue  *worker.Queue
	Server *sechttp.Server

	shutdownTimeout time.Duration
	startOnce       sync.Once
	startErr        error
	closeOnce       sync.Once
	closers         []func()
}

// New builds the service: it loads the open vouchers into Redis, leases a
// node id for order ids and watches the Redis server, but starts neither
// the workers (StartWorkers) nor the listener (Listen); Handler serves
// without one. Close releases what New started.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	a := &App{Mode: cfg.Mode, Store: cfg.Store, Cache: cfg.Cache, Logger: logger, Registry: cfg.Registry, shutdownTimeout: cfg.ShutdownTimeout}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()

	ops := NewOps(cfg.Mode, cfg.Retention, cfg.Store, cfg.Cache, logger)
	a.Vouchers, a.Redis, a.DeadLetters, a.Reconciler, a.Sweeper = ops.Vouchers, ops.Redis, ops.DeadLetters, ops.Reconciler, ops.Sweeper
	a.Vouchers.Currency = cfg.Currency
	a.Sweeper.Every = cfg.SweepEvery
	a.Sweeper.Grace = cfg.PaymentGrace
	a.Sweeper.Crash = cfg.Test.Crash
	a.closers = append(a.closers, a.Sweeper.Stop) // started with the workers
	if err := registerSweeper(cfg.Registry, a.Sweeper); err != nil {
		return nil, err
	}
	if cfg.Cache.WaitReplicas() > 0 {
		if err := registerGroupCommit(cfg.Registry, cfg.Cache); err != nil {
			return nil, err
		}
		// The admissions that wait for replicas go in batches, one WAIT
		// each, from the group commit's loops (redisledger).
		commits := redisledger.NewGroupCommit(cfg.Cache, logger, nil)
		commits.Start(ctx)
		cfg.Cache.SetBatcher(commits)
		a.closers = append(a.closers, commits.Stop)
	}
	if err := ops.Ledger.Restore(ctx); err != nil {
		// Not fatal: the vouchers that could be loaded are on sale, and
		// admission checks Redis again before it admits.
		logger.Error("some vouchers could not be loaded into Redis", "err", err)
	}
	if ops.Redis != nil && !cfg.Test.NoCacheWatch {
		// A Redis that changes under the sale (restarted, failed over, or
		// its data lost) is checked, and its open vouchers rebuilt.
		watch := &redisledger.Watch{Fence: ops.Redis.Fence, Logger: logger}
		if err := watch.Start(ctx); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, watch.Stop)
	}

	panics, err := worker.PanicCounter(cfg.Registry)
	if err != nil {
		return nil, err
	}
	ids := cfg.IDs
	if ids == nil {
		// Order ids: a node id leased in Redis, unique among running
		// instances.
		gen := orderid.New()
		lease := orderid.NewLease(cfg.Cache, gen, logger)
		if cfg.Cache.Addr() != "" {
			// The embedded server lives and dies with this process.
			lease.LeaseTimes = orderid.EmbeddedLeaseTimes
		}
		lease.OnPanic = panics.WithLabelValues("node_lease").Inc
		if cfg.Test.NoNodeWait {
			lease.FreshWait = 0
		}
		if err := lease.Start(ctx); err != nil {
			return nil, fmt.Errorf("lease a node id for order ids: %w", err)
		}
		a.closers = append(a.closers, lease.Stop)
		ids = gen
	}

	// The sold-out answers: from this instance's copies of the sold-out
	// vouchers' buyers, whose pollers stop at Close.
	copies := soldout.New(cfg.Cache, soldout.Config{Off: cfg.NoSoldOutCopy}, logger)
	a.closers = append(a.closers, copies.Close)
	if ops.Redis != nil {
		ops.Redis.SoldOut = copies
		ops.Redis.Confirmed = cfg.Cache.WaitReplicas() > 0
	}
	a.Orders = &seckill.OrderService{Ledger: ops.Ledger, Store: cfg.Store, Vouchers: a.Vouchers, IDs: ids, Logger: logger,
		OrderTime: orderid.Time}
	a.Payments = &seckill.PaymentService{Store: cfg.Store, Ledger: ops.Ledger, Orders: a.Orders, Vouchers: a.Vouchers,
		Provider: cfg.Payments, Grace: cfg.PaymentGrace, Logger: logger, Clock: time.Now, Crash: cfg.Test.Crash}
	if err := register(cfg.Registry, "the payments' metrics", prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "seckill_payment_events_refused_total",
		Help: "Payment events refused because their amount or currency was not their order's, or not said: the order not paid by them (listed on the admin page, to settle with the provider)."},
		func() float64 { return float64(a.Payments.Refused()) })); err != nil {
		return nil, err
	}
	if r, ok := cfg.Payments.(seckill.Refunder); ok {
		a.Refunds = &seckill.RefundRequester{Store: cfg.Store, Provider: r, Logger: logger, Clock: time.Now}
		a.Payments.Refunds = a.Refunds
		a.closers = append(a.closers, a.Refunds.Stop) // started with the workers
		if err := registerRefunds(cfg.Registry, a.Refunds); err != nil {
			return nil, err
		}
	}

	key := cfg.ChallengeKey
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	a.Challenges = &seckill.ChallengeService{Config: cfg.Challenge, Key: key, Vouchers: a.Vouchers, Spent: cfg.Cache,
		Logger: logger, Clock: time.Now}
	if ops.Redis != nil {
		// The SQL ledger keeps no sold-out memory: its buys all ask the
		// database, and a challenge voucher's ask for a solution first.
		a.Challenges.Answers = ops.Redis
	}

	var workers monitor.WorkerInfo
	switch cfg.Mode {
	case seckill.ModeQueue:
		if a.Queue, err = worker.NewQueue(cfg.Queue, cfg.Store, cfg.Cache, cfg.Registry, logger); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.Queue.Stop)
		// The queue takes orders at once; its workers may start later.
		ops.Redis.Queue = a.Queue
	case seckill.ModeStream:
		if a.Pool, err = worker.New(cfg.Stream, cfg.Cache, cfg.Store, ops.Redis.Rebuild, cfg.Registry, logger); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.Pool.Stop)
		ops.Redis.Backpressure = a.Pool
		a.Challenges.Backlog = a.Pool
		a.Vouchers.Created = func(v *seckill.Voucher) { a.Pool.Watch(v) }
		workers = a.Pool
	}

	// The open vouchers' state: the admin API's snapshot, and gauges read
	// at scrape time.
	if a.Monitor, err = monitor.New(monitor.Config{Vouchers: a.Vouchers, Store: cfg.Store, Streams: cfg.Cache,
		Workers: workers, Consumer: cfg.Stream.Consumer, Mode: cfg.Mode, Currency: cfg.Currency, ActiveWithin: cfg.StatsActiveWithin, CacheFor: cfg.Test.statsCacheFor(),
		MetricsCacheFor: cfg.MetricsCacheFor, Logger: logger}); err != nil {
		return nil, err
	}
	if err := cfg.Registry.Register(a.Monitor); err != nil {
		return nil, fmt.Errorf("register the stats metrics: %w", err)
	}

	// The difficulty moves with load from now on: its worker reads only
	// memory.
	if err := a.Challenges.Start(ctx); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.Challenges.Stop)

	if a.Server, err = sechttp.New(cfg.HTTP, sechttp.Services{
		Vouchers:    a.Vouchers,
		Orders:      a.Orders,
		Login:       cfg.Login,
		Tokens:      cfg.Tokens,
		Checks:      map[string]sechttp.Check{"redis": cfg.Cache.Ping, "db": cfg.Store.Ping},
		Details:     map[string]sechttp.Detail{"redis": cfg.Cache.Describe},
		Reconciler:  a.Reconciler,
		Stats:       a.Monitor,
		DeadLetters: a.DeadLetters,
		Payments:    a.Payments,
		Webhook:     cfg.Webhook,
		Challenges:  a.Challenges,
		Refunds:     refundAdmin(a.Refunds),

		RefusedPayments: a.Payments,
	}, cfg.Registry, logger); err != nil {
		return nil, err
	}
	return a, nil
}

// The Redis ledger's dead letters and reconciler are what the admin routes
// call.
var (
	_ sechttp.DeadLetterAdmin = (*redisledger.DeadLetterService)(nil)
	_ sechttp.Reconciler      = (*redisledger.Reconciler)(nil)
)

// Ops are the domain services of a sale but the orders: the vouchers and
// their ledger (the Redis ledger, with its fence, or in the sync mode the
// SQL ledger), the dead letters and the reconciler. New builds them for
// the service; the command line tools (reconcile, dlq, stats) build them
// alone, on the database and Redis of a running service.
type Ops struct {
	Vouchers *seckill.VoucherService
	// Ledger is the vouchers' ledger: Redis, or the SQL ledger.
	Ledger seckill.Ledger
	// Redis is the Redis ledger; nil in the sync mode.
	Redis       *redisledger.Ledger
	DeadLetters *redisledger.DeadLetterService
	Reconciler  *redisledger.Reconciler
	// Sweeper cancels the orders not paid by their deadline (not started:
	// App.StartWorkers starts the service's), and finishes the returns of
	// the units of cancelled orders for the reconciler's repair.
	Sweeper *seckill.Sweeper
}

// NewOps builds the services of Ops for mode and retention (0: the
// default, seckill.DefaultRetention) on store and cache, and makes cache
// read the rows of the vouchers it has not learnt from store (the tags of
// their shards: redis.Client.SetVouchers). It loads nothing into Redis and
// starts nothing. The mode is the choice of the ledger, made here only.
func NewOps(mode seckill.Mode, retention time.Duration, store seckill.Store, cache *redis.Client, logger *slog.Logger) *Ops {
	if cache != nil {
		// A voucher's shards are where its row says: the client reads the
		// row of a voucher it has not met (one made by another instance).
		cache.SetVouchers(store.Voucher)
	}
	o := &Ops{Vouchers: &seckill.VoucherService{Store: store, Logger: logger, Clock: time.Now, Retention: retention}}
	o.DeadLetters = &redisledger.DeadLetterService{Mode: mode, Cache: cache, Store: store, Vouchers: o.Vouchers,
		Logger: logger, Clock: time.Now, OrderTime: orderid.Time}
	o.Sweeper = &seckill.Sweeper{Store: store, Logger: logger, Clock: time.Now}
	o.Reconciler = &redisledger.Reconciler{Vouchers: o.Vouchers, Store: store, Cache: cache, Returns: o.Sweeper}
	if mode == seckill.ModeSync || cache == nil {
		// The database is the ledger: a cancellation's own transaction
		// gives the unit back, and the sweeper has nothing more to return.
		o.Ledger = &sqlledger.Ledger{Store: store, Clock: time.Now}
		o.Vouchers.Ledger = o.Ledger
		return o
	}
	o.Redis = redisledger.New(cache, o.Vouchers, logger)
	o.Redis.Clock = time.Now
	// The queue mode's orders wait in the instances' memory (App.Queue).
	o.Redis.Queued = mode == seckill.ModeQueue
	o.Ledger, o.Vouchers.Ledger = o.Redis, o.Redis
	o.Vouchers.Placer = cache
	if !o.Redis.Queued {
		// Dead letters are retried into the stream, which only the stream
		// mode's workers read.
		o.DeadLetters.Admitter = o.Redis
	}
	o.Reconciler.Shards = cache
	o.Reconciler.Repairer = o.Redis
	o.Sweeper.Ledger = o.Redis
	return o
}

// StartWorkers starts the workers that write admitted orders to the
// database (none in the sync mode, which writes in the request). Until
// then the stream mode's orders wait in the streams, the queue mode's in
// the queue. Calling it again does nothing.
func (a *App) StartWorkers(ctx context.Context) error {
	a.startOnce.Do(func() {
		switch {
		case a.Pool != nil:
			a.startErr = a.Pool.Start(ctx)
		case a.Queue != nil:
			a.startErr = a.Queue.Start(ctx)
		}
		if a.startErr == nil {
			a.startErr = a.Sweeper.Start(ctx)
		}
		if a.startErr == nil && a.Refunds != nil {
			a.startErr = a.Refunds.Start(ctx)
		}
	})
	return a.startErr
}

// Handler is the service's HTTP handler, for a server of the caller's (a
// test's httptest.Server) instead of Listen.
func (a *App) Handler() http.Handler { return a.Server.Handler() }

// Listen starts serving HTTP at the configured address; Addr then tells
// where.
func (a *App) Listen() error { return a.Server.Start() }

// Shutdown stops taking requests, lets those in flight finish, then lets
// the workers finish what they hold (in the stream mode the rest stays in
// the streams for the next start or another instance), all within the
// shutdown timeout.
func (a *App) Shutdown(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.shutdownTimeout)
	defer cancel()
	err := a.Server.Shutdown(sctx)
	a.stopWorkers()
	return err
}

func (a *App) stopWorkers() {
	if a.Pool != nil {
		a.Pool.Stop()
	}
	if a.Queue != nil {
		a.Queue.Stop()
	}
	a.Sweeper.Stop()
	if a.Refunds != nil {
		a.Refunds.Stop()
	}
}

// Close stops everything New started, last first: the server if still
// serving, the workers, the lease and the watch. It leaves the store and
// the Redis client open, for their opener to close. Safe to call twice.
func (a *App) Close() {
	a.closeOnce.Do(func() {
		if a.Server != nil {
			a.Server.Shutdown(context.Background())
		}
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
	})
}

// registerGroupCommit registers the counts of the group commit of
// admissions that wait for replicas (redis.GroupCommitStats) on reg, read
// at scrape time.
func registerGroupCommit(reg *prometheus.Registry, c *redis.Client) error {
	counter := statCounter(c.GroupCommitStats)
	return register(reg, "the group commit's metrics",
		counter("seckill_wait_batches_total", "Batches of admissions that wait for replicas (--redis-wait-replicas), each confirmed by one WAIT.",
			func(st redis.GroupCommitStats) int64 { return st.Batches }),
		counter("seckill_wait_batch_admissions_total", "Admissions those batches carried: over seckill_wait_batches_total, the mean batch.",
			func(st redis.GroupCommitStats) int64 { return st.Admissions }),
		counter("seckill_wait_waits_total", "WAITs the batches sent (a batch whose admissions wrote nothing, all sold out, sends none).",
			func(st redis.GroupCommitStats) int64 { return st.Waits }),
		counter("seckill_wait_unconfirmed_total", "Admissions made but answered 503: too few replicas acknowledged them within --redis-wait-timeout, or the reply was lost.",
			func(st redis.GroupCommitStats) int64 { return st.Unconfirmed }),
	)
}

// statCounter returns a maker of counters, each one field of what stats
// returns, read at scrape time.
func statCounter[S any](stats func() S) func(name, help string, get func(S) int64) prometheus.Collector {
	return func(name, help string, get func(S) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(get(stats())) })
	}
}

// register registers cols on reg, saying whose they are (what) if one
// cannot be.
func register(reg *prometheus.Registry, what string, cols ...prometheus.Collector) error {
	for _, col := range cols {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("register %s: %w", what, err)
		}
	}
	return nil
}

// registerSweeper registers the sweeper's metrics on reg, read at scrape
// time.
func registerSweeper(reg *prometheus.Registry, s *seckill.Sweeper) error {
	counter := statCounter(s.Stats)
	return register(reg, "the sweeper's metrics",
		counter("seckill_sweeps_total", "Sweeps of the orders past their payment deadline.",
			func(st seckill.SweepStats) int64 { return st.Sweeps }),
		counter("seckill_sweep_failures_total", "Sweeps that failed somewhere (and are tried again).",
			func(st seckill.SweepStats) int64 { return st.Failures }),
		counter("seckill_sweep_cancelled_total", "Orders the sweeper cancelled: not paid by their deadline.",
			func(st seckill.SweepStats) int64 { return st.Cancelled }),
		counter("seckill_sweep_returned_total", "Units of cancelled orders the sweeper gave back to the cache.",
			func(st seckill.SweepStats) int64 { return st.Returned }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_sweep_last_success_timestamp_seconds",
			Help: "When the last sweep that failed nowhere began (Unix seconds); 0 before one did. Alert when it falls behind."},
			func() float64 {
				t := s.Stats().LastSuccess
				if t.IsZero() {
					return 0
				}
				return float64(t.UnixNano()) / 1e9
			}),
	)
}

// refundAdmin is r for the admin API: a nil interface, not a nil pointer
// in one, when there is none.
func refundAdmin(r *seckill.RefundRequester) sechttp.RefundAdmin {
	if r == nil {
		return nil
	}
	return r
}

// registerRefunds registers the metrics of the refunds of late payments on
// reg, read at scrape time.
func registerRefunds(reg *prometheus.Registry, r *seckill.RefundRequester) error {
	counter := statCounter(r.Stats)
	return register(reg, "the refunds' metrics",
		counter("seckill_refund_requests_total", "Refund requests of late payments sent to the payment provider.",
			func(st seckill.RefundStats) int64 { return st.Requests }),
		counter("seckill_refund_request_failures_total", "Refund requests that failed (each asked for again after a backoff).",
			func(st seckill.RefundStats) int64 { return st.Failures }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_refunds_waiting",
			Help: "Refunds of late payments not given back yet (refunding orders, accepted by the payment provider or not), as the last pass found them."},
			func() float64 { return float64(r.Stats().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_refund_oldest_waiting_timestamp_seconds",
			Help: "When the payment of the longest waiting refund was recorded (Unix seconds); 0 if none waits. Alert when it is old."},
			func() float64 {
				t := r.Stats().Oldest
				if t.IsZero() {
					return 0
				}
				return float64(t.UnixNano()) / 1e9
			}),
	)
}
