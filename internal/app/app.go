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
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/soldout"
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
	// Redis. NodeFreshWait is that lease's FreshWait (see
	// orderid.Lease): zero, its default; negative, no wait (a key prefix
	// private to a test).
	IDs           seckill.IDGenerator
	NodeFreshWait time.Duration
	// WatchCacheEvery is how often the Redis server is checked for a
	// restart, a failover or lost data (seckill.CacheWatch), in the modes
	// that admit in Redis. Default 1s; negative: not watched.
	WatchCacheEvery time.Duration
	// StatsActiveWithin and StatsCacheFor are the monitor's ActiveWithin and
	// CacheFor (see monitor.Config). Defaults: twice the claim lease, and
	// the monitor's.
	StatsActiveWithin time.Duration
	StatsCacheFor     time.Duration
	// MetricsCacheFor is the monitor's MetricsCacheFor: how long one read
	// of the sale's gauges serves every scrape of /metrics. Default the
	// monitor's (10s).
	MetricsCacheFor time.Duration
}

// App is a built service. Its fields are for the commands and tests that
// run it; the service itself needs none of them set again.
type App struct {
	Mode        seckill.Mode
	Store       seckill.Store
	Cache       *redis.Client
	Logger      *slog.Logger
	Registry    *prometheus.Registry
	Vouchers    *seckill.VoucherService
	Orders      *seckill.OrderService
	DeadLetters *seckill.DeadLetterService
	Reconciler  *seckill.Reconciler
	Monitor     *monitor.Monitor
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
	if cfg.Store == nil || cfg.Cache == nil || cfg.Tokens == nil || cfg.Logger == nil {
		return nil, errors.New("app: Config.Store, Cache, Tokens and Logger are required")
	}
	if cfg.Mode == "" {
		cfg.Mode = seckill.ModeStream
	}
	if cfg.Mode == seckill.ModeQueue && cfg.Cache.WaitReplicas() > 0 {
		// The queue mode keeps orders in memory, so replicas protect none;
		// and an admission answered unconfirmed there is never queued.
		return nil, errors.New("app: --redis-wait-replicas needs the stream mode: the queue mode keeps its orders in this process's memory")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	logger := cfg.Logger
	a := &App{Mode: cfg.Mode, Store: cfg.Store, Cache: cfg.Cache, Logger: logger, Registry: cfg.Registry, shutdownTimeout: cfg.ShutdownTimeout}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()

	ops := NewOps(cfg.Mode, cfg.Retention, cfg.Store, cfg.Cache, logger)
	a.Vouchers, a.DeadLetters, a.Reconciler = ops.Vouchers, ops.DeadLetters, ops.Reconciler
	if err := a.Vouchers.Restore(ctx); err != nil {
		// Not fatal: the vouchers that could be loaded are on sale, and
		// admission checks Redis again before it admits.
		logger.Error("some vouchers could not be loaded into Redis", "err", err)
	}
	if cfg.Mode != seckill.ModeSync && cfg.WatchCacheEvery >= 0 {
		// A Redis that changes under the sale (restarted, failed over, or
		// its data lost) is checked, and its open vouchers rebuilt.
		watch := &seckill.CacheWatch{Fence: ops.Fence, Every: cfg.WatchCacheEvery, Logger: logger}
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
		if cfg.NodeFreshWait != 0 {
			lease.FreshWait = max(cfg.NodeFreshWait, 0)
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
	a.Orders = &seckill.OrderService{Mode: cfg.Mode, Cache: cfg.Cache, Store: cfg.Store, Admitter: ops.Admitter,
		Vouchers: a.Vouchers, SoldOut: copies, IDs: ids, Logger: logger, Now: time.Now, OrderTime: orderid.Time,
		Confirmed: cfg.Cache.WaitReplicas() > 0}

	var workers monitor.WorkerInfo
	switch cfg.Mode {
	case seckill.ModeQueue:
		qc := cfg.Queue
		if qc.DrainTimeout <= 0 {
			qc.DrainTimeout = cfg.ShutdownTimeout
		}
		if a.Queue, err = worker.NewQueue(qc, cfg.Store, cfg.Cache, cfg.Registry, logger); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.Queue.Stop)
		// The queue takes orders at once; its workers may start later.
		a.Orders.Queue = a.Queue
	case seckill.ModeStream:
		sc := cfg.Stream
		if sc.DrainTimeout <= 0 {
			sc.DrainTimeout = cfg.ShutdownTimeout
		}
		if a.Pool, err = worker.New(sc, cfg.Cache, cfg.Store, a.Vouchers.Rebuild, cfg.Registry, logger); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.Pool.Stop)
		a.Orders.Backpressure = a.Pool
		a.Vouchers.Created = func(v *seckill.Voucher) { a.Pool.Watch(v.ID) }
		workers = a.Pool
	}

	// The open vouchers' state: the admin API's snapshot, and gauges read
	// at scrape time.
	active := cfg.StatsActiveWithin
	if active <= 0 {
		active = 2 * cfg.Stream.Lease
	}
	if a.Monitor, err = monitor.New(monitor.Config{Vouchers: a.Vouchers, Store: cfg.Store, Streams: cfg.Cache,
		Workers: workers, Consumer: cfg.Stream.Consumer, Mode: cfg.Mode, ActiveWithin: active, CacheFor: cfg.StatsCacheFor,
		MetricsCacheFor: cfg.MetricsCacheFor, Logger: logger}); err != nil {
		return nil, err
	}
	if err := cfg.Registry.Register(a.Monitor); err != nil {
		return nil, fmt.Errorf("register the stats metrics: %w", err)
	}

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
	}, cfg.Registry, logger); err != nil {
		return nil, err
	}
	return a, nil
}

// Ops are the domain services of a sale but the orders: the vouchers, the
// fence over the cache server and the admitter (nil in the sync mode), the
// dead letters and the reconciler. New builds them for the service; the
// command line tools (reconcile, dlq, stats) build them alone, on the
// database and Redis of a running service.
type Ops struct {
	Vouchers    *seckill.VoucherService
	Fence       *seckill.CacheFence
	Admitter    *seckill.Admitter
	DeadLetters *seckill.DeadLetterService
	Reconciler  *seckill.Reconciler
}

// NewOps builds the services of Ops for mode and retention (0: the
// default, seckill.DefaultRetention) on store and cache. It loads nothing
// into Redis and starts nothing.
func NewOps(mode seckill.Mode, retention time.Duration, store seckill.Store, cache *redis.Client, logger *slog.Logger) *Ops {
	o := &Ops{Vouchers: &seckill.VoucherService{Mode: mode, Store: store, Cache: cache, Logger: logger, Now: time.Now,
		Retention: retention}}
	if mode != seckill.ModeSync {
		o.Fence = &seckill.CacheFence{Mode: mode, Cache: cache, Vouchers: o.Vouchers, Logger: logger}
		o.Vouchers.Fence = o.Fence
		o.Admitter = &seckill.Admitter{Mode: mode, Cache: cache, Vouchers: o.Vouchers, Fence: o.Fence, Logger: logger,
			Now: time.Now}
	}
	o.DeadLetters = &seckill.DeadLetterService{Mode: mode, Cache: cache, Store: store, Vouchers: o.Vouchers,
		Admitter: o.Admitter, Logger: logger, Now: time.Now, OrderTime: orderid.Time}
	o.Reconciler = &seckill.Reconciler{Vouchers: o.Vouchers, Store: store, Cache: cache}
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
