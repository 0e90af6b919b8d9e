package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/monitor"
	"github.com/seckill/seckill/orderid"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/worker"
)

// adminPhone is the phone of the embedded default's admin user: not a
// phone number, so nobody can log in as it through the API.
const adminPhone = "admin"

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs, &c)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	svc, err := startService(ctx, &c, stderr, false)
	if err != nil {
		return err
	}
	defer svc.close()
	if svc.embedded {
		admin, _, err := svc.store.EnsureUser(ctx, adminPhone)
		if err != nil {
			return fmt.Errorf("create the admin user: %w", err)
		}
		token, err := svc.tokens.Mint(auth.Identity{UserID: admin.ID, Admin: true}, c.TokenTTL)
		if err != nil {
			return err
		}
		printBanner(stdout, svc.url, &c, token)
	}
	svc.logger.Info("seckill listening", "url", svc.url, "mode", svc.mode, "embedded", svc.embedded, "version", version)

	<-ctx.Done()
	svc.logger.Info("shutting down: finishing requests in flight", "grace", c.ShutdownTimeout.String())
	if err := svc.shutdown(ctx); err != nil {
		return err
	}
	svc.logger.Info("seckill stopped")
	return nil
}

// service is a running seckill: what serve runs, and what bench and demo
// run in their own process.
type service struct {
	url      string
	mode     seckill.Mode
	embedded bool
	logger   *slog.Logger
	store    seckill.Store
	cache    *redis.Client
	tokens   *auth.Tokens
	vouchers *seckill.VoucherService
	srv      *sechttp.Server
	// startWorkers starts the workers if startService held them back.
	startWorkers func() error
	stopWorkers  func()
	closers      []func()
	shutdownTime time.Duration
}

// startService opens the stores, starts the workers (unless holdWorkers)
// and the HTTP server, and returns the running service; close releases
// everything.
func startService(ctx context.Context, c *Config, logs io.Writer, holdWorkers bool) (_ *service, err error) {
	mode, err := seckill.ParseMode(c.Mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	embedded, err := c.embedded()
	if err != nil {
		return nil, err
	}
	secret, err := jwtSecret(c, embedded)
	if err != nil {
		return nil, err
	}
	tokens, err := auth.NewTokens(secret)
	if err != nil {
		return nil, err
	}
	logger, err := c.newLogger(logs, embedded)
	if err != nil {
		return nil, err
	}
	svc := &service{mode: mode, embedded: embedded, logger: logger, tokens: tokens, shutdownTime: c.ShutdownTimeout, stopWorkers: func() {}}
	defer func() {
		if err != nil {
			svc.close()
		}
	}()

	if svc.store, err = openStore(ctx, c, logger); err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, func() { svc.store.Close() })
	if c.Migrate {
		if err := svc.store.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	if svc.cache, err = openRedis(ctx, c, embedded, logger); err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, svc.cache.Close)
	if embedded {
		svc.closers = append(svc.closers, func() { os.Remove(filepath.Join(c.DataDir, embeddedAddrFile)) })
	}

	svc.vouchers = &seckill.VoucherService{Store: svc.store, Cache: svc.cache, Logger: logger, Now: time.Now,
		DatabaseOnly: mode == seckill.ModeSync, InMemoryQueue: mode == seckill.ModeQueue, Retention: c.Retention}
	if err := svc.vouchers.Restore(ctx); err != nil {
		// Not fatal: the vouchers that could be loaded are on sale, and
		// admission checks Redis again before it admits.
		logger.Error("some vouchers could not be loaded into Redis", "err", err)
	}
	if mode != seckill.ModeSync {
		// A Redis that changes under the sale (restarted, failed over, or
		// its data lost) is checked, and its open vouchers rebuilt.
		watch := &seckill.CacheWatch{Vouchers: svc.vouchers, Logger: logger}
		if err := watch.Start(ctx); err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, watch.Stop)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	panics, err := worker.PanicCounter(reg)
	if err != nil {
		return nil, err
	}

	// Order ids: a node id leased in Redis, unique among running instances.
	ids := orderid.New()
	lease := svc.cache.NewNodeLease(ids, logger)
	lease.OnPanic = panics.WithLabelValues("node_lease").Inc
	if err := lease.Start(ctx); err != nil {
		return nil, fmt.Errorf("lease a node id for order ids: %w", err)
	}
	svc.closers = append(svc.closers, lease.Stop)
	orders := &seckill.OrderService{Mode: mode, Cache: svc.cache, Store: svc.store, Vouchers: svc.vouchers, IDs: ids, Logger: logger, OrderTime: orderid.Time}

	w, err := newWorkers(ctx, c, mode, svc.cache, svc.store, svc.vouchers, orders, reg, logger)
	if err != nil {
		return nil, err
	}
	svc.startWorkers, svc.stopWorkers = w.start, w.stop
	svc.closers = append(svc.closers, w.stop)
	if !holdWorkers {
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	// The open vouchers' state: the admin API's snapshot, and gauges read
	// at scrape time.
	mon, err := monitor.New(monitor.Config{Vouchers: svc.vouchers, Store: svc.store, Streams: svc.cache,
		Workers: w.info, Consumer: c.Consumer, Mode: mode, ActiveWithin: 2 * c.ClaimLease, Logger: logger})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(mon); err != nil {
		return nil, fmt.Errorf("register the stats metrics: %w", err)
	}

	proxies, err := parseProxies(c.TrustedProxies)
	if err != nil {
		return nil, err
	}
	login, err := newLogin(c, embedded, svc.cache, svc.store, tokens, logger)
	if err != nil {
		return nil, err
	}
	reconciler := &seckill.Reconciler{Vouchers: svc.vouchers, Store: svc.store, Cache: svc.cache}
	svc.srv, err = sechttp.New(sechttp.Config{
		Addr:                 c.Addr,
		ReadHeaderTimeout:    c.ReadHeaderTimeout,
		ReadTimeout:          c.ReadTimeout,
		WriteTimeout:         c.WriteTimeout,
		IdleTimeout:          c.IdleTimeout,
		RateUser:             c.RateUser,
		RateUserBurst:        c.RateUserBurst,
		RateAddr:             c.RateAddr,
		RateAddrBurst:        c.RateAddrBurst,
		LoginRateAddr:        c.LoginRateAddr,
		LoginRateAddrBurst:   c.LoginRateAddrBurst,
		LoginRateGlobal:      c.LoginRateGlobal,
		LoginRateGlobalBurst: c.LoginRateGlobalBurst,
		TrustedProxies:       proxies,
	}, sechttp.Services{
		Vouchers:   svc.vouchers,
		Orders:     orders,
		Login:      login,
		Tokens:     tokens,
		Checks:     map[string]sechttp.Check{"redis": svc.cache.Ping, "db": svc.store.Ping},
		Reconciler: reconciler,
		Stats:      mon,
		DeadLetters: &seckill.DeadLetterService{Mode: mode, Cache: svc.cache, Store: svc.store, Vouchers: svc.vouchers,
			Logger: logger, OrderTime: orderid.Time},
	}, reg, logger)
	if err != nil {
		return nil, err
	}
	if err := svc.srv.Start(); err != nil {
		return nil, err
	}
	svc.url = baseURL(svc.srv.Addr())
	return svc, nil
}

// shutdown stops taking requests, lets those in flight finish, then lets
// the workers finish what they hold (in the stream mode the rest stays in
// the streams for the next start or another instance).
func (s *service) shutdown(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTime)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	s.stopWorkers()
	return err
}

// close releases what startService opened, last first. Safe to call twice.
func (s *service) close() {
	if s.srv != nil {
		s.srv.Shutdown(context.Background())
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// workers are what writes admitted orders to the database: the stream
// mode's consumer-group workers or the queue mode's queue (the sync mode
// writes in the request).
type workers struct {
	start func() error
	// stop is safe to call twice, and before start.
	stop func()
	// info reports the stream mode's pool; nil in the other modes.
	info monitor.WorkerInfo
}

// newWorkers makes the workers of mode.
func newWorkers(ctx context.Context, c *Config, mode seckill.Mode, cache *redis.Client, store seckill.Store,
	vouchers *seckill.VoucherService, orders *seckill.OrderService, reg prometheus.Registerer, logger *slog.Logger) (workers, error) {
	switch mode {
	case seckill.ModeQueue:
		q, err := worker.NewQueue(worker.QueueConfig{Capacity: c.QueueCapacity, Workers: c.Workers, BatchSize: c.BatchSize, DrainTimeout: c.ShutdownTimeout},
			store, cache, reg, logger)
		if err != nil {
			return workers{}, err
		}
		orders.Queue = q
		// The queue takes orders at once; its workers may start later.
		return workers{start: func() error { return q.Start(ctx) }, stop: q.Stop}, nil
	case seckill.ModeStream:
		consumer := c.Consumer
		if consumer == "" {
			consumer = consumerName()
		}
		pool, err := worker.New(worker.Config{
			Consumer:      consumer,
			Workers:       c.Workers,
			WorkersMax:    c.WorkersMax,
			BatchSize:     c.BatchSize,
			Lease:         c.ClaimLease,
			Recent:        c.Retention,
			MaxDeliveries: c.MaxDeliveries,
			DrainTimeout:  c.ShutdownTimeout,
			BacklogHigh:   c.BacklogHigh,
			BacklogLow:    c.BacklogLow,
		}, cache, store, vouchers.Rebuild, reg, logger)
		if err != nil {
			return workers{}, err
		}
		orders.Backpressure = pool
		vouchers.Created = func(v *seckill.Voucher) { pool.Watch(v.ID) }
		return workers{start: func() error { return pool.Start(ctx) }, stop: pool.Stop, info: pool}, nil
	}
	return workers{start: func() error { return nil }, stop: func() {}}, nil
}

// parseProxies reads --trusted-proxies: addresses or CIDRs, comma-separated.
func parseProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxies: %q is neither an address nor a CIDR", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// consumerName names this instance in the order streams' groups:
// host-pid-random, unique among running instances.
func consumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "seckill"
	}
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// serveFlags registers every setting of serve.
func serveFlags(fs *flag.FlagSet, c *Config) {
	c.httpFlags(fs)
	c.redisFlags(fs)
	c.dbFlags(fs)
	c.secretFlags(fs)
	c.logFlags(fs)
	c.workerFlags(fs)
	c.limitFlags(fs)
	c.loginFlags(fs)
	fs.StringVar(&c.Mode, "mode", "stream", "how orders are taken: stream (Redis admission, a Redis Stream, workers), queue (Redis admission, an in-memory queue: a crash loses it), sync (a database transaction in the request)")
	fs.IntVar(&c.QueueCapacity, "queue-capacity", 10_000, "the queue mode's queue size; a full queue answers 503")
	fs.BoolVar(&c.Migrate, "migrate", true, "apply database migrations at start")
	fs.DurationVar(&c.TokenTTL, "token-ttl", 24*time.Hour, "lifetime of login tokens and of the admin token the embedded default prints")
}

// baseURL is the URL a local client reaches addr at.
func baseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func printBanner(w io.Writer, base string, c *Config, adminToken string) {
	example := fmt.Sprintf(`{"title":"Flash sale","stock":100,"beginTime":"%s","endTime":"%s"}`,
		time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Add(time.Hour).Format(time.RFC3339))
	fmt.Fprintf(w, `
seckill %s: EMBEDDED DEFAULT, for trying it out, not for production.
  Redis:     an in-process server; its data lives in memory and is gone when seckill stops
  Database:  SQLite at %s
  For production set SECKILL_REDIS_URL, SECKILL_DB_URL and SECKILL_JWT_SECRET, and for
  login SECKILL_LOGIN_WEBHOOK_URL and SECKILL_LOGIN_WEBHOOK_SECRET (see README).

Listening on %s

Admin token (valid %s):
  export TOKEN=%s
Admin page (sign in with that token): %s/admin/

Try:
  curl -s -X POST %s/api/admin/vouchers -H "Authorization: Bearer $TOKEN" \
    -d '%s'
  curl -s %s/api/vouchers

`, version, sqlitePath(c), base, c.TokenTTL, adminToken, base, base, example, base)
}

func sqlitePath(c *Config) string {
	return c.DataDir + "/" + embeddedDBFile
}
