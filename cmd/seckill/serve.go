package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
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
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/worker"
)

// minOpenFiles is twice the 5,000 connections an instance is expected to
// hold in a sale: serve warns below it.
const minOpenFiles = 10_000

// adminPhone is the phone of the embedded default's admin user: not a
// phone number, so nobody can log in as it through the API.
const adminPhone = "admin"

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c Config
	fs := newFlagSet("serve")
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
		admin, _, err := svc.Store.EnsureUser(ctx, adminPhone)
		if err != nil {
			return fmt.Errorf("create the admin user: %w", err)
		}
		token, err := svc.tokens.Mint(auth.Identity{UserID: admin.ID, Admin: true}, c.TokenTTL)
		if err != nil {
			return err
		}
		printBanner(stdout, svc.url, &c, token)
	}
	topo, err := svc.Cache.Topology(ctx)
	if err != nil {
		return fmt.Errorf("read the Redis topology: %w", err)
	}
	// Each connection holds a file; Go raised the soft limit to the hard one at start.
	openFiles, _, _ := openFileLimit()
	metrics := svc.url + "/metrics"
	if a := svc.Server.MetricsAddr(); a != nil {
		metrics = baseURL(a) + "/metrics"
	}
	svc.Logger.Info("seckill listening", "url", svc.url, "mode", svc.Mode, "embedded", svc.embedded, "version", version,
		"redis", topo.String(), "redis_wait_replicas", svc.Cache.WaitReplicas(), "open_files", openFiles,
		"metrics", metrics, "metrics_token", c.MetricsToken != "")
	if openFiles > 0 && openFiles < minOpenFiles {
		svc.Logger.Warn("the open-file limit is low for a flash sale: raise the hard limit (ulimit -Hn, LimitNOFILE=)", "open_files", openFiles, "want", minOpenFiles)
	}
	if !svc.embedded && c.PaymentProvider == "fake" {
		// The default, right for trying it; on real services it sells
		// every priced voucher for nothing.
		svc.Logger.Warn("payments are fake: a buyer who pays is paid at once, and nothing is taken; for real payments set SECKILL_PAYMENT_PROVIDER=webhook (see docs/configuration.md)")
	}
	// With --redis-wait-replicas: warn where the conditions under which it
	// holds through a failover do not (docs/guarantees.md). Warnings only.
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	svc.Cache.CheckReplicas(checkCtx)
	cancel()

	<-ctx.Done()
	svc.Logger.Info("shutting down: finishing requests in flight", "grace", c.ShutdownTimeout.String())
	if err := svc.Shutdown(ctx); err != nil {
		return err
	}
	svc.Logger.Info("seckill stopped")
	return nil
}

// service is a running seckill: what serve runs, and what bench and demo
// run in their own process. The service itself is built by internal/app;
// this adds what the command opened for it and the address it listens at.
type service struct {
	*app.App
	url      string
	embedded bool
	tokens   *auth.Tokens
	closers  []func()
}

// startService opens the stores, builds the service, starts the workers
// (unless holdWorkers) and the HTTP server, and returns the running
// service; close releases everything.
func startService(ctx context.Context, c *Config, logs io.Writer, holdWorkers bool) (_ *service, err error) {
	mode, err := seckill.ParseMode(c.Mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	// app.New applies the same rule to the Redis client, but the embedded
	// client waits for no replica: the flag is checked before anything opens.
	if err := app.CheckWaitReplicas(mode, c.RedisWaitReplicas); err != nil {
		return nil, err
	}
	// Checked before anything opens; "" (bench, demo) is the default.
	if c.Currency != "" {
		if err := seckill.CheckCurrency("--currency", c.Currency); err != nil {
			return nil, err
		}
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
	svc := &service{embedded: embedded, tokens: tokens}
	defer func() {
		if err != nil {
			svc.close()
		}
	}()
	if embedded {
		unlock, err := lockDataDir(c.DataDir)
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, unlock)
	}

	store, err := openStore(ctx, c, logger)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, func() { store.Close() })
	if c.Migrate {
		if err := store.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	cache, err := openRedis(ctx, c, embedded, logger)
	if err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, cache.Close)
	if embedded {
		svc.closers = append(svc.closers, func() { os.Remove(filepath.Join(c.DataDir, embeddedAddrFile)) })
	}
	proxies, err := parseProxies(c.TrustedProxies)
	if err != nil {
		return nil, err
	}
	login, err := newLogin(c, embedded, cache, store, tokens, logger)
	if err != nil {
		return nil, err
	}
	payments, webhook, err := newPayments(c)
	if err != nil {
		return nil, err
	}
	consumer := c.Consumer
	if consumer == "" {
		consumer = consumerName()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	a, err := app.New(ctx, app.Config{
		Mode:     mode,
		Store:    store,
		Cache:    cache,
		Tokens:   tokens,
		Login:    login,
		Logger:   logger,
		Registry: reg,

		Payments:     payments,
		Webhook:      webhook,
		SweepEvery:   c.SweepEvery,
		PaymentGrace: c.PaymentGrace,
		Currency:     c.Currency,
		Challenge: seckill.ChallengeConfig{TTL: c.ChallengeTTL, MinNumber: c.ChallengeMinNumber, MaxNumber: c.ChallengeMaxNumber,
			Rate: c.ChallengeRate},
		ChallengeKey: seckill.ChallengeKey(secret),
		Test:         app.TestConfig{Crash: failpoint(logger)},
		HTTP: sechttp.Config{
			Addr:                 c.Addr,
			ReadHeaderTimeout:    c.ReadHeaderTimeout,
			ReadTimeout:          c.ReadTimeout,
			WriteTimeout:         c.WriteTimeout,
			IdleTimeout:          c.IdleTimeout,
			RateUser:             c.RateUser,
			RateUserBurst:        c.RateUserBurst,
			RateAddr:             c.RateAddr,
			RateAddrBurst:        c.RateAddrBurst,
			OrderRateUser:        c.OrderRateUser,
			OrderRateUserBurst:   c.OrderRateUserBurst,
			OrderRateAddr:        c.OrderRateAddr,
			OrderRateAddrBurst:   c.OrderRateAddrBurst,
			MetricsAddr:          c.MetricsAddr,
			MetricsToken:         c.MetricsToken,
			LoginRateAddr:        c.LoginRateAddr,
			LoginRateAddrBurst:   c.LoginRateAddrBurst,
			LoginRateGlobal:      c.LoginRateGlobal,
			LoginRateGlobalBurst: c.LoginRateGlobalBurst,
			TrustedProxies:       proxies,

			ChallengeRateUser:      c.ChallengeRateUser,
			ChallengeRateUserBurst: c.ChallengeRateUserBurst,
		},
		Stream: worker.Config{
			Consumer:      consumer,
			Workers:       c.Workers,
			WorkersMax:    c.WorkersMax,
			BatchSize:     c.BatchSize,
			Lease:         c.ClaimLease,
			Retention:     c.Retention,
			MaxDeliveries: c.MaxDeliveries,
			BacklogHigh:   c.BacklogHigh,
			BacklogLow:    c.BacklogLow,
		},
		Queue:           worker.QueueConfig{Capacity: c.QueueCapacity, Workers: c.Workers, BatchSize: c.BatchSize},
		ShutdownTimeout: c.ShutdownTimeout,
		Retention:       c.Retention,
		MetricsCacheFor: c.MetricsCache,
		NoSoldOutCopy:   !c.SoldOutCopy,
	})
	if err != nil {
		return nil, err
	}
	svc.App = a
	svc.closers = append(svc.closers, a.Close)
	if !holdWorkers {
		if err := a.StartWorkers(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.Listen(); err != nil {
		return nil, err
	}
	svc.url = baseURL(a.Server.Addr())
	return svc, nil
}

// close releases what startService opened, last first. Safe to call twice.
func (s *service) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
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

// serveFlags registers every setting of serve, under the headings of its
// help.
func serveFlags(fs *flagSet, c *Config) {
	fs.group("HTTP", c.httpFlags)
	fs.group("Orders", func(fs *flag.FlagSet) {
		fs.StringVar(&c.Mode, "mode", "stream", "how orders are taken: stream (Redis admission, a Redis Stream, workers), queue (Redis admission, an in-memory queue: a crash loses it), sync (a database transaction in the request)")
		fs.IntVar(&c.QueueCapacity, "queue-capacity", 10_000, "the queue mode's queue size; a full queue answers 503")
	})
	fs.group("Redis", c.redisFlags)
	fs.group("Database", func(fs *flag.FlagSet) {
		c.dbFlags(fs)
		fs.BoolVar(&c.Migrate, "migrate", true, "apply database migrations at start")
	})
	fs.group("Tokens", func(fs *flag.FlagSet) {
		c.secretFlags(fs)
		c.tokenTTLFlag(fs, "lifetime of login tokens and of the admin token the embedded default prints")
	})
	fs.group("Workers", c.workerFlags)
	fs.group("Limits", c.limitFlags)
	fs.group("Payments", c.paymentFlags)
	fs.group("Login", c.loginFlags)
	fs.group("Challenge", c.challengeFlags)
	fs.group("Metrics", c.metricsFlags)
	fs.group("Logging", c.logFlags)
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
  login SECKILL_LOGIN_WEBHOOK_URL and SECKILL_LOGIN_WEBHOOK_SECRET (see docs/configuration.md).

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
