package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/bench"
)

// benchFlags are bench's own settings.
type benchFlags struct {
	url, compare, jsonFile, cpuProfile string
	users, repeat, concurrency         int
	stock                              int64
	duration, ceiling, soldOut         time.Duration
	backlog                            bool
}

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c Config
		b benchFlags
	)
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.redisFlags(fs)
	c.dbFlags(fs)
	c.secretFlags(fs)
	c.workerFlags(fs)
	c.limitFlags(fs)
	fs.StringVar(&c.Mode, "mode", "stream", "mode of the in-process server: stream, queue or sync")
	fs.StringVar(&b.url, "url", "", "bench a running server at this URL instead of one in this process (needs its --jwt-secret); several instances comma-separated, each sent requests in turn")
	fs.StringVar(&b.compare, "compare", "", "run each of these modes in turn, each on a fresh sale, e.g. sync,queue,stream")
	fs.IntVar(&b.users, "users", 1000, "buyers")
	fs.IntVar(&b.repeat, "repeat", 2, "requests per buyer")
	fs.Int64Var(&b.stock, "stock", 0, "the voucher's stock (default: a tenth of the buyers)")
	fs.IntVar(&b.concurrency, "concurrency", 64, "requests in flight at once")
	fs.DurationVar(&b.duration, "duration", 0, "run the sale this long, buyers asking again and again, instead of --users × --repeat requests")
	fs.DurationVar(&b.ceiling, "ceiling", 3*time.Second, "how long to measure the trivial endpoint GET /healthz, the ceiling (0: skip)")
	fs.DurationVar(&b.soldOut, "sold-out", 3*time.Second, "how long to measure the answers once sold out (0: skip)")
	fs.BoolVar(&b.backlog, "backlog", false, "hold the workers back during the sale, to time the drain of the whole backlog (in-process only)")
	fs.StringVar(&b.jsonFile, "json", "", "also write the reports to this file as JSON")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (client and in-process server) to this file")
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
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
	var reports []*bench.Report
	for _, mode := range modes {
		var (
			r   *bench.Report
			err error
		)
		if b.url != "" {
			r, err = benchRemote(ctx, &c, &b, stdout)
		} else {
			cc := c
			cc.Mode = strings.TrimSpace(mode)
			r, err = benchInProcess(ctx, &cc, &b, stdout, stderr)
		}
		if err != nil {
			return err
		}
		reports = append(reports, r)
		fmt.Fprintln(stdout)
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
func benchConfig(b *benchFlags, label string, stdout io.Writer) bench.Config {
	return bench.Config{
		Label: label, Users: b.users, Repeat: b.repeat, Stock: b.stock, Concurrency: b.concurrency,
		Duration: b.duration, CeilingFor: orSkip(b.ceiling), SoldOutFor: orSkip(b.soldOut),
		Progress: stdout, Terminal: isTerminal(stdout),
	}
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
	cfg := benchConfig(b, "remote", stdout)
	cfg.URL = b.url
	cfg.Token = func(id int64, admin bool) (string, error) {
		return tokens.Mint(auth.Identity{UserID: id, Admin: admin}, time.Hour)
	}
	fmt.Fprintf(stdout, "bench %s: %d buyers × %d, concurrency %d\n", b.url, b.users, b.repeat, b.concurrency)
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
	svc, err := startService(ctx, c, stderr, b.backlog)
	if err != nil {
		return nil, err
	}
	defer svc.close()
	label := c.Mode + "/" + backend
	fmt.Fprintf(stdout, "bench %s: %d buyers × %d, concurrency %d, in this process at %s\n", label, b.users, b.repeat, b.concurrency, svc.url)
	cfg := benchConfig(b, label, stdout)
	cfg.URL = svc.url
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

// agree returns the check that Redis and the database agree about a
// voucher (G6), or nil in the sync mode, where Redis holds no stock.
func (s *service) agree() func(ctx context.Context, voucherID int64) (bool, string, error) {
	if s.Mode == seckill.ModeSync {
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
