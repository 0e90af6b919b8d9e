package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
)

// TestDLQRealServices: dead letters made as the workers make them, then
// `seckill dlq` lists, retries and discards them against the real Redis and
// MariaDB, while a `seckill serve` on the same services persists the
// retried order.
func TestDLQRealServices(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix, dbURL := testenv.RedisURL(t), testenv.RedisPrefix(t), testenv.MySQLURL(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := mysql.Open(ctx, dbURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cache, err := redis.Open(ctx, redis.Config{URL: redisURL, Prefix: prefix}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	ops := app.NewOps(seckill.ModeStream, 0, store, cache, logger)
	vouchers := ops.Vouchers
	if err := ops.Ledger.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	view, err := vouchers.Create(ctx, &seckill.Voucher{Title: "dlq", Stock: 2, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	v := view.ID
	// Orders 101 (user 10) and 102 (user 11) admitted and dead-lettered;
	// then order 103 (user 12) takes one of the two units back.
	for _, o := range [][2]int64{{101, 10}, {102, 11}} {
		if err := cache.Admit(ctx, seckill.Admission{VoucherID: v, Generation: view.Generation, UserID: o[1], OrderID: o[0]}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := cache.ReadOrders(ctx, seckill.Shard{VoucherID: v}, "test", 10, 0)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("read orders: %d, %v", len(msgs), err)
	}
	for _, m := range msgs {
		o := m.Order
		o.Status, o.Reason = seckill.OrderFailed, "test: refused"
		if err := store.FailOrder(ctx, &o); err != nil {
			t.Fatal(err)
		}
		if moved, err := cache.DeadLetter(ctx, m, seckill.DeadLetter{Reason: "test: refused"}); err != nil || !moved {
			t.Fatalf("dead-letter: %v, %v", moved, err)
		}
	}
	if err := cache.Admit(ctx, seckill.Admission{VoucherID: v, Generation: view.Generation, UserID: 12, OrderID: 103}); err != nil {
		t.Fatal(err)
	}

	env := environ{
		"SECKILL_REDIS_URL":    redisURL,
		"SECKILL_REDIS_PREFIX": prefix,
		"SECKILL_DB_URL":       dbURL,
		"SECKILL_JWT_SECRET":   testSecret,
		"SECKILL_ADDR":         "127.0.0.1:0",
	}
	code, out, errOut := runCmd(env, "dlq", "list")
	if code != 0 {
		t.Fatalf("dlq list = %d\n%s%s", code, out, errOut)
	}
	for _, order := range []string{"101  ", "102  "} {
		if !regexp.MustCompile(`(?m)^` + order + `\s*` + fmt.Sprint(v) + `\s+1\d\d\s+1[01]\s+\S+Z\s+yes\s+test: refused$`).MatchString(out) {
			t.Errorf("dlq list does not show order %s with its voucher, user, time, stock returned and reason:\n%s", order, out)
		}
	}
	if !strings.Contains(out, "2 dead letter(s)") {
		t.Errorf("dlq list does not count 2 dead letters:\n%s", out)
	}

	// A serve on the same services: its workers persist the retried order.
	p := start(t, env, "serve")
	p.stderr.wait(t, `"msg":"seckill listening"`)

	code, out, errOut = runCmd(env, "dlq", "retry", "101")
	if code != 0 || !strings.Contains(out, "order 101 admitted again, pending") {
		t.Fatalf("dlq retry 101 = %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{`"admin":0`, `"via":"cli"`, `"dead_letter":"101"`, `"outcome":"admitted"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the retry's log lacks %s:\n%s", want, errOut)
		}
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		o, err := store.Order(ctx, 101)
		return err == nil && o.Status == seckill.OrderCreated, fmt.Sprintf("order 101 = %+v, %v; want created", o, err)
	})

	// Sold out: refused, exit 1, nothing changed.
	code, out, errOut = runCmd(env, "dlq", "retry", "102", "--admin-id", "9")
	if code != 1 || !strings.Contains(errOut, "sold out") || !strings.Contains(errOut, "stays failed") || !strings.Contains(errOut, `"admin":9`) {
		t.Errorf("dlq retry 102 when sold out = %d, want 1 saying sold out and that the order stays failed, logged as admin 9:\n%s%s", code, out, errOut)
	}
	if code, out, _ := runCmd(env, "dlq", "list"); code != 0 || !strings.Contains(out, "102  ") || strings.Contains(out, "101  ") {
		t.Errorf("dlq list after the retries = %d, want 102 only:\n%s", code, out)
	}

	code, out, errOut = runCmd(env, "dlq", "--admin-id=9", "discard", "102")
	if code != 0 || !strings.Contains(out, "dead letter 102 discarded") {
		t.Fatalf("dlq discard 102 = %d\n%s%s", code, out, errOut)
	}
	if o, err := store.Order(ctx, 102); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("order 102 after its discard = %+v, %v; want failed", o, err)
	}
	if code, out, _ := runCmd(env, "dlq", "list"); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq list after the discard = %d, want none:\n%s", code, out)
	}
	if code, _, errOut := runCmd(env, "dlq", "discard", "102"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("dlq discard 102 again = %d %q, want 1 and not found", code, errOut)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("serve exited %d", code)
	}
}

// TestDLQEmbedded: on the embedded default, `seckill dlq` reaches the Redis
// inside the running serve. A buyer that Redis forgot and admitted twice
// has their second order dead-lettered; a retry is refused (they have an
// order), a discard removes it.
func TestDLQEmbedded(t *testing.T) {
	dir := t.TempDir()
	p := start(t, environ{}, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	base := p.stdout.wait(t, `Listening on (http://\S+)`)[1]
	admin := p.stdout.wait(t, `export TOKEN=(\S+)`)[1]
	voucher := createAndRead(t, base, admin)
	code, out, errOut := runCmd(environ{}, "token", "--data-dir", dir, "--user", "7")
	if code != 0 {
		t.Fatalf("seckill token = %d: %s", code, errOut)
	}
	buyer := strings.TrimSpace(out)
	buy := func() string {
		t.Helper()
		status, res := call(t, "POST", base+"/api/vouchers/"+voucher+"/seckill", buyer, "")
		if status != 200 {
			t.Fatalf("buy = %d %v", status, res)
		}
		return res["orderId"].(string)
	}
	first := buy()
	waitFor(t, 20*time.Second, func() (bool, string) {
		status, res := call(t, "GET", base+"/api/orders/"+first, buyer, "")
		return status == 200 && res["status"] == "created", fmt.Sprintf("order %s = %d %v", first, status, res)
	})
	addr, err := os.ReadFile(filepath.Join(dir, embeddedAddrFile))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{strings.TrimSpace(string(addr))}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.Do(context.Background(), raw.B().Hdel().Key("seckill:{v"+voucher+"}:buyers").Field("7").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	second := buy()

	args := []string{"--data-dir", dir}
	waitFor(t, 20*time.Second, func() (bool, string) {
		code, out, errOut := runCmd(environ{}, append([]string{"dlq", "list"}, args...)...)
		return code == 0 && strings.Contains(out, second+"  "), fmt.Sprintf("dlq list = %d\n%s%s", code, out, errOut)
	})
	code, out, errOut = runCmd(environ{}, append([]string{"dlq", "retry", second}, args...)...)
	if code != 1 || !strings.Contains(errOut, "already has order "+first) {
		t.Errorf("dlq retry %s = %d, want 1 saying the buyer has order %s:\n%s%s", second, code, first, out, errOut)
	}
	code, out, errOut = runCmd(environ{}, append([]string{"dlq", "discard", second}, args...)...)
	if code != 0 || !strings.Contains(out, "discarded") {
		t.Errorf("dlq discard %s = %d\n%s%s", second, code, out, errOut)
	}
	status, res := call(t, "GET", base+"/api/orders/"+second, buyer, "")
	if status != 200 || res["status"] != "failed" {
		t.Errorf("order %s after its discard = %d %v, want failed", second, status, res)
	}
	if code, out, _ := runCmd(environ{}, append([]string{"dlq", "list"}, args...)...); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq list after the discard = %d:\n%s", code, out)
	}
	if _, err := strconv.ParseInt(second, 10, 64); err != nil {
		t.Errorf("order id %q is not decimal", second)
	}
}

func TestDLQUsage(t *testing.T) {
	for _, args := range [][]string{{"dlq"}, {"dlq", "retry"}, {"dlq", "frob"}, {"dlq", "list", "extra"}, {"dlq", "discard", "1", "2"}, {"dlq", "list", "--nope"}} {
		if code, _, errOut := runCmd(environ{}, args...); code != 2 || !strings.Contains(errOut, "run 'seckill dlq --help' for usage") {
			t.Errorf("%v: exit %d, %q; want 2 and where the usage is", args, code, errOut)
		}
	}
	code, out, _ := runCmd(environ{}, "dlq", "-h")
	if code != 0 || !strings.Contains(out, "retry ID") || !strings.Contains(out, "$SECKILL_REDIS_URL") {
		t.Errorf("dlq -h: exit %d:\n%s", code, out)
	}
	// No serve on the embedded default: said so, exit 1.
	if code, _, errOut := runCmd(environ{}, "dlq", "list", "--data-dir", t.TempDir()); code != 1 || !strings.Contains(errOut, "no seckill serve is running") {
		t.Errorf("dlq list with no serve: exit %d, %q", code, errOut)
	}
	cases := []struct {
		args       []string
		positional []string
		flags      []string
	}{
		{[]string{"retry", "5", "--admin-id", "3"}, []string{"retry", "5"}, []string{"--admin-id", "3"}},
		{[]string{"--admin-id", "3", "retry", "5"}, []string{"retry", "5"}, []string{"--admin-id", "3"}},
		{[]string{"retry", "--db-url=x", "5", "-h"}, []string{"retry", "5"}, []string{"--db-url=x", "-h"}},
		{[]string{"discard", "--", "-5"}, []string{"discard", "-5"}, nil},
	}
	for _, tc := range cases {
		var c Config
		fs := newDLQFlags(&c, new(int64))
		pos, flags := splitArgs(fs, tc.args)
		if strings.Join(pos, " ") != strings.Join(tc.positional, " ") || strings.Join(flags, " ") != strings.Join(tc.flags, " ") {
			t.Errorf("splitArgs(%q) = %q, %q; want %q, %q", tc.args, pos, flags, tc.positional, tc.flags)
		}
	}
}
