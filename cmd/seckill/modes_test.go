package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestQueueModeCrashLosesQueued shows the queue mode's known weakness, the
// reason the stream mode exists: orders admitted in Redis and waiting in
// the in-memory queue die with the process. The database hangs (a paused
// proxy), so admitted orders pile up in the queue; serve is killed; seckill
// reconcile must then report the drift, and some orders answered 200 must
// be missing from the database.
func TestQueueModeCrashLosesQueued(t *testing.T) {
	t.Parallel()
	prefix := testenv.RedisPrefix(t)
	redisURL := testenv.RedisURL(t)
	mysqlURL := testenv.MySQLURL(t)
	u, err := url.Parse(mysqlURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faults.StartProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr()
	env := serveEnv(redisURL, prefix, viaProxy.String())
	env["SECKILL_MODE"] = "queue"
	db := openDatabase(t, mysqlURL)
	client := newClient(t)

	s := startServe(t, "serve (queue mode)", env)
	voucher := createVoucher(t, client, s.url, saleStock)
	users := buyers(saleBuyers)
	l := newLoad(t, client, voucher, users)
	l.setTargets(s.url)
	l.start(t, shuffledAttempts(users, saleRepeats), 8, 5*time.Millisecond, time.Minute)
	l.waitCount(t, "200", 30, 30*time.Second)
	proxy.Pause()
	l.waitCount(t, "200", 100, 30*time.Second)
	s.kill()
	proxy.Resume()
	// What the load sends from now on finds nobody; its answers so far
	// are what counts.

	accepted, _ := l.orders()
	created, _, err := db.orders(context.Background(), voucher)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for id := range accepted {
		if _, ok := created[id]; !ok {
			lost++
		}
	}
	if lost == 0 {
		t.Errorf("no order answered 200 was lost when the queue mode's process died with the database hanging: %d answered, %d in the database", len(accepted), len(created))
	}
	direct := serveEnv(redisURL, prefix, mysqlURL)
	code, out := execReconcile(t, direct)
	if code != 3 || !strings.Contains(out, "disagree") {
		t.Errorf("seckill reconcile after the crash: exit %d, want 3 (drift):\n%s", code, out)
	}
	t.Logf("queue mode, killed with orders queued: %d answered 200, %d in the database, %d lost; reconcile:\n%s", len(accepted), len(created), lost, out)
}
