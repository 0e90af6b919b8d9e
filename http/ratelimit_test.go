package http

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/auth"
)

// rateClock is a clock that moves only when told, safe for concurrent use.
type rateClock struct{ ns atomic.Int64 }

func newRateClock() *rateClock {
	c := &rateClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *rateClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *rateClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// limitEnv is the limiter of a Server built by New, on a clock of the
// test's, in front of a handler that counts the requests let through.
type limitEnv struct {
	t      *testing.T
	clock  *rateClock
	limits *rateLimits
	h      userHandler
	passed atomic.Int64
}

func newLimitEnv(t *testing.T, cfg Config) *limitEnv {
	t.Helper()
	// The seckill route's services are never reached: the handler behind
	// the limiter is the test's.
	s, err := New(cfg, Services{}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e := &limitEnv{t: t, clock: newRateClock()}
	e.limits = newRateLimits(s.cfg, e.clock.now)
	e.h = s.limitRateWith(e.limits, func(w http.ResponseWriter, r *http.Request, _ auth.Identity) {
		e.passed.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	return e
}

// buy sends a buy request of user from the connection address remote
// (host:port), with X-Forwarded-For lines xff.
func (e *limitEnv) buy(user int64, remote string, xff ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	r := httptest.NewRequest("POST", "/api/vouchers/1/seckill", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	w := httptest.NewRecorder()
	e.h(w, r, auth.Identity{UserID: user})
	return w
}

// buyN sends n buy requests and returns how many were let through.
func (e *limitEnv) buyN(n int, user int64, remote string, xff ...string) int {
	e.t.Helper()
	before := e.passed.Load()
	for range n {
		e.buy(user, remote, xff...)
	}
	return int(e.passed.Load() - before)
}

// wantLimited checks that w is a 429 rate_limited answer with Retry-After
// retryAfter.
func wantLimited(t *testing.T, w *httptest.ResponseRecorder, retryAfter string) {
	t.Helper()
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %d %q is not a JSON error: %v", w.Code, w.Body, err)
	}
	if w.Code != http.StatusTooManyRequests || body.Code != "rate_limited" || body.Message == "" {
		t.Fatalf("got %d %s, want 429 rate_limited with a message", w.Code, w.Body)
	}
	if got := w.Header().Get("Retry-After"); got != retryAfter {
		t.Errorf("Retry-After %q, want %q", got, retryAfter)
	}
}

const client = "203.0.113.9:4711"

func TestLimitRateBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{
		{"below", 9, 9},
		{"at", 10, 10},
		{"above", 11, 10},
		{"far above", 100, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLimitEnv(t, Config{RateUser: 5, RateUserBurst: 10})
			if got := e.buyN(tc.n, 1, client); got != tc.want {
				t.Errorf("%d requests at once: %d let through, want %d", tc.n, got, tc.want)
			}
			if tc.n >= 10 {
				wantLimited(t, e.buy(1, client), "1")
			}
		})
	}
}

func TestLimitRateRefill(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, Config{RateUser: 5, RateUserBurst: 10})
	e.buyN(10, 1, client)
	e.clock.advance(time.Second)
	if got := e.buyN(20, 1, client); got != 5 {
		t.Errorf("after 1s: %d let through, want 5", got)
	}
	e.clock.advance(time.Hour)
	if got := e.buyN(20, 1, client); got != 10 {
		t.Errorf("after an hour: %d let through, want the burst, 10", got)
	}

	// Retry-After is the wait for the next token, rounded up.
	e = newLimitEnv(t, Config{RateUser: 0.1, RateUserBurst: 1})
	e.buyN(1, 1, client)
	wantLimited(t, e.buy(1, client), "10")
	e.clock.advance(2500 * time.Millisecond)
	wantLimited(t, e.buy(1, client), "8")
	e.clock.advance(7499 * time.Millisecond)
	wantLimited(t, e.buy(1, client), "1")
	e.clock.advance(time.Millisecond)
	if got := e.buyN(1, 1, client); got != 1 {
		t.Error("refused when the token was back")
	}
}

func TestLimitRateBuyersIndependent(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, Config{RateUser: 5, RateUserBurst: 10})
	e.buyN(50, 1, client)
	if got := e.buyN(50, 2, client); got != 10 {
		t.Errorf("buyer 2 on buyer 1's address: %d let through, want 10", got)
	}
}

func TestLimitRateOff(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{},
		{RateUser: 0, RateUserBurst: 10, RateAddr: 0, RateAddrBurst: 100},
		{RateUser: -1, RateAddr: -1},
	} {
		e := newLimitEnv(t, cfg)
		if got := e.buyN(1000, 1, client); got != 1000 {
			t.Errorf("%+v: %d of 1000 let through", cfg, got)
		}
	}
	// One limit on, the other off.
	e := newLimitEnv(t, Config{RateAddr: 1, RateAddrBurst: 3})
	if got := e.buyN(10, 1, client); got != 3 {
		t.Errorf("address limit only: %d let through, want 3", got)
	}
	if got := e.buyN(10, 2, "198.51.100.1:80"); got != 3 {
		t.Errorf("address limit only, another address: %d let through, want 3", got)
	}
}

func TestLimitRateAddress(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	t.Run("spoofed header from an untrusted peer", func(t *testing.T) {
		e := newLimitEnv(t, Config{RateAddr: 1, RateAddrBurst: 3, TrustedProxies: proxies})
		passed := 0
		for i := range 10 {
			passed += e.buyN(1, int64(i), client, "198.51.100."+strconv.Itoa(i))
		}
		if passed != 3 {
			t.Errorf("one address, ten buyers, ten made-up X-Forwarded-For: %d let through, want 3", passed)
		}
		wantLimited(t, e.buy(99, client, "198.51.100.99"), "1")
	})
	t.Run("header ignored without trusted proxies", func(t *testing.T) {
		e := newLimitEnv(t, Config{RateAddr: 1, RateAddrBurst: 3})
		passed := 0
		for i := range 10 {
			passed += e.buyN(1, int64(i), "10.0.0.1:80", "198.51.100."+strconv.Itoa(i))
		}
		if passed != 3 {
			t.Errorf("%d let through, want 3", passed)
		}
	})
	t.Run("clients behind a trusted proxy", func(t *testing.T) {
		e := newLimitEnv(t, Config{RateAddr: 1, RateAddrBurst: 3, TrustedProxies: proxies})
		for i := range 5 {
			xff := "198.51.100." + strconv.Itoa(i)
			if got := e.buyN(10, int64(i), "10.0.0.1:80", xff); got != 3 {
				t.Errorf("client %s through the proxy: %d let through, want 3", xff, got)
			}
		}
		// The same client through a chain of proxies, whatever it claims.
		if got := e.buyN(10, 100, "10.0.0.1:80", "6.6.6.6, 198.51.100.0, 10.1.1.1", "10.2.2.2"); got != 0 {
			t.Errorf("a drained client through a chain of proxies: %d let through, want 0", got)
		}
	})
	t.Run("IPv6 by /64", func(t *testing.T) {
		e := newLimitEnv(t, Config{RateAddr: 1, RateAddrBurst: 3})
		passed := 0
		for i := range 10 {
			passed += e.buyN(1, int64(i), "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:443")
		}
		if passed != 3 {
			t.Errorf("ten addresses of one /64: %d let through, want 3", passed)
		}
		if got := e.buyN(10, 50, "[2001:db8:1:3::1]:443"); got != 3 {
			t.Errorf("another /64: %d let through, want 3", got)
		}
	})
	t.Run("a buyer refused for the address keeps their tokens", func(t *testing.T) {
		e := newLimitEnv(t, Config{RateUser: 1, RateUserBurst: 2, RateAddr: 1, RateAddrBurst: 1})
		e.buyN(1, 1, client)
		wantLimited(t, e.buy(2, client), "1")
		// One request from each of two fresh addresses: the address limit
		// allows both, so only the buyer's could refuse.
		if got := e.buyN(1, 2, "198.51.100.1:80") + e.buyN(1, 2, "198.51.100.2:80"); got != 2 {
			t.Errorf("buyer 2 from fresh addresses: %d let through, want their whole burst, 2", got)
		}
	})
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("fd00::/8"),
		netip.MustParsePrefix("::ffff:192.168.0.0/112"), // 192.168.0.0/16, as written by someone
	}
	for _, tc := range []struct {
		name    string
		proxies []netip.Prefix
		remote  string
		xff     []string
		want    string // "" for no address
	}{
		{"no proxies: header ignored", nil, "203.0.113.9:1", []string{"1.2.3.4"}, "203.0.113.9"},
		{"untrusted peer: header ignored", proxies, "203.0.113.9:1", []string{"1.2.3.4"}, "203.0.113.9"},
		{"trusted peer", proxies, "10.0.0.1:1", []string{"198.51.100.7"}, "198.51.100.7"},
		{"trusted peer, spoofed left part", proxies, "10.0.0.1:1", []string{"6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"chain of trusted proxies", proxies, "10.0.0.1:1", []string{"6.6.6.6,198.51.100.7, 10.0.0.2 ,10.9.9.9"}, "198.51.100.7"},
		{"several header lines", proxies, "10.0.0.1:1", []string{"6.6.6.6, 198.51.100.7", "10.0.0.2"}, "198.51.100.7"},
		{"only proxies: the left-most", proxies, "10.0.0.1:1", []string{"10.0.0.5, 10.0.0.2"}, "10.0.0.5"},
		{"trusted peer, no header", proxies, "10.0.0.1:1", nil, "10.0.0.1"},
		{"malformed", proxies, "10.0.0.1:1", []string{"garbage"}, "10.0.0.1"},
		{"empty entry", proxies, "10.0.0.1:1", []string{"198.51.100.7, "}, "10.0.0.1"},
		{"malformed behind a proxy", proxies, "10.0.0.1:1", []string{"198.51.100.7, nonsense, 10.0.0.2"}, "10.0.0.1"},
		{"malformed left of the client", proxies, "10.0.0.1:1", []string{"<script>, 198.51.100.7"}, "198.51.100.7"},
		{"entry with a port", proxies, "10.0.0.1:1", []string{"198.51.100.7:5555"}, "198.51.100.7"},
		{"IPv6 entry with a port", proxies, "10.0.0.1:1", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"IPv4-mapped peer", nil, "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
		{"IPv4-mapped trusted peer", proxies, "[::ffff:10.0.0.1]:1", []string{"198.51.100.7"}, "198.51.100.7"},
		{"IPv4-mapped entry", proxies, "10.0.0.1:1", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"mapped proxy prefix", proxies, "192.168.3.4:1", []string{"198.51.100.7"}, "198.51.100.7"},
		{"IPv6 proxy", proxies, "[fd00::1]:443", []string{"2001:db8::5"}, "2001:db8::5"},
		{"zone dropped", nil, "[fe80::1%eth0]:80", nil, "fe80::1"},
		{"not an IP connection", proxies, "@", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newRateLimits(Config{TrustedProxies: tc.proxies}, time.Now)
			r := httptest.NewRequest("POST", "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			a, ok := l.clientAddr(r)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("clientAddr = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAddrKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ addr, want string }{
		{"198.51.100.7", "198.51.100.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"},
		{"2001:db8:1:2::1", "2001:db8:1:2::"},
		{"2001:db8:1:3::1", "2001:db8:1:3::"},
	} {
		if got := addrKey(netip.MustParseAddr(tc.addr)).String(); got != tc.want {
			t.Errorf("addrKey(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// TestLimitRateConcurrent sends many requests of one buyer at once at a
// frozen time: exactly the burst gets through, then exactly what a second
// refills.
func TestLimitRateConcurrent(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, Config{RateUser: 5, RateUserBurst: 10, RateAddr: 1000, RateAddrBurst: 1000})
	wave := func() int64 {
		var passed atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for range 20 {
					if e.buy(1, client).Code == http.StatusOK {
						passed.Add(1)
					}
					e.buy(int64(1000+g), client) // others, on the shared address
				}
			})
		}
		wg.Wait()
		return passed.Load()
	}
	if got := wave(); got != 10 {
		t.Errorf("first wave: %d of buyer 1's let through, want 10", got)
	}
	e.clock.advance(time.Second)
	if got := wave(); got != 5 {
		t.Errorf("after 1s: %d of buyer 1's let through, want 5", got)
	}
}

// TestLimitRateServer checks the limits as New wires them, through the
// whole server on the real clock. The voucher id is not a number, so the
// requests let through end as 400 in the handler before any service.
func TestLimitRateServer(t *testing.T) {
	t.Parallel()
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	start := func(cfg Config) string {
		s, err := New(cfg, Services{Tokens: tokens}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		return hs.URL
	}
	buy := func(url string, user int64, xff string) (int, http.Header) {
		t.Helper()
		token, err := tokens.Mint(auth.Identity{UserID: user}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest("POST", url+"/api/vouchers/x/seckill", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header
	}
	// A token every ~17 minutes: none comes back during the test.
	url := start(Config{RateUser: 0.001, RateUserBurst: 2})
	for i := range 2 {
		if status, _ := buy(url, 1, ""); status != http.StatusBadRequest {
			t.Fatalf("request %d: status %d, want 400 from the handler", i+1, status)
		}
	}
	status, h := buy(url, 1, "")
	if n, _ := strconv.Atoi(h.Get("Retry-After")); status != http.StatusTooManyRequests || n < 1 {
		t.Errorf("third request: %d with Retry-After %q, want 429 with whole seconds", status, h.Get("Retry-After"))
	}
	if status, _ := buy(url, 2, ""); status != http.StatusBadRequest {
		t.Errorf("another buyer: status %d, want 400", status)
	}
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The others passed the limit, and the handler refused their voucher
	// id before any admission.
	for result, want := range map[string]float64{"rate_limited": 1, "invalid_argument": 0} {
		if got := metricIn(t, string(metrics), `seckill_admissions_total{result="`+result+`"}`); got != want {
			t.Errorf("seckill_admissions_total{result=%q} = %v, want %v", result, got, want)
		}
	}

	// Through a trusted proxy (the test's loopback connection), each client
	// named by X-Forwarded-For has its own bucket.
	url = start(Config{RateAddr: 0.001, RateAddrBurst: 1, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	if status, _ := buy(url, 1, "198.51.100.1"); status != http.StatusBadRequest {
		t.Errorf("client 1: status %d, want 400", status)
	}
	if status, _ := buy(url, 2, "198.51.100.1"); status != http.StatusTooManyRequests {
		t.Errorf("client 1 again: status %d, want 429", status)
	}
	if status, _ := buy(url, 3, "198.51.100.2"); status != http.StatusBadRequest {
		t.Errorf("client 2: status %d, want 400", status)
	}

	// Off by default (Config's zero), whatever the pace.
	url = start(Config{})
	for range 50 {
		if status, _ := buy(url, 1, ""); status != http.StatusBadRequest {
			t.Fatalf("no limits: status %d, want 400", status)
		}
	}
}

// discardWriter is a ResponseWriter that keeps nothing, for benchmarks.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkLimitRate runs the limiter of the buy route on all cores for
// 4096 buyers. "allowed" is the hot path of a sale (every request let
// through); "refused" is a flood of buyers over their limit.
func BenchmarkLimitRate(b *testing.B) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, bc := range []struct {
		name string
		cfg  Config
		xff  bool
	}{
		{"allowed/buyer", Config{RateUser: 1e9, RateUserBurst: 1 << 20}, false},
		{"allowed/buyer+address", Config{RateUser: 1e9, RateUserBurst: 1 << 20, RateAddr: 1e9, RateAddrBurst: 1 << 20}, false},
		{"allowed/buyer+address behind proxy", Config{RateUser: 1e9, RateUserBurst: 1 << 20, RateAddr: 1e9, RateAddrBurst: 1 << 20, TrustedProxies: proxies}, true},
		{"refused", Config{RateUser: 5, RateUserBurst: 10}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(bc.cfg, Services{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			h := s.limitRate(func(http.ResponseWriter, *http.Request, auth.Identity) {})
			const buyers = 4096
			reqs := make([]*http.Request, buyers)
			for i := range reqs {
				r := httptest.NewRequest("POST", "/api/vouchers/1/seckill", nil)
				r.RemoteAddr = "203.0.113." + strconv.Itoa(i%256) + ":4711"
				if bc.xff {
					r.RemoteAddr = "10.0.0.1:4711"
					r.Header.Set("X-Forwarded-For", "198.51.100."+strconv.Itoa(i%256)+", 10.0.0.2")
				}
				reqs[i] = r
			}
			var seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &discardWriter{h: http.Header{}}
				i := int(seq.Add(1) * 7919)
				for pb.Next() {
					i++
					h(w, reqs[i%buyers], auth.Identity{UserID: int64(i%buyers + 1)})
				}
			})
		})
	}
}

// TestLimitOrderReads: the order reads, which look up the buyer in every
// open voucher, are limited per buyer and per address, on buckets apart
// from the buy route's. The requests let through end as 400 in the
// handler (a bad id, a bad limit) before any service.
func TestLimitOrderReads(t *testing.T) {
	t.Parallel()
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	start := func(cfg Config) string {
		s, err := New(cfg, Services{Tokens: tokens}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		return hs.URL
	}
	do := func(method, url string, user int64, xff string) (int, http.Header) {
		t.Helper()
		token, err := tokens.Mint(auth.Identity{UserID: user}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header
	}
	// A token every ~17 minutes: none comes back during the test.
	url := start(Config{OrderRateUser: 0.001, OrderRateUserBurst: 3, RateUser: 0.001, RateUserBurst: 1})
	reads := []string{url + "/api/orders/x", url + "/api/orders?limit=0", url + "/api/orders/x"}
	for i, u := range reads {
		if status, _ := do("GET", u, 1, ""); status != http.StatusBadRequest {
			t.Fatalf("read %d: status %d, want 400 from the handler", i+1, status)
		}
	}
	for _, u := range []string{url + "/api/orders/x", url + "/api/orders"} {
		status, h := do("GET", u, 1, "")
		if n, _ := strconv.Atoi(h.Get("Retry-After")); status != http.StatusTooManyRequests || n < 1 {
			t.Errorf("GET %s past the limit: %d with Retry-After %q, want 429 with whole seconds", u, status, h.Get("Retry-After"))
		}
	}
	if status, _ := do("GET", url+"/api/orders/x", 2, ""); status != http.StatusBadRequest {
		t.Errorf("another buyer: status %d, want 400", status)
	}
	// The buy route's bucket is its own: buyer 1 may still buy.
	if status, _ := do("POST", url+"/api/vouchers/x/seckill", 1, ""); status != http.StatusBadRequest {
		t.Errorf("a buy after the reads: status %d, want 400 from the handler", status)
	}

	// Per address, through a trusted proxy: each client has its own bucket
	// whichever buyer it reads for.
	url = start(Config{OrderRateAddr: 0.001, OrderRateAddrBurst: 2, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	for user := range int64(2) {
		if status, _ := do("GET", url+"/api/orders/x", user+1, "198.51.100.1"); status != http.StatusBadRequest {
			t.Fatalf("read %d from 198.51.100.1: status %d, want 400", user+1, status)
		}
	}
	if status, _ := do("GET", url+"/api/orders/x", 3, "198.51.100.1"); status != http.StatusTooManyRequests {
		t.Errorf("third read from 198.51.100.1: status %d, want 429", status)
	}
	if status, _ := do("GET", url+"/api/orders/x", 3, "198.51.100.2"); status != http.StatusBadRequest {
		t.Errorf("a read from 198.51.100.2: status %d, want 400", status)
	}
}
