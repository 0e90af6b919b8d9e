package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/orderid"
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
	if c.Mode != "stream" {
		return fmt.Errorf("--mode %q: only stream is built so far", c.Mode)
	}
	embedded, err := c.embedded()
	if err != nil {
		return err
	}
	secret, err := jwtSecret(&c, embedded)
	if err != nil {
		return err
	}
	tokens, err := auth.NewTokens(secret)
	if err != nil {
		return err
	}
	logger, err := c.newLogger(stderr, embedded)
	if err != nil {
		return err
	}

	store, err := openStore(ctx, &c, logger)
	if err != nil {
		return err
	}
	defer store.Close()
	if c.Migrate {
		if err := store.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	cache, err := openRedis(ctx, &c, embedded, logger)
	if err != nil {
		return err
	}
	defer cache.Close()

	if embedded {
		defer os.Remove(filepath.Join(c.DataDir, embeddedAddrFile))
	}

	vouchers := &seckill.VoucherService{Store: store, Cache: cache, Logger: logger, Now: time.Now}
	if err := vouchers.Restore(ctx); err != nil {
		// Not fatal: the vouchers that could be loaded are on sale.
		logger.Error("some vouchers could not be loaded into Redis", "err", err)
	}

	// Order ids: a node id leased in Redis, unique among running instances.
	ids := orderid.New()
	lease := cache.NewNodeLease(ids, logger)
	if err := lease.Start(ctx); err != nil {
		return fmt.Errorf("lease a node id for order ids: %w", err)
	}
	defer lease.Stop()
	orders := &seckill.OrderService{Cache: cache, Store: store, Vouchers: vouchers, IDs: ids, Logger: logger, OrderTime: orderid.Time}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	consumer := c.Consumer
	if consumer == "" {
		consumer = consumerName()
	}
	pool, err := worker.New(worker.Config{
		Consumer:      consumer,
		Workers:       c.Workers,
		BatchSize:     c.BatchSize,
		Lease:         c.ClaimLease,
		MaxDeliveries: c.MaxDeliveries,
		DrainTimeout:  c.ShutdownTimeout,
	}, cache, store, vouchers.Rebuild, reg, logger)
	if err != nil {
		return err
	}
	if err := pool.Start(ctx); err != nil {
		return err
	}
	defer pool.Stop()
	vouchers.Created = func(v *seckill.Voucher) { pool.Watch(v.ID) }

	srv, err := sechttp.New(sechttp.Config{
		Addr:              c.Addr,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
	}, sechttp.Services{
		Vouchers: vouchers,
		Orders:   orders,
		Login: &auth.Login{
			Codes:    cache,
			Sender:   auth.LogSender{Logger: logger},
			Users:    store,
			Tokens:   tokens,
			TokenTTL: c.TokenTTL,
			Logger:   logger,
		},
		Tokens: tokens,
		Checks: map[string]sechttp.Check{"redis": cache.Ping, "db": store.Ping},
	}, reg, logger)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	base := baseURL(srv.Addr())
	if embedded {
		admin, _, err := store.EnsureUser(ctx, adminPhone)
		if err != nil {
			return fmt.Errorf("create the admin user: %w", err)
		}
		token, err := tokens.Mint(auth.Identity{UserID: admin.ID, Admin: true}, c.TokenTTL)
		if err != nil {
			return err
		}
		printBanner(stdout, base, &c, token)
	}
	logger.Info("seckill listening", "url", base, "mode", c.Mode, "embedded", embedded, "version", version)

	<-ctx.Done()
	logger.Info("shutting down: finishing requests in flight", "grace", c.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	// No more admissions: let the workers finish and acknowledge what they
	// hold; the rest stays in the streams for the next start or another
	// instance.
	pool.Stop()
	logger.Info("seckill stopped")
	return nil
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
	fs.StringVar(&c.Mode, "mode", "stream", "order pipeline: stream (sync and queue are not built yet)")
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
  For production set SECKILL_REDIS_URL, SECKILL_DB_URL and SECKILL_JWT_SECRET (see README).

Listening on %s

Admin token (valid %s):
  export TOKEN=%s

Try:
  curl -s -X POST %s/api/admin/vouchers -H "Authorization: Bearer $TOKEN" \
    -d '%s'
  curl -s %s/api/vouchers

`, version, sqlitePath(c), base, c.TokenTTL, adminToken, base, example, base)
}

func sqlitePath(c *Config) string {
	return c.DataDir + "/" + embeddedDBFile
}
