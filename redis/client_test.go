package redis

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

// each runs test against the real Redis of this machine, a Redis Cluster
// and the embedded server: the same code must behave the same on all.
func each(t *testing.T, test func(t *testing.T, c *Client)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := testenv.RedisURL(t)
		c, err := Open(context.Background(), Config{URL: url, Prefix: testenv.RedisPrefix(t)}, testenv.Logger(t))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(c.Close)
		urls.Store(c, url)
		arm(t, c)
		test(t, c)
	})
	t.Run("cluster", func(t *testing.T) {
		// Every key a script or pipeline touches must be in one slot; a
		// Cluster refuses the ones that are not (CROSSSLOT).
		t.Parallel()
		cl := faults.SharedCluster(t)
		c := openCluster(t, cl)
		urls.Store(c, cl.URL)
		arm(t, c)
		test(t, c)
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		c, err := OpenEmbedded("", testenv.Logger(t))
		if err != nil {
			t.Fatalf("OpenEmbedded: %v", err)
		}
		t.Cleanup(c.Close)
		urls.Store(c, "redis://"+c.Addr())
		arm(t, c)
		test(t, c)
	})
}

// openCluster opens a Client on the Cluster under a prefix of its own,
// closed when the test ends.
func openCluster(t *testing.T, cl *faults.Cluster) *Client {
	t.Helper()
	c, err := Open(context.Background(), Config{URL: cl.URL, Prefix: "t" + testenv.Random()}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// urls holds the URL of each Client that each made, for sibling.
var urls sync.Map

// sibling opens another Client on the server and prefix of c, made by
// each: another instance of the service.
func sibling(t *testing.T, c *Client) *Client {
	t.Helper()
	url, ok := urls.Load(c)
	if !ok {
		t.Fatal("sibling of a Client that each did not make")
	}
	s, err := Open(context.Background(), Config{URL: url.(string), Prefix: c.keys.prefix, Embedded: c.embedded}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	arm(t, s)
	return s
}

// arm lets admissions run, as an instance does once it checked the server
// (seckill.VoucherService.Recover).
func arm(t testing.TB, c *Client) {
	t.Helper()
	ctx := context.Background()
	id, err := c.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if err := c.ArmAdmission(ctx, id); err != nil {
		t.Fatalf("ArmAdmission: %v", err)
	}
}

func TestOpenRefusesEvictingRedis(t *testing.T) {
	t.Parallel()
	url, _ := faults.StartRedis(t, "--maxmemory-policy", "allkeys-lru")
	_, err := Open(context.Background(), Config{URL: url}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("Open on a Redis with allkeys-lru: got %v, want an error that says to use noeviction", err)
	}
}

// TestOpenRefusesEvictingClusterMaster: every master of a Cluster is
// checked, not the one a keyless command happens to reach.
func TestOpenRefusesEvictingClusterMaster(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	evicting := cl.Masters(t)[2]
	if _, err := evicting.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	for range 5 { // a keyless command goes to a random node
		c, err := Open(ctx, Config{URL: cl.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), evicting.Addr) {
			t.Fatalf("Open on a Cluster with one master on allkeys-lru: got %v, want an error naming %s", err, evicting.Addr)
		}
	}
}

func TestOpenAcceptsNoeviction(t *testing.T) {
	t.Parallel()
	url, _ := faults.StartRedis(t, "--maxmemory-policy", "noeviction")
	c, err := Open(context.Background(), Config{URL: url}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c.Close()
}

func TestPingAfterServerStops(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping on a running server: %v", err)
	}
	c.server.Close()
	if err := c.Ping(ctx); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("Ping on a stopped server: got %v, want ErrUnavailable", err)
	}
}

func TestKeysShareHashTag(t *testing.T) {
	t.Parallel()
	k := keyspace{prefix: "p"}
	tag := func(key string) string {
		i, j := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
		if i < 0 || j < i {
			t.Fatalf("key %q has no hash tag", key)
		}
		return key[i : j+1]
	}
	v := k.voucher(42)
	for _, key := range []string{v.Stock, v.Meta, v.Buyers, v.Orders, v.DLQ} {
		if got := tag(key); got != "{v42}" {
			t.Errorf("voucher key %q has tag %s, want {v42}", key, got)
		}
	}
	l := k.login("+8613800000000")
	for _, key := range []string{l.Code, l.Tries, l.Cooldown} {
		if got := tag(key); got != "{+8613800000000}" {
			t.Errorf("login key %q has tag %s", key, got)
		}
	}
	if v.Stock == k.voucher(4).Stock || v.Stock == k.voucher(420).Stock {
		t.Errorf("distinct vouchers share key %q", v.Stock)
	}
}

// TestOpenRedactsPassword: a Redis URL that does not parse is named in the
// error without its password.
func TestOpenRedactsPassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://user:s3cretpw@127.0.0.1:notaport/0",
		"redis://:s3cretpw@[::1/0",
		"redis://user:s3cretpw@127.0.0.1:6379/notadb",
	} {
		_, err := Open(context.Background(), Config{URL: raw}, testenv.Logger(t))
		if err == nil {
			t.Errorf("Open(%q) = nil error, want a parse error", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("Open(%q) error shows the password: %v", raw, err)
		}
	}
}

// TestBlockingConnectionsClosed: a burst of reads that block (as many
// vouchers' readers, or admissions that wait for replicas) opens as many
// dedicated connections; once idle they are closed, down to a few, not
// kept for good.
func TestBlockingConnectionsClosed(t *testing.T) {
	old := blockingIdle
	blockingIdle = 200 * time.Millisecond
	t.Cleanup(func() { blockingIdle = old })
	rp := faults.StartRedisProc(t)
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + rp.Addr}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	mustLoad(t, c, onSale(1, 10))
	clients := func() int {
		for line := range strings.Lines(rp.Info("clients")) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return -1
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { c.WaitOrders(ctx, seckill.Shard{VoucherID: 1}, 2*time.Second) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	busy := 0
	for waiting := true; waiting; {
		busy = max(busy, clients())
		select {
		case <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	if busy < 50 {
		t.Fatalf("%d clients during 100 blocking reads, want about 100: the test does not make the burst", busy)
	}
	testenv.WaitFor(t, 10*time.Second, "idle blocking connections closed", func() bool { return clients() <= blockingMin+4 })
	t.Logf("%d clients during the burst, %d after", busy, clients())
}
