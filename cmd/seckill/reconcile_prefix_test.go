package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// TestReconcileWrongPrefixSaysSo: reconcile pointed at a Redis key prefix
// the service does not use finds none of the vouchers on sale loaded, and
// says that it may be looking at the wrong Redis or prefix before it
// suggests a repair (which would write them where the service does not
// look); it still exits as drifted.
func TestReconcileWrongPrefixSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, dbURL := migratedMySQL(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := &seckill.Voucher{Title: "served under another prefix", Stock: 5, InitialStock: 5, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour), Generation: 1}
	if err := store.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.RedisPrefix(t) // nothing was ever loaded under it
	code, out := execReconcile(t, serveEnv(testenv.RedisURL(t), prefix, dbURL))
	if code == 0 {
		t.Errorf("reconcile of a voucher Redis does not hold: exit 0, want the drift's exit code:\n%s", out)
	}
	for _, want := range []string{"none of them loaded in Redis", "--redis-prefix \"" + prefix + "\"", "--repair"} {
		if !strings.Contains(out, want) {
			t.Errorf("reconcile's answer lacks %q:\n%s", want, out)
		}
	}
}
