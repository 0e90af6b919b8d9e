package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
)

// TestToolsKeepServesRetention: the command line tools read SECKILL_RETENTION
// (and --retention) as serve does. With the default of a day instead,
// reconcile listed a voucher that serve, kept for an hour, had retired,
// called it drifted, and its repair made the retired voucher's keys again.
func TestToolsKeepServesRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, dbURL := migratedMySQL(t)
	// Ended two hours ago: serve, with a retention of an hour, retired it.
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := &seckill.Voucher{Title: "retired", Stock: 5, InitialStock: 5, BeginTime: now.Add(-3 * time.Hour), EndTime: now.Add(-2 * time.Hour), Generation: 1}
	if err := store.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	redisURL, prefix := testenv.RedisURL(t), testenv.RedisPrefix(t)
	env := serveEnv(redisURL, prefix, dbURL)
	env["SECKILL_RETENTION"] = "1h"

	code, out := execReconcile(t, env)
	if code != 0 || !strings.Contains(out, "no vouchers on sale or ended within 1h0m0s") {
		t.Errorf("seckill reconcile with SECKILL_RETENTION=1h: exit %d, want 0 and no voucher listed:\n%s", code, out)
	}

	cmd := exec.CommandContext(ctx, seckillBinary(t), "reconcile", "--repair", "--voucher", strconv.FormatInt(v.ID, 10))
	cmd.Env = childEnv(env)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err == nil || !strings.Contains(buf.String(), "not kept in Redis") {
		t.Errorf("seckill reconcile --repair of the retired voucher: %v, want it refused as not kept:\n%s", err, buf.String())
	}
	rv := openRedisView(t, redisURL, prefix)
	if _, loaded, err := rv.remaining(ctx, v.ID); err != nil || loaded {
		t.Errorf("the retired voucher's stock is in Redis again (loaded %v, %v)", loaded, err)
	}
}

// migratedMySQL opens the test's own MariaDB database, migrated, for a
// test that writes rows before it runs the binary on them; closed at the
// test's end.
func migratedMySQL(t *testing.T) (*mysql.Store, string) {
	t.Helper()
	dbURL := testenv.MySQLURL(t)
	store, err := mysql.Open(t.Context(), dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return store, dbURL
}
