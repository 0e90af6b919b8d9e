package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/bench"
)

// dbProbes is how many round trips each way measure the proxy's addition:
// enough for a p99 from 10 samples above it, about a second at 1 ms.
const dbProbes = 1000

// dbProxyFlags checks --db-latency, --db-latency-spin and --db-outage
// before anything opens: they need the in-process server, a database of
// its own process (not the embedded SQLite), and the outage a timed sale.
func (b *benchFlags) dbProxyFlags(c *Config) error {
	if b.dbLatency < 0 || b.dbSpin < 0 || b.dbOutage < 0 {
		return fmt.Errorf("--db-latency %v, --db-latency-spin %v, --db-outage %v: want 0 or more", b.dbLatency, b.dbSpin, b.dbOutage)
	}
	if !b.dbProxied() {
		return nil
	}
	if b.url != "" {
		return errors.New("--db-latency and --db-outage put a proxy in front of the database of the server in this process; with --url the server is another process: put the delay in front of its database there")
	}
	embedded, err := c.embedded()
	if err != nil {
		return err
	}
	what := "the embedded default"
	if !embedded {
		scheme, _, _ := strings.Cut(c.DBURL, "://")
		switch scheme {
		case "mysql", "postgres", "postgresql":
			what = ""
		default:
			what = "--db-url " + scheme + "://"
		}
	}
	if what != "" {
		return fmt.Errorf("--db-latency and --db-outage need a database reached over TCP (--db-url mysql:// or postgres://), not %s: SQLite is a file in this process", what)
	}
	if b.dbOutage > 0 && b.duration <= 0 {
		return errors.New("--db-outage needs a sale of a set time (--duration): the outage starts at its middle")
	}
	return nil
}

// dbProxied reports whether the database goes through a proxy.
func (b *benchFlags) dbProxied() bool { return b.dbLatency > 0 || b.dbOutage > 0 }

// dbProxy is the delaying proxy in front of the in-process server's
// database, and a pool of one connection each way to time round trips.
type dbProxy struct {
	latencyProxy
	delay       time.Duration
	direct, via seckill.Store
	// added is what the proxy was measured to add before the run.
	added bench.Added
}

// latencyProxy is a bench.LatencyProxy, in this process or in a child.
type latencyProxy interface {
	Addr() string
	Down()
	Up()
	Close() error
}

// startDBProxy starts the proxy in front of c.DBURL's host and returns it
// with the URL that goes through it.
func startDBProxy(ctx context.Context, c *Config, b *benchFlags) (_ *dbProxy, proxied string, err error) {
	u, err := url.Parse(c.DBURL)
	if err != nil {
		return nil, "", errors.New("--db-url: malformed")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"mysql": "3306", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
	}
	cfg := bench.LatencyConfig{Target: net.JoinHostPort(u.Hostname(), port), Delay: b.dbLatency, Spin: b.dbSpin}
	var p latencyProxy
	if b.dbInProcess {
		p, err = bench.StartLatencyProxy(cfg)
	} else {
		p, err = startProxyProcess(cfg)
	}
	if err != nil {
		return nil, "", err
	}
	d := &dbProxy{latencyProxy: p, delay: b.dbLatency}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	u.Host = p.Addr()
	proxied = u.String()
	// Pools of one, so that each ping is one round trip on a connection
	// already open; the driver logs nowhere.
	quiet := slog.New(slog.DiscardHandler)
	cc := *c
	cc.DBMaxConns = 1
	if d.direct, err = openStore(ctx, &cc, quiet); err != nil {
		return nil, "", err
	}
	cc.DBURL = proxied
	if d.via, err = openStore(ctx, &cc, quiet); err != nil {
		return nil, "", err
	}
	return d, proxied, nil
}

// measure times n pings direct and through the proxy.
func (d *dbProxy) measure(ctx context.Context, n int) (bench.Added, error) {
	return bench.MeasureAdded(ctx, n, d.delay, d.direct.Ping, d.via.Ping)
}

func (d *dbProxy) close() {
	for _, s := range []seckill.Store{d.via, d.direct} {
		if s != nil {
			s.Close()
		}
	}
	d.latencyProxy.Close()
}

// proxyDB starts the proxy for a run in this process, when asked (else it
// returns nil), points c at it, and measures what it adds and says so.
func proxyDB(ctx context.Context, c *Config, b *benchFlags, stdout io.Writer) (*dbProxy, error) {
	if !b.dbProxied() {
		return nil, nil
	}
	d, proxied, err := startDBProxy(ctx, c, b)
	if err != nil {
		return nil, fmt.Errorf("--db-latency: %w", err)
	}
	if d.added, err = d.measure(ctx, dbProbes); err != nil {
		d.close()
		return nil, fmt.Errorf("--db-latency: %w", err)
	}
	where := "its own process"
	if b.dbInProcess {
		where = "this process"
	}
	fmt.Fprintf(stdout, "database behind a delaying proxy at %s, in %s: %v\n", d.Addr(), where, d.added)
	c.DBURL = proxied
	return d, nil
}

// configure sets a run's report of the proxy, its probe during the sale
// and, with --db-outage, the outage at the sale's middle.
func (d *dbProxy) configure(cfg *bench.Config, b *benchFlags, stdout io.Writer) {
	if !b.dbInProcess {
		if _, port, err := net.SplitHostPort(d.Addr()); err == nil {
			n, _ := strconv.Atoi(port)
			cfg.Watch = append(cfg.Watch, bench.Watch{Name: "latency proxy", Port: n})
		}
	}
	added := d.added
	cfg.DBLatency = &added
	cfg.DBLatencyProbe = func(ctx context.Context) (bench.Added, error) { return d.measure(ctx, dbProbes/5) }
	if b.dbOutage > 0 {
		cfg.Outage = &bench.Outage{At: b.duration / 2, For: b.dbOutage, Down: d.Down, Up: d.Up}
		// The workers retry with a backoff of up to seconds once it is
		// back: the drain waits for them well past the outage.
		cfg.DrainTimeout = max(60*time.Second, 4*b.dbOutage+30*time.Second)
		fmt.Fprintf(stdout, "the database will be unreachable %v into the sale, for %v\n", b.duration/2, b.dbOutage)
	}
}
