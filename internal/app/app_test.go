package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlite"
	"github.com/seckill/seckill/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var testSecret = []byte("app-test-secret-at-least-32-bytes-long")

// backend is the embedded backend serve runs without services: an
// in-process Redis-protocol server and a SQLite file. close closes both;
// the test's cleanup calls it too.
type backend struct {
	store seckill.Store
	cache *redis.Client
	close func()
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	ctx := context.Background()
	logger := testenv.Logger(t)
	store, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		t.Fatal(err)
	}
	cache, err := redis.OpenEmbedded("seckill", logger)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	b := &backend{store: store, cache: cache}
	closed := false
	b.close = func() {
		if !closed {
			closed = true
			cache.Close()
			store.Close()
		}
	}
	t.Cleanup(b.close)
	return b
}

// config is a service on b in mode, with every other setting at its
// default but the stream consumer's name.
func (b *backend) config(t *testing.T, mode seckill.Mode) Config {
	t.Helper()
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Mode: mode, Store: b.store, Cache: b.cache, Tokens: tokens, Logger: testenv.Logger(t),
		Stream: worker.Config{Consumer: "app-test"}}
}

// TestModes: each mode builds on the embedded backend, sells a voucher
// through its handler and persists the order, shuts down, and closes
// twice.
func TestModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []seckill.Mode{seckill.ModeSync, seckill.ModeQueue, seckill.ModeStream} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newBackend(t)
			cfg := b.config(t, mode)
			a, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.Mode != mode {
				t.Errorf("App.Mode = %q, want %q", a.Mode, mode)
			}
			if got, want := a.Pool != nil, mode == seckill.ModeStream; got != want {
				t.Errorf("stream workers built: %v, want %v", got, want)
			}
			if got, want := a.Queue != nil, mode == seckill.ModeQueue; got != want {
				t.Errorf("queue built: %v, want %v", got, want)
			}
			if err := a.StartWorkers(ctx); err != nil {
				t.Fatal(err)
			}

			admin := mint(t, cfg.Tokens, auth.Identity{UserID: 1, Admin: true})
			buyer := mint(t, cfg.Tokens, auth.Identity{UserID: 42})
			now := time.Now().UTC()
			var v struct{ ID string }
			call(t, a, http.MethodPost, "/api/admin/vouchers", admin, map[string]any{
				"title": "app test", "stock": 3, "beginTime": now.Add(-time.Minute), "endTime": now.Add(time.Hour),
			}, http.StatusCreated, &v)
			var bought struct{ OrderID, Status string }
			call(t, a, http.MethodPost, "/api/vouchers/"+v.ID+"/seckill", buyer, nil, http.StatusOK, &bought)
			// The sync mode writes the order in the request; the others
			// answer before a worker does.
			want := "pending"
			if mode == seckill.ModeSync {
				want = "created"
			}
			if bought.OrderID == "" || bought.Status != want {
				t.Fatalf("buy answered %+v; want an order id, %s", bought, want)
			}
			testenv.WaitFor(t, 10*time.Second, "the order persisted", func() bool {
				var o struct{ Status string }
				call(t, a, http.MethodGet, "/api/orders/"+bought.OrderID, buyer, nil, http.StatusOK, &o)
				return o.Status == "created"
			})

			if err := a.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			a.Close()
			a.Close()
		})
	}
}

// TestGroupCommitWired: with admissions that wait for replicas, New
// has them go in the group commit's batches (redisledger), counted by
// seckill_wait_batches_total; Close stops its loops (goleak, in
// TestMain). The embedded server's WAIT answers that no replica has
// anything: the buy is answered 503, not confirmed, by its batch.
func TestGroupCommitWired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBackend(t)
	cfg := b.config(t, seckill.ModeStream)
	wait, err := redis.Open(ctx, redis.Config{URL: "redis://" + b.cache.Addr() + "/0", Embedded: true, WaitReplicas: 1}, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer wait.Close()
	cfg.Cache = wait
	cfg.Test.NoNodeWait = true
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	admin := mint(t, cfg.Tokens, auth.Identity{UserID: 1, Admin: true})
	buyer := mint(t, cfg.Tokens, auth.Identity{UserID: 42})
	now := time.Now().UTC()
	var v struct{ ID string }
	call(t, a, http.MethodPost, "/api/admin/vouchers", admin, map[string]any{
		"title": "wait test", "stock": 3, "beginTime": now.Add(-time.Minute), "endTime": now.Add(time.Hour),
	}, http.StatusCreated, &v)
	call(t, a, http.MethodPost, "/api/vouchers/"+v.ID+"/seckill", buyer, nil, http.StatusServiceUnavailable, nil)
	want := redis.GroupCommitStats{Batches: 1, Admissions: 1, Waits: 1, Unconfirmed: 1}
	if got := wait.GroupCommitStats(); got != want {
		t.Errorf("GroupCommitStats after one buy = %+v, want %+v: the admission went in a batch", got, want)
	}
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	batches := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "seckill_wait_batches_total" {
			batches = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if batches != 1 {
		t.Errorf("seckill_wait_batches_total = %v, want 1", batches)
	}
}

// TestCloseTwice: Close, without Shutdown or Listen, stops what New
// started, and a second Close does nothing (goleak, in TestMain, sees
// what would be left).
func TestCloseTwice(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	a, err := New(context.Background(), b.config(t, seckill.ModeStream))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.StartWorkers(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	base := b.config(t, seckill.ModeStream)
	wait, err := redis.Open(context.Background(), redis.Config{URL: "redis://" + b.cache.Addr() + "/0", Embedded: true, WaitReplicas: 1}, base.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer wait.Close()
	for name, tc := range map[string]struct {
		change func(*Config)
		want   string // in the error; empty: no error
	}{
		"defaults":             {func(*Config) {}, ""},
		"no mode is stream":    {func(c *Config) { c.Mode = "" }, ""},
		"no store":             {func(c *Config) { c.Store = nil }, "required"},
		"no cache":             {func(c *Config) { c.Cache = nil }, "required"},
		"no tokens":            {func(c *Config) { c.Tokens = nil }, "required"},
		"no logger":            {func(c *Config) { c.Logger = nil }, "required"},
		"unknown mode":         {func(c *Config) { c.Mode = "fast" }, `mode "fast"`},
		"stream, no consumer":  {func(c *Config) { c.Stream.Consumer = "" }, "Consumer is required"},
		"queue, no consumer":   {func(c *Config) { c.Mode, c.Stream.Consumer = seckill.ModeQueue, "" }, ""},
		"stream waits":         {func(c *Config) { c.Cache = wait }, ""},
		"queue waits":          {func(c *Config) { c.Mode, c.Cache = seckill.ModeQueue, wait }, "needs --mode stream: the queue mode"},
		"sync waits":           {func(c *Config) { c.Mode, c.Cache = seckill.ModeSync, wait }, "needs --mode stream: the sync mode"},
		"sync, no consumer":    {func(c *Config) { c.Mode, c.Stream.Consumer = seckill.ModeSync, "" }, ""},
		"negative shutdown ok": {func(c *Config) { c.ShutdownTimeout = -time.Second }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := base
			tc.change(&cfg)
			err := cfg.withDefaults().validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validate: %v; want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validate: %v; want an error with %q", err, tc.want)
			}
		})
	}
}

// TestCheckWaitReplicas: the rule serve applies to the flag, before it
// opens anything.
func TestCheckWaitReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     seckill.Mode
		replicas int
		refused  bool
	}{
		{seckill.ModeStream, 0, false},
		{seckill.ModeStream, 2, false},
		{seckill.ModeQueue, 0, false},
		{seckill.ModeQueue, 1, true},
		{seckill.ModeSync, 0, false},
		{seckill.ModeSync, 1, true},
	} {
		if err := CheckWaitReplicas(tc.mode, tc.replicas); (err != nil) != tc.refused {
			t.Errorf("CheckWaitReplicas(%s, %d) = %v; want refused %v", tc.mode, tc.replicas, err, tc.refused)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Stream: worker.Config{Lease: 10 * time.Second}, Queue: worker.QueueConfig{DrainTimeout: time.Second}}.withDefaults()
	if c.Mode != seckill.ModeStream {
		t.Errorf("Mode = %q, want stream", c.Mode)
	}
	if c.Registry == nil {
		t.Error("no Registry")
	}
	if c.ShutdownTimeout != 15*time.Second {
		t.Errorf("ShutdownTimeout = %v, want 15s", c.ShutdownTimeout)
	}
	if c.Stream.DrainTimeout != c.ShutdownTimeout {
		t.Errorf("Stream.DrainTimeout = %v, want the shutdown timeout", c.Stream.DrainTimeout)
	}
	if c.Queue.DrainTimeout != time.Second {
		t.Errorf("Queue.DrainTimeout = %v, want the 1s set", c.Queue.DrainTimeout)
	}
	if c.StatsActiveWithin != 20*time.Second {
		t.Errorf("StatsActiveWithin = %v, want twice the lease", c.StatsActiveWithin)
	}
}

// TestNewFailsClean: a New that fails after it started the watch and the
// node lease (its workers' metrics are taken) returns an error and leaves
// no goroutine behind.
func TestNewFailsClean(t *testing.T) {
	// Not parallel: goleak.VerifyNone counts every goroutine of the
	// process, and the parallel tests wait until this one ends.
	b := newBackend(t)
	cfg := b.config(t, seckill.ModeStream)
	cfg.Registry = prometheus.NewRegistry()
	cfg.Registry.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_orders_redelivered_total", Help: "taken"}))
	a, err := New(context.Background(), cfg)
	if err == nil {
		a.Close()
		t.Fatal("New with a registry whose metrics are taken succeeded")
	}
	if !strings.Contains(err.Error(), "register metrics") {
		t.Fatalf("New: %v; want the workers' metrics refused", err)
	}
	b.close()
	goleak.VerifyNone(t)
}

func mint(t *testing.T, tokens *auth.Tokens, id auth.Identity) string {
	t.Helper()
	s, err := tokens.Mint(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// call sends a request to a's handler with token, wants status, and
// decodes the answer into out (if not nil).
func call(t *testing.T, a *App, method, path, token string, body any, status int, out any) {
	t.Helper()
	var r *http.Request
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = httptest.NewRequest(method, path, bytes.NewReader(b))
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, r)
	if w.Code != status {
		t.Fatalf("%s %s: %d %s; want %d", method, path, w.Code, w.Body, status)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, w.Body, err)
		}
	}
}

// TestOpsReadShards: the services' Redis client finds a sharded voucher's
// shards from its row, for a voucher this client never loaded (another
// instance made it): NewOps wires the store in.
func TestOpsReadShards(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	ctx := context.Background()
	now := time.Now().UTC()
	v := &seckill.Voucher{Title: "made elsewhere", Stock: 9, InitialStock: 9, BeginTime: now, EndTime: now.Add(time.Hour),
		Generation: 5, Shards: 3, ShardTags: []string{"ga.0.1", "ga.1.7", "ga.2.2"}}
	if err := b.store.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	NewOps(seckill.ModeStream, 0, b.store, b.cache, testenv.Logger(t))
	st, err := b.cache.State(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, sh := range st.Shards {
		tags = append(tags, sh.Tag)
	}
	if !slices.Equal(tags, v.ShardTags) {
		t.Errorf("the client reads the voucher's shards %q; want its row's %q", tags, v.ShardTags)
	}
}

// TestOpsLedgerOfEachMode: the mode is the choice of the ledger, made in
// NewOps alone: the stream mode's Redis ledger retries dead letters; the
// queue mode's keeps the buyers a repair or a fence unloads (Queued) and
// retries none (its workers read no stream); the sync mode's ledger is
// the database, and nothing is retried, repaired or given back in Redis.
func TestOpsLedgerOfEachMode(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	logger := testenv.Logger(t)
	for _, tc := range []struct {
		mode                          seckill.Mode
		redis, queued, retries, backs bool
	}{
		{seckill.ModeStream, true, false, true, true},
		{seckill.ModeQueue, true, true, false, true},
		{seckill.ModeSync, false, false, false, false},
	} {
		o := NewOps(tc.mode, 0, b.store, b.cache, logger)
		if got := o.Redis != nil; got != tc.redis {
			t.Errorf("%s: a Redis ledger %v, want %v", tc.mode, got, tc.redis)
		}
		if o.Redis != nil && o.Redis.Queued != tc.queued {
			t.Errorf("%s: Queued %v, want %v", tc.mode, o.Redis.Queued, tc.queued)
		}
		if got := o.DeadLetters.Admitter != nil; got != tc.retries {
			t.Errorf("%s: dead letters retried %v, want %v", tc.mode, got, tc.retries)
		}
		if got := o.Sweeper.Ledger != nil; got != tc.backs {
			t.Errorf("%s: the sweeper gives units back to a ledger %v, want %v", tc.mode, got, tc.backs)
		}
		if o.Vouchers.Ledger != o.Ledger {
			t.Errorf("%s: the vouchers' ledger is not the ledger of the mode", tc.mode)
		}
		if most, _ := o.Ledger.MaxShards(); (most > 1) != (tc.mode == seckill.ModeStream) {
			t.Errorf("%s: MaxShards %d; only the stream mode splits a voucher", tc.mode, most)
		}
	}
}
