package http

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
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
	redisURL string // default: the shared test Redis
}

func newEnv(t *testing.T, opts ...envOptions) *env {
	t.Helper()
	var opt envOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	store, err := mysql.Open(ctx, testenv.MySQLURL(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	redisCfg := redis.Config{URL: opt.redisURL, Prefix: "seckill"}
	if redisCfg.URL == "" {
		redisCfg = redis.Config{URL: testenv.RedisURL(t), Prefix: testenv.RedisPrefix(t)}
	}
	cache, err := redis.Open(ctx, redisCfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	codes := &codeBox{codes: map[string]string{}}
	vouchers := &seckill.VoucherService{Store: store, Cache: cache, Logger: logger, Now: time.Now}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	srv, err := New(Config{}, Services{
		Vouchers: vouchers,
		Login:    &auth.Login{Codes: cache, Sender: codes, Users: store, Tokens: tokens, TokenTTL: time.Hour, Logger: logger},
		Tokens:   tokens,
		Checks:   map[string]Check{"redis": cache.Ping, "db": store.Ping},
	}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{strings.TrimSuffix(strings.TrimPrefix(redisCfg.URL, "redis://"), "/0")}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	e := &env{t: t, url: hs.URL, tokens: tokens, cache: cache, codes: codes, now: time.Now(), rawRedis: raw, redisPrefix: redisCfg.Prefix}
	e.admin = e.mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	e.buyer = e.mint(auth.Identity{UserID: 2}, time.Hour)
	return e
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

// doHeader is do with an Authorization header as given.
func (e *env) doHeader(method, path, authorization string, body any) response {
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
	res, err := http.DefaultClient.Do(req)
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
	e := newEnv(t)
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
