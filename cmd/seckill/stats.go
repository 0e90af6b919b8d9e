package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/monitor"
)

func runStats(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c   Config
		url string
	)
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	c.redisFlags(fs)
	c.dbFlags(fs)
	c.secretFlags(fs)
	c.logFlags(fs)
	c.saleFlags(fs, "how the service takes orders: stream, queue or sync (in the sync mode the database's stock is what remains)")
	fs.DurationVar(&c.ClaimLease, "claim-lease", 30*time.Second, "the service's claim lease: a consumer idle for twice as long no longer counts")
	fs.StringVar(&url, "url", "", "read a running server's GET /api/admin/stats instead, with its admissions per second and its workers (signs an admin token with --jwt-secret, or the embedded default's in --data-dir)")
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	var (
		st     *seckill.Stats
		source string
		err    error
	)
	if url != "" {
		source = "server " + url
		st, err = serverStats(ctx, &c, url)
	} else {
		source = "Redis and the database"
		st, err = directStats(ctx, &c, stderr)
	}
	if err != nil {
		return err
	}
	printStats(stdout, st, source, url != "")
	return nil
}

// directStats reads the open vouchers from Redis and the database, as a
// server's monitor does.
func directStats(ctx context.Context, c *Config, stderr io.Writer) (*seckill.Stats, error) {
	mode, err := seckill.ParseMode(c.Mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	t, err := openTool(ctx, c, stderr)
	if err != nil {
		return nil, err
	}
	defer t.close()
	mon, err := monitor.New(monitor.Config{
		Vouchers:     t.Vouchers,
		Store:        t.store,
		Streams:      t.cache,
		Mode:         mode,
		ActiveWithin: 2 * c.ClaimLease,
		CacheFor:     -1,
		Logger:       t.logger,
	})
	if err != nil {
		return nil, err
	}
	return mon.Stats(ctx)
}

// serverStats asks a running server for its snapshot, with a short-lived
// admin token signed by the configured secret.
func serverStats(ctx context.Context, c *Config, base string) (*seckill.Stats, error) {
	secret, err := jwtSecret(c, c.JWTSecret == "")
	if err != nil {
		return nil, err
	}
	tokens, err := auth.NewTokens(secret)
	if err != nil {
		return nil, err
	}
	token, err := tokens.Mint(auth.Identity{UserID: 1, Admin: true}, time.Minute)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(base, "/")+"/api/admin/stats", nil)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the stats of %s: %w", base, err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		json.Unmarshal(body, &e)
		if e.Code == "" {
			return nil, fmt.Errorf("%s answered %s", base, res.Status)
		}
		return nil, fmt.Errorf("%s answered %s: %s: %s", base, res.Status, e.Code, e.Message)
	}
	return decodeStats(body)
}

// decodeStats reads GET /api/admin/stats's answer.
func decodeStats(body []byte) (*seckill.Stats, error) {
	var j sechttp.StatsJSON
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, fmt.Errorf("decode the stats: %w", err)
	}
	return j.Stats(), nil
}

// printStats writes the snapshot as tables: the vouchers, then, from a
// server, its admissions and workers.
func printStats(w io.Writer, st *seckill.Stats, source string, server bool) {
	fmt.Fprintf(w, "seckill stats at %s, from %s\n\n", st.Time.UTC().Format(time.RFC3339), source)
	if len(st.Vouchers) == 0 {
		fmt.Fprintln(w, "no vouchers on sale or ended within the retention (--retention)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "voucher\ttitle\tinitial\tdb stock\tremaining\tcreated\tfailed\tpending\tdrift\tstream\tdelivered\tundelivered\toldest pending\tconsumers\tdead letters\tredis master\t")
		for _, vs := range st.Vouchers {
			v, s := vs.Voucher, vs.Stream
			node := vs.RedisNode
			switch {
			case len(vs.Shards) > 0:
				node = fmt.Sprintf("%d shards", len(vs.Shards))
			case node == "":
				node = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t\n",
				v.ID, shorten(v.Title, 24), v.InitialStock, v.Stock, orNot(vs.Remaining, "not loaded"), vs.Created, vs.Failed, vs.Pending, vs.Drift,
				s.Length, s.Pending, orNot(s.Lag, "unknown"), s.OldestAge.Round(100*time.Millisecond), s.Consumers, s.DeadLetters, node)
		}
		tw.Flush()
		fmt.Fprintln(w, "\nremaining + created + pending = initial when drift is 0; \"delivered\" are with a worker, not yet acknowledged.")
		printMoney(w, st)
		for _, vs := range st.Vouchers {
			if len(vs.Shards) > 0 {
				printShards(w, vs)
			}
		}
	}
	if !server {
		fmt.Fprintln(w, "\n(admissions per second and workers live in a server: seckill stats --url http://host:port)")
		return
	}
	printAdmissions(w, st)
	ws := st.Workers
	fmt.Fprintf(w, "\nworkers: consumer %s, mode %s, %d busy of %d allowed, breaker %s\n", orDash(ws.Consumer), orDash(string(ws.Mode)), ws.Busy, ws.Allowed, orDash(ws.Breaker))
}

// printShards writes the shards of a sharded voucher as a table, each with
// its master: the admissions of its buyers run there.
// printMoney prints what each voucher sells for and what its paid orders
// took, in the currency's units.
func printMoney(w io.Writer, st *seckill.Stats) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "voucher\ttitle\tprice\tpaid\trevenue\t")
	for _, vs := range st.Vouchers {
		v := vs.Voucher
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t\n", v.ID, shorten(v.Title, 24), seckill.FormatMoney(v.Price, v.Currency), vs.Paid,
			seckill.FormatMoney(vs.Revenue(), v.Currency))
	}
	tw.Flush()
}

func printShards(w io.Writer, vs seckill.VoucherStats) {
	fmt.Fprintf(w, "\nvoucher %d: %d shards\n", vs.Voucher.ID, len(vs.Shards))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\ttag\tremaining\tbuyers\tstream\tdelivered\tundelivered\tdead letters\ttransfers out\tunits out\tredis master\t")
	for _, sh := range vs.Shards {
		remaining := "not loaded"
		if sh.Loaded {
			remaining = strconv.FormatInt(sh.Remaining, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t\n", sh.Index, sh.Tag, remaining, sh.Buyers,
			sh.Length, sh.Pending, orNot(sh.Lag, "unknown"), sh.DeadLetters, sh.TransfersOut, sh.TransferredOut, orDash(sh.Node))
	}
	tw.Flush()
}

// printAdmissions writes the server's admissions by result: over the last
// 10 seconds, minute and 5 minutes, and the busiest second.
func printAdmissions(w io.Writer, st *seckill.Stats) {
	type sums struct{ s10, m1, m5, peak int64 }
	by := map[string]*sums{}
	n := len(st.Admissions)
	for i, sec := range st.Admissions {
		for result, c := range sec.Counts {
			s := by[result]
			if s == nil {
				s = &sums{}
				by[result] = s
			}
			s.m5 += c
			if i >= n-60 {
				s.m1 += c
			}
			if i >= n-10 {
				s.s10 += c
			}
			s.peak = max(s.peak, c)
		}
	}
	fmt.Fprintln(w)
	if len(by) == 0 {
		fmt.Fprintln(w, "admissions: none in the last 5 minutes")
		return
	}
	results := make([]string, 0, len(by))
	for r := range by {
		results = append(results, r)
	}
	sort.Slice(results, func(i, j int) bool { return by[results[i]].m5 > by[results[j]].m5 })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "admissions\tlast 10s\tlast 1m\tlast 5m\tpeak/s\t")
	for _, r := range results {
		s := by[r]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", r, s.s10, s.m1, s.m5, s.peak)
	}
	tw.Flush()
}

func orNot(n *int64, unknown string) string {
	if n == nil {
		return unknown
	}
	return strconv.FormatInt(*n, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten cuts s to n characters, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
