package http

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// loginLimitEnv is a login route's limiter on a clock of the test's, in
// front of a handler that counts the requests let through.
type loginLimitEnv struct {
	t      *testing.T
	clock  *rateClock
	h      http.HandlerFunc
	passed atomic.Int64
}

func newLoginLimitEnv(t *testing.T, cfg Config) *loginLimitEnv {
	t.Helper()
	s, err := New(cfg, Services{}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e := &loginLimitEnv{t: t, clock: newRateClock()}
	e.h = s.limitLoginWith(newLoginLimits(s.cfg, e.clock.now), func(http.ResponseWriter, *http.Request, string) {
		e.passed.Add(1)
	})
	return e
}

// ask sends a code request from the connection address remote, with
// X-Forwarded-For lines xff, and returns the answer.
func (e *loginLimitEnv) ask(remote string, xff ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/api/auth/code", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	w := httptest.NewRecorder()
	e.h(w, r)
	return w
}

// askN sends n requests and returns how many were let through.
func (e *loginLimitEnv) askN(n int, remote string, xff ...string) int {
	before := e.passed.Load()
	for range n {
		e.ask(remote, xff...)
	}
	return int(e.passed.Load() - before)
}

func TestLoginRateLimitPerAddress(t *testing.T) {
	t.Parallel()
	e := newLoginLimitEnv(t, Config{LoginRateAddr: 1, LoginRateAddrBurst: 2})
	if got := e.askN(2, "203.0.113.9:4711"); got != 2 {
		t.Fatalf("the burst let %d of 2 through", got)
	}
	wantLimited(t, e.ask("203.0.113.9:4712"), "1")
	if got := e.askN(1, "203.0.113.10:4711"); got != 1 {
		t.Error("another address was refused")
	}
	// IPv6: one bucket per /64.
	if got := e.askN(3, "[2001:db8:1:2::1]:4711"); got != 2 {
		t.Errorf("an IPv6 address got %d of 3 through, want 2", got)
	}
	if got := e.askN(1, "[2001:db8:1:2:ffff::9]:4711"); got != 0 {
		t.Error("another address of the same /64 had a bucket of its own")
	}
	if got := e.askN(1, "[2001:db8:1:3::1]:4711"); got != 1 {
		t.Error("an address of another /64 was refused")
	}
	// Without trusted proxies X-Forwarded-For is not believed.
	if got := e.askN(1, "203.0.113.9:4711", "198.51.100.1"); got != 0 {
		t.Error("a made-up X-Forwarded-For got a client a bucket of its own")
	}
	e.clock.advance(time.Second)
	if got := e.askN(2, "203.0.113.9:4711"); got != 1 {
		t.Errorf("a second later %d requests went through, want 1", got)
	}
}

func TestLoginRateLimitBehindProxy(t *testing.T) {
	t.Parallel()
	e := newLoginLimitEnv(t, Config{LoginRateAddr: 1, LoginRateAddrBurst: 2, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	const proxy = "10.0.0.1:4711"
	if got := e.askN(3, proxy, "198.51.100.1"); got != 2 {
		t.Errorf("a client behind the proxy got %d of 3 through, want 2", got)
	}
	if got := e.askN(2, proxy, "198.51.100.2, 10.0.0.7"); got != 2 {
		t.Errorf("another client behind two proxies got %d of 2 through, want 2", got)
	}
	// The client may write what it likes left of what our proxy appends.
	if got := e.askN(1, proxy, "192.0.2.99, 198.51.100.1"); got != 0 {
		t.Error("a forged left-most X-Forwarded-For entry got a client a new bucket")
	}
}

func TestLoginRateLimitGlobal(t *testing.T) {
	t.Parallel()
	e := newLoginLimitEnv(t, Config{LoginRateGlobal: 1, LoginRateGlobalBurst: 3, LoginRateAddr: 0.001, LoginRateAddrBurst: 1})
	for _, a := range []string{"192.0.2.1:1", "192.0.2.2:1", "192.0.2.3:1"} {
		if got := e.askN(1, a); got != 1 {
			t.Fatalf("%s was refused within the global burst", a)
		}
	}
	w := e.ask("192.0.2.4:1")
	wantLimited(t, w, "1")
	if !strings.Contains(w.Body.String(), "to this server") {
		t.Errorf("the refusal %s does not say it is the server's limit", w.Body)
	}
	// The refused address got its token back: its own bucket (one token
	// in 1000 s) still lets it through once the global one refills.
	e.clock.advance(time.Second)
	if got := e.askN(1, "192.0.2.4:1"); got != 1 {
		t.Error("an address refused by the global limit lost its own token")
	}
}

// countingLogin is a Login on in-memory stand-ins that count the calls
// that reach them.
type countingLogin struct {
	issued, redeemed, sent, users atomic.Int64
}

func (c *countingLogin) IssueCode(context.Context, string, string) (bool, error) {
	c.issued.Add(1)
	return true, nil
}

func (c *countingLogin) RedeemCode(context.Context, string, string) error {
	c.redeemed.Add(1)
	return seckill.ErrUnauthorized
}

func (c *countingLogin) WithdrawCode(context.Context, string, string) error { return nil }

func (c *countingLogin) SpendGuess(context.Context, string, seckill.GuessLimits) error { return nil }

func (c *countingLogin) RefundGuess(context.Context, string) error { return nil }

func (c *countingLogin) SendCode(context.Context, string, string) error {
	c.sent.Add(1)
	return nil
}

func (c *countingLogin) EnsureUser(context.Context, string, ...string) (*seckill.User, bool, error) {
	c.users.Add(1)
	return nil, false, errors.New("not reached")
}

func (c *countingLogin) User(context.Context, int64) (*seckill.User, error) {
	return nil, seckill.ErrUserNotFound
}

// TestLoginRoutesRateLimited: both login routes are limited, each on its
// own buckets, and a refused request reaches neither Redis nor the
// database nor the sender.
func TestLoginRoutesRateLimited(t *testing.T) {
	t.Parallel()
	c := &countingLogin{}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	srv, err := New(Config{LoginRateAddr: 0.001, LoginRateAddrBurst: 1}, Services{
		Login: &auth.Login{Codes: c, Sender: c, Users: c, TokenTTL: time.Hour, Logger: logger},
	}, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		return w
	}
	code := `{"phone":"+8613800138000"}`
	login := `{"phone":"+8613800138000","code":"12345678"}`
	if w := post("/api/auth/code", code); w.Code != 200 {
		t.Fatalf("first code request = %d %s", w.Code, w.Body)
	}
	if w := post("/api/auth/login", login); w.Code != 401 {
		t.Fatalf("first login request = %d %s; the routes must not share a bucket", w.Code, w.Body)
	}
	wantLimited(t, post("/api/auth/code", code), "1000")
	wantLimited(t, post("/api/auth/login", login), "1000")
	if c.issued.Load() != 1 || c.sent.Load() != 1 || c.redeemed.Load() != 1 || c.users.Load() != 0 {
		t.Errorf("issued %d, sent %d, redeemed %d, users %d; want 1, 1, 1, 0: a refused request went through",
			c.issued.Load(), c.sent.Load(), c.redeemed.Load(), c.users.Load())
	}
}

// TestCodeDelivery: the code answer says "log" for the embedded default's
// sender, which writes codes to the log, and "phone" for the webhook's.
func TestCodeDelivery(t *testing.T) {
	t.Parallel()
	hook, err := auth.NewWebhookSender("https://sms.example/send", []byte(strings.Repeat("s", auth.MinSecretLen)), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sender seckill.CodeSender
		want   string
	}{
		{auth.LogSender{Logger: slog.Default()}, "log"},
		{hook, "phone"},
	} {
		if got := codeDelivery(tc.sender); got != tc.want {
			t.Errorf("codeDelivery(%T) = %q, want %q", tc.sender, got, tc.want)
		}
	}
}
