package http

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/monitor"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/orderid"
	"github.com/seckill/seckill/postgres"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlite"
	"github.com/seckill/seckill/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var testSecret = []byte("test-secret-0123456789abcdef-0123456789")

// env is one server on the real Redis and MariaDB of this machine, each
// isolated for the test, with the codes it "sent" and tokens to call it.
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
	vouchers    *seckill.VoucherService
	orders      *seckill.OrderService
	pool        *worker.Pool
	logger      *slog.Logger
	opt         envOptions
	dbProxy     *testenv.Proxy
	codes       *codeBox
	now         time.Time
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
	// backend is "mysql" (default), "postgres" or "embedded" (SQLite and
	// the in-process Redis server).
	backend string
	// redisURL is the Redis to use; default: the shared test Redis under
	// a prefix of the test's own.
	redisURL string
	// mode is how orders are taken; default stream.
	mode seckill.Mode
	// proxyDB puts a proxy the test controls (env.dbProxy) between the
	// service and MariaDB.
	proxyDB bool
	// backlogHigh and backlogLow are the workers' water marks (0: off).
	backlogHigh, backlogLow int64
	// holdWorkers leaves the stream mode's workers stopped until the test
	// calls startPool (to make dead letters first, say).
	holdWorkers bool
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
		dbProxy *testenv.Proxy
	)
	switch opt.backend {
	case "", "mysql":
		url := testenv.MySQLURL(t)
		if opt.proxyDB {
			dbProxy = testenv.StartProxy(t, "127.0.0.1:3306")
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
	var (
		cache    *redis.Client
		prefix   = "seckill"
		redisURL = opt.redisURL
	)
	switch {
	case opt.backend == "embedded":
		cache, err = redis.OpenEmbedded(prefix, logger)
		redisURL = "redis://" + cache.Addr()
	case redisURL == "":
		redisURL, prefix = testenv.RedisURL(t), testenv.RedisPrefix(t)
		fallthrough
	default:
		cache, err = redis.Open(ctx, redis.Config{URL: redisURL, Prefix: prefix}, logger)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	codes := &codeBox{codes: map[string]string{}}
	if opt.mode == "" {
		opt.mode = seckill.ModeStream
	}
	vouchers := &seckill.VoucherService{Store: store, Cache: cache, Logger: logger, Now: time.Now, DatabaseOnly: opt.mode == seckill.ModeSync}
	// As serve starts: the Redis server checked, admissions armed.
	if err := vouchers.Restore(ctx); err != nil {
		t.Fatal(err)
	}

	ids := orderid.New()
	lease := cache.NewNodeLease(ids, logger)
	// The test's key prefix is its own: no lease holder predates it.
	// Valid as in production: tests load the machine as a peak does.
	lease.FreshWait = 0
	if err := lease.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Stop)
	orders := &seckill.OrderService{Mode: opt.mode, Cache: cache, Store: store, Vouchers: vouchers, IDs: ids, Logger: logger, OrderTime: orderid.Time}
	if opt.mode == seckill.ModeQueue {
		q, err := worker.NewQueue(worker.QueueConfig{}, store, cache, prometheus.NewRegistry(), logger)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Stop)
		orders.Queue = q
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())

	// Correctness, not latency, is tested here: under -race with thousands
	// of requests at once the embedded server is slow.
	e := &env{t: t, tokens: tokens, cache: cache, codes: codes, now: time.Now(), redisPrefix: prefix, store: store, vouchers: vouchers, logger: logger, orders: orders, opt: opt, dbProxy: dbProxy}
	mon, err := monitor.New(monitor.Config{Vouchers: vouchers, Store: store, Streams: cache, Workers: envWorkers{e}, Mode: opt.mode, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{RequestTimeout: 60 * time.Second}, Services{
		Vouchers:    vouchers,
		Orders:      orders,
		Login:       &auth.Login{Codes: cache, Sender: codes, Users: store, Tokens: tokens, TokenTTL: time.Hour, Logger: logger},
		Tokens:      tokens,
		Checks:      map[string]Check{"redis": cache.Ping, "db": store.Ping},
		DeadLetters: &seckill.DeadLetterService{Mode: opt.mode, Cache: cache, Store: store, Vouchers: vouchers, Logger: logger, OrderTime: orderid.Time},
		Reconciler:  &seckill.Reconciler{Vouchers: vouchers, Store: store, Cache: cache},
		Stats:       mon,
	}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{strings.TrimSuffix(strings.TrimPrefix(redisURL, "redis://"), "/0")}, DisableCache: true, ForceSingleClient: opt.backend == "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	e.url, e.rawRedis = hs.URL, raw
	if opt.mode == seckill.ModeStream && !opt.holdWorkers {
		e.startPool()
	}
	e.admin = e.mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	e.buyer = e.mint(auth.Identity{UserID: 2}, time.Hour)
	return e
}

// envWorkers reports the env's pool to the monitor, once there is one.
type envWorkers struct{ e *env }

func (w envWorkers) WorkerStats() seckill.WorkerStats {
	if w.e.pool == nil {
		return seckill.WorkerStats{}
	}
	return w.e.pool.WorkerStats()
}

// startPool starts workers (a new consumer) for the env's streams.
func (e *env) startPool() {
	e.t.Helper()
	pool, err := worker.New(worker.Config{
		Consumer:     "test-" + testenv.Random(),
		Block:        100 * time.Millisecond,
		Lease:        2 * time.Second,
		ReclaimEvery: 200 * time.Millisecond,
		WatchEvery:   200 * time.Millisecond,
		BacklogHigh:  e.opt.backlogHigh,
		BacklogLow:   e.opt.backlogLow,
		BacklogEvery: 50 * time.Millisecond,
		BreakerMin:   100 * time.Millisecond,
		BreakerMax:   time.Second,
	}, e.cache, e.store, e.vouchers.Rebuild, prometheus.NewRegistry(), e.logger)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := pool.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Stop)
	e.pool = pool
	e.orders.Backpressure = pool
	e.vouchers.Created = func(v *seckill.Voucher) { pool.Watch(v.ID) }
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

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	e.wantError(e.do("GET", "/api/nothing", "", nil), 404, "not_found")
	res := e.do("DELETE", "/api/vouchers/1", "", nil)
	e.wantError(res, 405, "method_not_allowed")
	if allow := res.header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("405 answer has Allow %q, want it to list GET", allow)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	if res := e.do("GET", "/healthz", "", nil); res.status != 200 || res.body["status"] != "ok" {
		t.Errorf("/healthz = %d %s", res.status, res.raw)
	}
	res := e.do("GET", "/readyz", "", nil)
	checks, _ := res.body["checks"].(map[string]any)
	if res.status != 200 || checks["redis"] != "ok" || checks["db"] != "ok" {
		t.Errorf("/readyz = %d %s, want 200 with redis and db ok", res.status, res.raw)
	}
}

func TestReadyzWhenRedisIsDown(t *testing.T) {
	url, kill := testenv.StartRedis(t)
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
	return metricIn(e.t, string(res.raw), series)
}

// metricIn returns the value of series in a /metrics text, or fails t.
func metricIn(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}
