package main

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/monitor/monitortest"
)

// statsRow returns the fields of the table row of voucher id in out, with
// "*" for those that want has "*" (a time that moves, a length that
// depends on the trimming).
func statsRow(t *testing.T, out string, want []string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != len(want) || f[0] != want[0] {
			continue
		}
		for i := range f {
			if want[i] == "*" {
				f[i] = "*"
			}
		}
		return f
	}
	t.Fatalf("no row for voucher %s in:\n%s", want[0], out)
	return nil
}

// TestStatsRealServices: `seckill stats` reads a sale from Redis and the
// database; with --url, from a running server, with its admissions.
func TestStatsRealServices(t *testing.T) {
	s := monitortest.Start(t, monitortest.Options{HoldWorkers: true})
	v := s.Voucher(10)
	id := strconv.FormatInt(v.ID, 10)
	s.Run(v.ID, 1, 12, 1)
	msgs := s.Deliver(v.ID, "stuck", 2)
	s.DeadLetter(msgs[0])

	env := environ{"SECKILL_REDIS_URL": s.RedisURL, "SECKILL_REDIS_PREFIX": s.Prefix, "SECKILL_DB_URL": s.DBURL}
	code, out, errOut := runCmd(env, "stats")
	if code != 0 {
		t.Fatalf("seckill stats = %d:\n%s%s", code, out, errOut)
	}
	// 10 admitted, 1 dead-lettered (its stock back): 9 pending, 1 of them
	// delivered; drift 0.
	want := []string{id, "monitortest", "10", "10", "1", "0", "1", "9", "0", "9", "1", "8", "*", "1", "1", "127.0.0.1:6379"}
	if diff := cmp.Diff(want, statsRow(t, out, want)); diff != "" {
		t.Errorf("voucher row (-want +got):\n%s\n%s", diff, out)
	}
	if !strings.Contains(out, "seckill stats --url") {
		t.Errorf("no hint about --url:\n%s", out)
	}

	code, out, errOut = runCmd(environ{"SECKILL_JWT_SECRET": monitortest.Secret}, "stats", "--url", s.URL)
	if code != 0 {
		t.Fatalf("seckill stats --url = %d:\n%s%s", code, out, errOut)
	}
	if diff := cmp.Diff(want, statsRow(t, out, want)); diff != "" {
		t.Errorf("--url: voucher row (-want +got):\n%s\n%s", diff, out)
	}
	// All within the last 10s; the busiest second depends on the clock.
	for _, row := range []string{"admitted 10 10 10 ", "sold_out 2 2 2 "} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), row) {
			t.Errorf("--url: no admissions row %q:\n%s", row, out)
		}
	}
	if !strings.Contains(out, "workers: consumer "+s.Consumer+", mode stream, 0 busy of 4 allowed, breaker closed") {
		t.Errorf("--url: no workers line:\n%s", out)
	}

	code, out, errOut = runCmd(environ{"SECKILL_JWT_SECRET": strings.Repeat("x", 40)}, "stats", "--url", s.URL)
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("--url with another secret = %d, want 1 saying 401:\n%s%s", code, out, errOut)
	}
}

// TestStatsEmbedded: on the embedded default, `seckill stats` reaches the
// Redis inside the running serve, and --url the serve itself.
func TestStatsEmbedded(t *testing.T) {
	dir := t.TempDir()
	p := start(t, environ{}, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	base := p.stdout.wait(t, `Listening on (http://\S+)`)[1]
	admin := p.stdout.wait(t, `export TOKEN=(\S+)`)[1]
	id := createAndRead(t, base, admin)

	code, out, errOut := runCmd(environ{}, "token", "--data-dir", dir, "--user", "7")
	if code != 0 {
		t.Fatalf("seckill token = %d: %s", code, errOut)
	}
	if status, res := call(t, "POST", base+"/api/vouchers/"+id+"/seckill", strings.TrimSpace(out), ""); status != 200 {
		t.Fatalf("buy = %d %v", status, res)
	}
	// The serve's workers write the order; their consumer reads the stream.
	want := []string{id, "e2e", "7", "6", "6", "1", "0", "0", "0", "*", "0", "0", "*", "1", "0", "*"}
	waitFor(t, 20*time.Second, func() (bool, string) {
		code, out, errOut := runCmd(environ{}, "stats", "--data-dir", dir)
		if code != 0 {
			t.Fatalf("seckill stats = %d:\n%s%s", code, out, errOut)
		}
		diff := cmp.Diff(want, statsRow(t, out, want))
		return diff == "", "voucher row (-want +got):\n" + diff + "\n" + out
	})
	code, out, errOut = runCmd(environ{}, "stats", "--data-dir", dir, "--url", base)
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "admitted 1 1 1 1") {
		t.Errorf("seckill stats --url = %d:\n%s%s", code, out, errOut)
	}
	// The serve's own pool reports: its default width, its breaker.
	if !regexp.MustCompile(`workers: consumer \S+, mode stream, \d+ busy of 4 allowed, breaker closed`).MatchString(out) {
		t.Errorf("seckill stats --url: no workers line from the pool:\n%s", out)
	}
}

// TestPrintStatsShards: a sharded voucher's row says how many shards it
// has, and a table under the vouchers shows each shard and its master.
func TestPrintStatsShards(t *testing.T) {
	t.Parallel()
	lag := int64(2)
	st := &seckill.Stats{Time: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Vouchers: []seckill.VoucherStats{
		{Voucher: &seckill.Voucher{ID: 5, Title: "plain", Stock: 3, InitialStock: 3, Shards: 1}, RedisNode: "10.0.0.1:6379"},
		{Voucher: &seckill.Voucher{ID: 6, Title: "hot", Stock: 9, InitialStock: 9, Shards: 2}, Shards: []seckill.ShardState{
			{Index: 0, Tag: "g1.0.3", Node: "10.0.0.1:6379", Loaded: true, Remaining: 4, Buyers: 1, Length: 3, Pending: 1, Lag: &lag, DeadLetters: 1, TransfersOut: 1, TransferredOut: 2},
			{Index: 1, Tag: "g1.1.0", Node: "10.0.0.2:6379"},
		}},
	}}
	var b strings.Builder
	printStats(&b, st, "test", false)
	out := b.String()
	for _, want := range [][]string{
		{"6", "hot", "9", "9", "not", "loaded", "0", "0", "0", "0", "0", "0", "unknown", "0s", "0", "0", "2", "shards"},
		{"0", "g1.0.3", "4", "1", "3", "1", "2", "1", "1", "2", "10.0.0.1:6379"},
		{"1", "g1.1.0", "not", "loaded", "0", "0", "0", "unknown", "0", "0", "0", "10.0.0.2:6379"},
	} {
		if diff := cmp.Diff(want, statsRow(t, out, want)); diff != "" {
			t.Errorf("row (-want +got):\n%s\n%s", diff, out)
		}
	}
	if !strings.Contains(out, "voucher 6: 2 shards") || strings.Contains(out, "voucher 5: ") {
		t.Errorf("want a shards table for voucher 6 only:\n%s", out)
	}
}

// TestPrintStatsMoney: each voucher's price and its paid orders' revenue
// are printed in the currency's units.
func TestPrintStatsMoney(t *testing.T) {
	t.Parallel()
	st := &seckill.Stats{Time: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Vouchers: []seckill.VoucherStats{
		{Voucher: &seckill.Voucher{ID: 5, Title: "coffee", Stock: 3, InitialStock: 6, Shards: 1, Price: 1250, Currency: "CNY"}, Paid: 3},
		{Voucher: &seckill.Voucher{ID: 6, Title: "ramen", Stock: 9, InitialStock: 9, Shards: 1, Price: 1200, Currency: "JPY"}},
	}}
	var b strings.Builder
	printStats(&b, st, "test", false)
	out := b.String()
	for _, want := range [][]string{
		{"voucher", "title", "price", "paid", "revenue"},
		{"5", "coffee", "12.50", "CNY", "3", "37.50", "CNY"},
		{"6", "ramen", "1200", "JPY", "0", "0", "JPY"},
	} {
		if !containsRow(out, want) {
			t.Errorf("no row %q in:\n%s", want, out)
		}
	}
}

// containsRow reports whether a line of out has exactly the fields want.
func containsRow(out string, want []string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		if slices.Equal(strings.Fields(line), want) {
			return true
		}
	}
	return false
}
