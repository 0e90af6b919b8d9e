package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/bench"
)

// demoFlags registers demo's flags: bench's names for the same settings
// (--users was --buyers here).
func demoFlags(fs *flagSet, buyers *int, stock *int64) {
	fs.IntVar(buyers, "users", 1000, "buyers who click")
	fs.alias("buyers", "users")
	fs.Int64Var(stock, "stock", 100, "vouchers on sale")
}

// runDemo runs a whole flash sale on the embedded default, in this process,
// and tells what happened in plain words.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c      Config
		buyers int
		stock  int64
	)
	fs := newFlagSet("demo")
	demoFlags(fs, &buyers, &stock)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "seckill-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.Mode, c.DataDir, c.Addr, c.Migrate = "stream", dir, "127.0.0.1:0", true
	c.LogLevel, c.LogFormat, c.TokenTTL, c.ShutdownTimeout = "error", "text", time.Hour, 15*time.Second
	c.ReadHeaderTimeout, c.ReadTimeout, c.WriteTimeout, c.IdleTimeout = 5*time.Second, 10*time.Second, 15*time.Second, time.Minute
	c.Workers, c.BatchSize, c.ClaimLease, c.MaxDeliveries, c.QueueCapacity = 4, 100, 30*time.Second, 5, 10_000

	fmt.Fprintf(stdout, `seckill demo: a flash sale of %d vouchers, %d buyers clicking "buy" 2 or 3 times each.
It runs here, in this process, on the embedded default: an in-process Redis and a
SQLite file in a temporary directory. Nothing to install, nothing left behind.

`, stock, buyers)
	svc, err := startService(ctx, &c, stderr, false)
	if err != nil {
		return err
	}
	defer svc.close()
	start := time.Now()
	report, err := bench.Run(ctx, bench.Config{
		URL: svc.url, Label: "demo", Users: buyers, Repeat: 2, MaxRepeat: 3, Stock: stock, Concurrency: 32,
		ReferenceFor: -1, SoldOutFor: -1, Progress: stdout, Terminal: isTerminal(stdout), Agree: svc.agree(),
		Token: func(id int64, admin bool) (string, error) {
			return svc.tokens.Mint(auth.Identity{UserID: id, Admin: admin}, time.Hour)
		},
	})
	if err != nil {
		return err
	}
	a := report.Answers
	fmt.Fprintf(stdout, `
What happened, in %v:
  %d clicks in %.1fs: %.0f a second, half answered within %v, 99%% within %v.
  %d buyers got a voucher: their first click was answered "pending" (admitted in Redis).
  %d clicks from buyers who already had one were told "duplicate order", with the same order id.
  %d clicks came after the vouchers were gone and were told "sold out".
  Workers wrote the orders to the database in batches; all were there %v after the last click.

The books:
%s`, time.Since(start).Round(100*time.Millisecond), report.Requests, report.Seconds, report.Rate, report.P50, report.P99,
		report.Admitted, a["duplicate_order"], a["sold_out"], report.Drain.Round(time.Millisecond), bench.Verdict(report))
	if !report.OK() {
		return fmt.Errorf("the books do not balance")
	}
	if err := demoLifecycle(ctx, svc, 20, stdout); err != nil {
		return fmt.Errorf("act two: %w", err)
	}
	if err := svc.Shutdown(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nNext: go run ./cmd/seckill serve, and the README's walk-through; seckill bench --compare sync,queue,stream to see why the stream design wins.")
	return nil
}
