package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/postgres"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlite"
	"github.com/seckill/seckill/worker"
)

var testSecret = []byte("test-secret-0123456789abcdef-0123456789")

// env is one service, built by app.New as serve builds it, on this
// machine's Redis and database (each isolated for the test; on the
// embedded backend when they do not answer, see apptest), with the codes
// it "sent" and tokens to call it.
type env struct {
	t      *testing.T
	url    string
	tokens *auth.Tokens
	admin  string // an admin's token
	buyer  string // a buyer's token
	cache  *redis.Client
	// rawRedis and redisPrefix reach the server's Redis keys directly.
	rawRedis    rueidis.Client
	redisPrefix string
	store       seckill.Store
	// app is the service: its domain services, workers and server.
	app     *app.App
	opt     envOptions
	dbProxy *faults.Proxy
	codes   *codeBox
	now     time.Time
}

// codeBox is the CodeSender of the tests: it keeps the last code per phone.
type codeBox struct {
	mu    sync.Mutex
	codes map[string]string
}

func (b *codeBox) SendCode(_ context.Context, phone, code string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.codes[phone] = code
	return nil
}

func (b *codeBox) last(phone string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.codes[phone]
}

type envOptions struct {
	// backend is "" (default: the test MariaDB and Redis, or SQLite and
	// the in-process Redis server when they do not answer, see apptest),
	// "mysql" (MariaDB, skipped without it), "postgres" or "embedded"
	// (SQLite and the in-process Redis server).
	backend string
	// redisURL is the Redis to use; default: the backend's.
	redisURL string
	// mode is how orders are taken; default stream.
	mode seckill.Mode
	// proxyDB puts a proxy the test controls (env.dbProxy) between the
	// service and MariaDB (so the test needs MariaDB).
	proxyDB bool
	// backlogHigh and backlogLow are the workers' water marks (0: off).
	backlogHigh, backlogLow int64
	// holdWorkers leaves the workers stopped until the test calls
	// startPool (to make dead letters first, say).
	holdWorkers bool
	// waitReplicas is redis.Config.WaitReplicas (with redisURL).
	waitReplicas int
}

func newEnv(t *testing.T, opts ...envOptions) *env {
	t.Helper()
	var opt envOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	var (
		store   seckill.Store
		err     error
		dbProxy *faults.Proxy
	)
	if opt.backend == "" && !opt.proxyDB {
		store = apptest.Store(t) // migrated; closed when the test ends
	} else {
		switch opt.backend {
		case "", "mysql":
			url := testenv.MySQLURL(t)
			if opt.proxyDB {
				dbProxy = faults.StartProxy(t, "127.0.0.1:3306")
				url = strings.Replace(url, "127.0.0.1:3306", dbProxy.Addr(), 1)
			}
			store, err = mysql.Open(ctx, url, 8)
		case "postgres":
			store, err = postgres.Open(ctx, testenv.PostgresURL(t), 8)
		case "embedded":
			store, err = sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 8)
		default:
			t.Fatalf("unknown backend %q", opt.backend)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if err := store.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var (
		cache    *redis.Client
		prefix   = "seckill"
		redisURL = opt.redisURL
	)
	if opt.backend == "" && redisURL == "" {
		cache, redisURL, prefix = apptest.Redis(t, logger) // closed when the test ends
	} else {
		switch {
		case opt.backend == "embedded":
			cache, err = redis.OpenEmbedded(prefix, logger)
			if err == nil {
				redisURL = "redis://" + cache.Addr()
			}
		case redisURL == "":
			redisURL, prefix = testenv.RedisURL(t), testenv.RedisPrefix(t)
			fallthrough
		default:
			if opt.redisURL != "" {
				prefix = "t" + testenv.Random() // a shared Cluster or Sentinel
			}
			cache, err = redis.Open(ctx, redis.Config{URL: redisURL, Prefix: prefix, WaitReplicas: opt.waitReplicas}, logger)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cache.Close)
	}
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	codes := &codeBox{codes: map[string]string{}}
	if opt.mode == "" {
		opt.mode = seckill.ModeStream
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	// The service as serve builds it, with short worker periods.
	// Correctness, not latency, is tested here: under -race with thousands
	// of requests at once the embedded server is slow.
	a, err := app.New(ctx, app.Config{
		Mode:     opt.mode,
		Store:    store,
		Cache:    cache,
		Tokens:   tokens,
		Login:    &auth.Login{Codes: cache, Sender: codes, Users: store, Tokens: tokens, TokenTTL: time.Hour, Logger: logger},
		Logger:   logger,
		Registry: reg,
		HTTP:     sechttp.Config{RequestTimeout: 60 * time.Second},
		Stream: worker.Config{
			Consumer:     "test-" + testenv.Random(),
			Block:        100 * time.Millisecond,
			Lease:        2 * time.Second,
			ReclaimEvery: 200 * time.Millisecond,
			WatchEvery:   200 * time.Millisecond,
			BacklogHigh:  opt.backlogHigh,
			BacklogLow:   opt.backlogLow,
			BacklogEvery: 50 * time.Millisecond,
			BreakerMin:   100 * time.Millisecond,
			BreakerMax:   time.Second,
		},
		// The test's key prefix is its own: no lease holder predates it.
		Test:              app.TestConfig{NoNodeWait: true, NoCacheWatch: true},
		StatsActiveWithin: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	hs := httptest.NewServer(a.Handler())
	t.Cleanup(hs.Close)
	ropt, err := rueidis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	// The in-process server (its client has its address) is reached as a
	// single node.
	ropt.DisableCache, ropt.ForceSingleClient = true, cache.Addr() != ""
	raw, err := rueidis.NewClient(ropt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	e := &env{t: t, url: hs.URL, tokens: tokens, cache: cache, rawRedis: raw, redisPrefix: prefix, store: store, app: a,
		opt: opt, dbProxy: dbProxy, codes: codes, now: time.Now()}
	if !opt.holdWorkers {
		e.startPool()
	}
	e.admin = e.mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	e.buyer = e.mint(auth.Identity{UserID: 2}, time.Hour)
	return e
}

// startPool starts the service's workers (e.app.Pool in the stream mode,
// e.app.Queue in the queue mode), if not yet.
func (e *env) startPool() {
	e.t.Helper()
	if err := e.app.StartWorkers(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (e *env) mint(id auth.Identity, ttl time.Duration) string {
	e.t.Helper()
	s, err := e.tokens.Mint(id, ttl)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// response is an answer, its body decoded loosely for assertions.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// do sends a request with body (a string sent as is, or a value encoded as
// JSON) and token (none if empty).
func (e *env) do(method, path, token string, body any) response {
	e.t.Helper()
	header := ""
	if token != "" {
		header = "Bearer " + token
	}
	return e.doHeader(method, path, header, body)
}

// doWith is do through client, for tests that need many connections.
func (e *env) doWith(client *http.Client, method, path, token string, body any) response {
	e.t.Helper()
	return e.request(client, method, path, "Bearer "+token, body)
}

// doHeader is do with an Authorization header as given.
func (e *env) doHeader(method, path, authorization string, body any) response {
	e.t.Helper()
	return e.request(http.DefaultClient, method, path, authorization, body)
}

func (e *env) request(client *http.Client, method, path, authorization string, body any) response {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := response{status: res.StatusCode, header: res.Header, raw: raw}
	if ct := res.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			e.t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return out
}

// wantError checks that res is the error answer status with code.
func (e *env) wantError(res response, status int, code string) {
	e.t.Helper()
	if res.status != status || res.body["code"] != code {
		e.t.Fatalf("got %d %s, want %d with code %q", res.status, res.raw, status, code)
	}
	if msg, _ := res.body["message"].(string); msg == "" {
		e.t.Errorf("error answer %s has no message", res.raw)
	}
	if !strings.HasPrefix(res.header.Get("Content-Type"), "application/json") {
		e.t.Errorf("error answer has Content-Type %q", res.header.Get("Content-Type"))
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if res := e.do("GET", "/healthz", "", nil); res.status != 200 || res.body["status"] != "ok" {
		t.Errorf("/healthz = %d %s", res.status, res.raw)
	}
	res := e.do("GET", "/readyz", "", nil)
	checks, _ := res.body["checks"].(map[string]any)
	if res.status != 200 || checks["redis"] != "ok" || checks["db"] != "ok" {
		t.Errorf("/readyz = %d %s, want 200 with redis and db ok", res.status, res.raw)
	}
	details, _ := res.body["details"].(map[string]any)
	if d, _ := details["redis"].(string); !strings.HasPrefix(d, e.cache.Kind()+": 1 master, ") {
		t.Errorf("/readyz details = %v, want redis described as %s with 1 master", res.body["details"], e.cache.Kind())
	}
}

// TestReadyzCluster: /readyz says the Redis is a Cluster, and how big.
func TestReadyzCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{backend: "mysql", redisURL: faults.SharedCluster(t).URL})
	res := e.do("GET", "/readyz", "", nil)
	details, _ := res.body["details"].(map[string]any)
	if res.status != 200 || details["redis"] != "cluster: 3 masters, 3 replicas" {
		t.Errorf("/readyz = %d %s, want redis described as cluster: 3 masters, 3 replicas", res.status, res.raw)
	}
}

func TestReadyzWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	url, kill := faults.StartRedis(t)
	e := newEnv(t, envOptions{redisURL: url})
	if res := e.do("GET", "/readyz", "", nil); res.status != 200 {
		t.Fatalf("/readyz with Redis up = %d %s", res.status, res.raw)
	}
	e.createVoucher(e.validVoucher())
	kill()
	res := e.do("GET", "/readyz", "", nil)
	e.wantError(res, 503, "unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Error("/readyz 503 without Retry-After")
	}
	if checks, _ := res.body["checks"].(map[string]any); checks["redis"] != "down" || checks["db"] != "ok" {
		t.Errorf("/readyz checks = %v, want redis down and db ok", res.body["checks"])
	}
	if strings.Contains(string(res.raw), "refused") {
		t.Errorf("/readyz leaks the connection error: %s", res.raw)
	}
	// Reading a voucher needs Redis: 503 with Retry-After, not 500.
	res = e.do("GET", "/api/vouchers", "", nil)
	e.wantError(res, 503, "unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/api/vouchers/12345", "", nil)
	e.do("GET", "/api/vouchers/12345", "", nil)
	e.do("GET", "/no/such/route", "", nil)
	res := e.do("GET", "/metrics", "", nil)
	if res.status != 200 {
		t.Fatalf("/metrics = %d", res.status)
	}
	text := string(res.raw)
	for _, want := range []string{
		`seckill_http_requests_total{code="404",route="GET /api/vouchers/{id}"} 2`,
		`seckill_http_requests_total{code="404",route="unmatched"} 1`,
		`seckill_http_request_duration_seconds_count{route="GET /api/vouchers/{id}"} 2`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// metric returns the value of series (a name with its labels, as the text
// format writes them) in the server's /metrics, or fails the test.
func (e *env) metric(series string) float64 {
	e.t.Helper()
	res := e.do("GET", "/metrics", "", nil)
	if res.status != 200 {
		e.t.Fatalf("/metrics = %d", res.status)
	}
	return sechttp.MetricIn(e.t, string(res.raw), series)
}
