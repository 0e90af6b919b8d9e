package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/bench"
)

// benchFlags are bench's own settings.
type benchFlags struct {
	url, compare, jsonFile, cpuProfile string
	connections, rate, rateSteps       string
	users, repeat, concurrency, shards int
	stock                              int64
	duration, references, soldOut      time.Duration
	rateFor                            time.Duration
	backlog                            bool
	challenge                          bool
	startRounds                        int
	startFor                           time.Duration
	// dbLatency, dbSpin and dbOutage put the in-process server's database
	// behind a delaying proxy (benchdb.go).
	dbLatency, dbSpin, dbOutage time.Duration
	dbInProcess                 bool
}

// benchFlagSet registers bench's flags: its own, then the in-process
// server's, as serve's.
func benchFlagSet(fs *flagSet, c *Config, b *benchFlags) {
	fs.StringVar(&c.Mode, "mode", "stream", "mode of the in-process server: stream, queue or sync")
	urlFlag(fs, &b.url, "bench a running server at this `URL`, or address as serve's --addr takes it (:8080), instead of one in this process (needs its --jwt-secret); several instances comma-separated, each sent requests in turn")
	fs.StringVar(&b.compare, "compare", "", "run each of these modes in turn, each on a fresh sale, e.g. sync,queue,stream")
	fs.IntVar(&b.users, "users", 1000, "buyers")
	fs.IntVar(&b.repeat, "repeat", 2, "requests per buyer")
	fs.Int64Var(&b.stock, "stock", 0, "the voucher's stock (default: a tenth of the buyers)")
	fs.IntVar(&b.shards, "shards", 1, "the voucher's shards in Redis, 1 to 64: above 1, its admissions spread over that many masters of a Cluster (stream mode only)")
	fs.IntVar(&b.concurrency, "concurrency", 64, "requests in flight at once")
	fs.StringVar(&b.connections, "connections", "", "clients sending at once, each on a keep-alive connection of its own; several comma-separated (64,5000) run each mode at each (default: --concurrency)")
	fs.DurationVar(&b.duration, "duration", 0, "run the sale this long, buyers asking again and again, instead of --users × --repeat requests")
	fs.DurationVar(&b.references, "references", 3*time.Second, "how long to measure each reference before the sale: the bare handler and GET /healthz (0: skip)")
	fs.StringVar(&b.rate, "rate", "", "after the sale, send buys at this constant rate (requests a second), open loop, and the bare handler the same; auto: at each of --rate-steps of the admissions' closed-loop maximum, measured first")
	fs.StringVar(&b.rateSteps, "rate-steps", "50,80,95", "with --rate auto, the rates as percentages of the admissions' closed-loop maximum")
	fs.DurationVar(&b.rateFor, "rate-for", 5*time.Second, "how long each open-loop rate is sent, and the closed-loop maximum measured")
	fs.DurationVar(&b.soldOut, "sold-out", 3*time.Second, "how long to measure the answers once sold out (0: skip)")
	fs.BoolVar(&b.backlog, "backlog", false, "hold the workers back during the sale, to time the drain of the whole backlog (in-process only)")
	fs.BoolVar(&b.challenge, "challenge", false, "the sale's voucher asks for a solved challenge: each buyer gets one with its token, solves it in Go and buys with the X-Altcha header; the solve times are reported, then --start-rounds")
	fs.IntVar(&b.startRounds, "start-rounds", 3, "with --challenge: pairs of start rounds, the sale's buyers buying a fresh voucher from its start without and with the challenge, alternated; their buys counted per 100 ms (0: skip)")
	fs.DurationVar(&b.startFor, "start-for", 2*time.Second, "with --challenge: how long each start round sends at most")
	fs.DurationVar(&b.dbLatency, "db-latency", 0, "put the in-process server's database (mysql:// or postgres://) behind a proxy that adds this to each round trip, measure what it really adds and report it (0: no proxy)")
	fs.DurationVar(&b.dbSpin, "db-latency-spin", 0, "with --db-latency: the last stretch of each delay the proxy spends spinning on one goroutine instead of on a timer, which an idle process wakes up to a millisecond late; costs CPU (0: never spin)")
	fs.BoolVar(&b.dbInProcess, "db-proxy-in-process", false, "run --db-latency's proxy in this process instead of a child seckill latency-proxy: its goroutines then queue behind the bench's, and a loaded bench delays the database more than asked")
	fs.DurationVar(&b.dbOutage, "db-outage", 0, "make the in-process server's database unreachable for this long from the middle of the sale (needs --duration), through the same proxy, then back; the books are checked after")
	fs.StringVar(&b.jsonFile, "json", "", "also write the reports to this file as JSON")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (client and in-process server) to this file")
	fs.alias("ceiling", "references")
	fs.group("In-process server: Redis", c.redisFlags)
	fs.group("In-process server: database", c.dbFlags)
	fs.group("In-process server: tokens", c.secretFlags)
	fs.group("In-process server: workers", c.workerFlags)
	fs.group("In-process server: limits", c.limitFlags)
	fs.group("In-process server: challenge", c.challengeFlags)
}

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c Config
		b benchFlags
	)
	fs := newFlagSet("bench")
	benchFlagSet(fs, &c, &b)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	if b.shards < 1 || b.shards > seckill.MaxShards {
		return fmt.Errorf("--shards %d: want 1 to %d", b.shards, seckill.MaxShards)
	}
	if err := b.dbProxyFlags(&c); err != nil {
		return err
	}
	if b.startRounds < 0 || b.startFor <= 0 {
		return fmt.Errorf("--start-rounds %d, --start-for %v: want 0 or more rounds, and a time above 0", b.startRounds, b.startFor)
	}
	c.Migrate, c.TokenTTL, c.ShutdownTimeout = true, time.Hour, 15*time.Second
	c.Addr, c.LogLevel, c.LogFormat = "127.0.0.1:0", "error", "text"
	c.QueueCapacity = 100_000
	c.ReadHeaderTimeout, c.ReadTimeout, c.WriteTimeout, c.IdleTimeout = 5*time.Second, 10*time.Second, 15*time.Second, time.Minute
	if b.cpuProfile != "" {
		f, err := os.Create(b.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	modes := []string{c.Mode}
	if b.compare != "" {
		modes = strings.Split(b.compare, ",")
	}
	conns, err := b.connectionCounts()
	if err != nil {
		return err
	}
	if err := checkOpenFiles(stdout, slices.Max(conns)); err != nil {
		return err
	}
	var reports []*bench.Report
	for _, mode := range modes {
		for _, n := range conns {
			bb := b
			bb.concurrency = n
			var r *bench.Report
			if b.url != "" {
				r, err = benchRemote(ctx, &c, &bb, stdout)
			} else {
				cc := c
				cc.Mode = strings.TrimSpace(mode)
				r, err = benchInProcess(ctx, &cc, &bb, stdout, stderr)
			}
			if err != nil {
				return err
			}
			reports = append(reports, r)
			fmt.Fprintln(stdout)
		}
	}
	bench.Table(stdout, reports)
	ok := true
	for _, r := range reports {
		fmt.Fprintf(stdout, "\n%s:\n%s", r.Label, bench.Verdict(r))
		ok = ok && r.OK()
	}
	if b.jsonFile != "" {
		data, err := json.MarshalIndent(reports, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(b.jsonFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if !ok {
		return errors.New("the books do not balance (see above)")
	}
	return nil
}

// benchConfig is the part of a run's configuration that both ways share.
func benchConfig(c *Config, b *benchFlags, label string, stdout io.Writer) (bench.Config, error) {
	if b.shards > 1 {
		label += fmt.Sprintf("/%d shards", b.shards)
	}
	if b.challenge {
		label += "/challenge"
	}
	cfg := bench.Config{
		Label: label, Users: b.users, Repeat: b.repeat, Stock: b.stock, Shards: b.shards, Concurrency: b.concurrency,
		Duration: b.duration, ReferenceFor: orSkip(b.references), SoldOutFor: orSkip(b.soldOut),
		Bare:    bench.ServerTimeouts{ReadHeader: c.ReadHeaderTimeout, Read: c.ReadTimeout, Write: c.WriteTimeout, Idle: c.IdleTimeout},
		OpenFor: b.rateFor, Progress: stdout, Terminal: isTerminal(stdout),
		Challenge: b.challenge, StartRounds: b.startRounds, StartFor: b.startFor,
	}
	var err error
	cfg.OpenRate, cfg.OpenSteps, err = b.openLoop()
	return cfg, err
}

// connectionCounts reads --connections: a count or several, default
// --concurrency.
func (b *benchFlags) connectionCounts() ([]int, error) {
	if strings.TrimSpace(b.connections) == "" {
		return []int{b.concurrency}, nil
	}
	var out []int
	for _, f := range strings.Split(b.connections, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--connections %q: want counts above 0, comma-separated", b.connections)
		}
		out = append(out, n)
	}
	return out, nil
}

// openLoop reads --rate and --rate-steps: a fixed rate, or the fractions
// of the measured maximum (--rate auto); neither without --rate.
func (b *benchFlags) openLoop() (rate float64, steps []float64, err error) {
	switch v := strings.TrimSpace(b.rate); v {
	case "", "0":
		return 0, nil, nil
	case "auto":
		for _, f := range strings.Split(b.rateSteps, ",") {
			p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || p <= 0 || p > 200 {
				return 0, nil, fmt.Errorf("--rate-steps %q: want percentages, comma-separated, e.g. 50,80,95", b.rateSteps)
			}
			steps = append(steps, p/100)
		}
		return 0, steps, nil
	default:
		rate, err := strconv.ParseFloat(v, 64)
		if err != nil || rate <= 0 {
			return 0, nil, fmt.Errorf("--rate %q: want requests a second, or auto", b.rate)
		}
		return rate, nil, nil
	}
}

// checkOpenFiles makes sure this process may open enough files for conns
// connections: the client's, and the bare handler's or the in-process
// server's other ends. Go raises the soft limit to the hard one at start
// (since Go 1.19); the hard limit is the operator's.
func checkOpenFiles(w io.Writer, conns int) error {
	soft, hard, err := openFileLimit()
	if err != nil {
		fmt.Fprintf(w, "open files: limit unknown (%v)\n", err)
		return nil
	}
	need := uint64(2*conns + 256)
	how := "below the hard limit"
	if soft == hard {
		how = "raised to the hard limit by Go at start"
	}
	fmt.Fprintf(w, "open files: this process may open %d (soft limit, %s; hard %d); %d connections need about %d\n", soft, how, hard, conns, need)
	if soft < need {
		return fmt.Errorf("--connections %d needs about %d open files (both ends of each connection, and 256 more), and this process may open %d (hard limit %d): raise the hard limit (ulimit -Hn, or LimitNOFILE= in a systemd unit)", conns, need, soft, hard)
	}
	return nil
}

// orSkip maps a zero duration flag to bench's "skip".
func orSkip(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// benchRemote benches a running server, minting tokens with its secret.
func benchRemote(ctx context.Context, c *Config, b *benchFlags, stdout io.Writer) (*bench.Report, error) {
	if c.JWTSecret == "" {
		return nil, errors.New("--url needs the server's --jwt-secret (SECKILL_JWT_SECRET) to mint tokens")
	}
	tokens, err := auth.NewTokens([]byte(c.JWTSecret))
	if err != nil {
		return nil, err
	}
	cfg, err := benchConfig(c, b, "remote", stdout)
	if err != nil {
		return nil, err
	}
	cfg.URL = b.url
	cfg.Token = func(id int64, admin bool) (string, error) {
		return tokens.Mint(auth.Identity{UserID: id, Admin: admin}, time.Hour)
	}
	cfg.Watch = append([]bench.Watch{{Name: "bench (client)", Self: true}}, serverWatches(b.url)...)
	cfg.Watch = append(cfg.Watch, backendWatches(c)...)
	fmt.Fprintf(stdout, "bench %s: %d buyers × %d, %d connections; the bare handler is served by this bench on loopback, not beside the server\n",
		b.url, b.users, b.repeat, b.concurrency)
	return bench.Run(ctx, cfg)
}

// benchInProcess starts the service in this process in c.Mode and benches
// it. The embedded default runs in a fresh temporary directory.
func benchInProcess(ctx context.Context, c *Config, b *benchFlags, stdout, stderr io.Writer) (*bench.Report, error) {
	embedded, err := c.embedded()
	if err != nil {
		return nil, err
	}
	backend := "embedded"
	if embedded {
		dir, err := os.MkdirTemp("", "seckill-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		c.DataDir = dir
	} else {
		backend, _, _ = strings.Cut(c.DBURL, "://")
	}
	// The watches find the database by its own port, before the service's
	// URL goes through the proxy.
	watches := append([]bench.Watch{{Name: "bench (client + server)", Self: true}}, backendWatches(c)...)
	db, err := proxyDB(ctx, c, b, stdout)
	if err != nil {
		return nil, err
	}
	if db != nil {
		defer db.close()
		if b.dbLatency > 0 {
			backend += "+" + b.dbLatency.String()
		}
		if b.dbOutage > 0 {
			backend += "/outage " + b.dbOutage.String()
		}
	}
	svc, err := startService(ctx, c, stderr, b.backlog)
	if err != nil {
		return nil, err
	}
	defer svc.close()
	label := c.Mode + "/" + backend
	fmt.Fprintf(stdout, "bench %s: %d buyers × %d, %d connections, in this process at %s\n", label, b.users, b.repeat, b.concurrency, svc.url)
	cfg, err := benchConfig(c, b, label, stdout)
	if err != nil {
		return nil, err
	}
	cfg.URL = svc.url
	cfg.ServerInProcess = true
	cfg.Watch = watches
	if db != nil {
		db.configure(&cfg, b, stdout)
	}
	cfg.Token = func(id int64, admin bool) (string, error) {
		return svc.tokens.Mint(auth.Identity{UserID: id, Admin: admin}, time.Hour)
	}
	if b.backlog {
		cfg.BeforeDrain = func() {
			if err := svc.StartWorkers(ctx); err != nil {
				svc.Logger.Error("start the workers", "err", err)
			}
		}
	}
	cfg.Agree = svc.agree()
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return report, svc.Shutdown(ctx)
}

// serverWatches are the servers of urls that run on this machine: the
// processes listening on their ports, else those named seckill.
func serverWatches(urls string) []bench.Watch {
	var out []bench.Watch
	for _, raw := range strings.Split(urls, ",") {
		if port := loopbackPort(strings.TrimSpace(raw), 80); port > 0 {
			out = append(out, bench.Watch{Name: "seckill :" + strconv.Itoa(port), Port: port, Comms: []string{"seckill"}, Server: true})
		}
	}
	return out
}

// backendWatches are Redis and the database when they run on this
// machine; the embedded default's run in this process.
func backendWatches(c *Config) []bench.Watch {
	var out []bench.Watch
	if port := loopbackPort(c.RedisURL, 6379); port > 0 {
		out = append(out, bench.Watch{Name: "redis-server", Port: port, Comms: []string{"redis-server"}})
	}
	switch scheme, _, _ := strings.Cut(c.DBURL, "://"); scheme {
	case "mysql":
		if port := loopbackPort(c.DBURL, 3306); port > 0 {
			out = append(out, bench.Watch{Name: "mariadbd", Port: port, Comms: []string{"mariadbd", "mysqld"}, Database: true})
		}
	case "postgres", "postgresql":
		if port := loopbackPort(c.DBURL, 5432); port > 0 {
			out = append(out, bench.Watch{Name: "postgres", Port: port, Comms: []string{"postgres"}, Database: true})
		}
	}
	return out
}

// loopbackPort returns the port of a URL whose host is this machine's
// loopback (def when it names none), or 0.
func loopbackPort(raw string, def int) int {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0
	}
	if h := u.Hostname(); h != "localhost" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return 0
		}
	}
	if u.Port() == "" {
		return def
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

// agree returns the check that Redis and the database agree about a
// voucher (G6), or nil in the sync mode, where Redis holds no stock.
func (s *service) agree() func(ctx context.Context, voucherID int64) (bool, string, error) {
	if s.Redis == nil {
		return nil
	}
	r := s.Reconciler
	return func(ctx context.Context, voucherID int64) (bool, string, error) {
		rec, err := r.Reconcile(ctx, voucherID, false)
		if err != nil {
			return false, "", err
		}
		return rec.OK(), fmt.Sprintf("Redis remaining %d + database orders %d + pending %d = %d, the initial stock %d",
			rec.Remaining, rec.Orders, rec.Pending, rec.Remaining+rec.Orders+rec.Pending, rec.Voucher.InitialStock), nil
	}
}

// isTerminal reports whether w is a terminal, for a progress bar.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
