package http

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// routedLikeMux checks that buyPath takes the request only if the mux
// routes it to the buy route with the same id, and reports whether it took
// it.
func routedLikeMux(t *testing.T, mux *http.ServeMux, method, target string) bool {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return false
	}
	r := &http.Request{Method: method, URL: u, Host: "example.com", Header: http.Header{}}
	id, ok := buyPath(r)
	if !ok {
		return false
	}
	_, pattern := mux.Handler(r)
	if pattern != buyPattern {
		t.Errorf("%s %s: buyPath took it (id %q), the mux routes it to %q", method, target, id, pattern)
		return true
	}
	// The id the mux would give the handler.
	var got string
	m := http.NewServeMux()
	m.HandleFunc(buyPattern, func(_ http.ResponseWriter, r *http.Request) { got = r.PathValue("id") })
	m.ServeHTTP(httptest.NewRecorder(), r)
	if got != id {
		t.Errorf("%s %s: buyPath id %q, the mux's %q", method, target, id, got)
	}
	return true
}

// newMux is the server's mux with its routes, for routing questions.
func newMux(t testing.TB) *http.ServeMux {
	s, err := New(Config{}, Services{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, rt := range s.routes {
		mux.Handle(rt.pattern, rt.handler)
	}
	return mux
}

// TestBuyPath: the buys a sale sends take the short way, and nothing is
// taken that the mux would route elsewhere or with another id.
func TestBuyPath(t *testing.T) {
	t.Parallel()
	mux := newMux(t)
	for _, target := range []string{"/api/vouchers/1/seckill", "/api/vouchers/9223372036854775807/seckill", "/api/vouchers/007/seckill"} {
		if !routedLikeMux(t, mux, "POST", target) {
			t.Errorf("POST %s not taken", target)
		}
	}
	for _, c := range []struct{ method, target string }{
		{"GET", "/api/vouchers/1/seckill"},
		{"PUT", "/api/vouchers/1/seckill"},
		{"POST", "/api/vouchers/seckill"},
		{"POST", "/api/vouchers//seckill"},
		{"POST", "/api/vouchers/x/seckill"},
		{"POST", "/api/vouchers/1/2/seckill"},
		{"POST", "/api/vouchers/1/seckill/"},
		{"POST", "/api/vouchers/1/../1/seckill"},
		{"POST", "/api/vouchers/%31/seckill"},
		{"POST", "/api/vouchers/12345678901234567890/seckill"},
		{"POST", "//api/vouchers/1/seckill"},
		{"POST", "/api/vouchers/1/seckillx"},
	} {
		if routedLikeMux(t, mux, c.method, c.target) {
			t.Errorf("%s %s taken, want it left to the mux", c.method, c.target)
		}
	}
}

// FuzzBuyPath: whatever the request, buyPath agrees with the mux.
func FuzzBuyPath(f *testing.F) {
	for _, s := range []string{"/api/vouchers/1/seckill", "/api/vouchers//seckill", "/api/vouchers/seckill", "/api/vouchers/%31/seckill", "/api/vouchers/1/./seckill"} {
		f.Add("POST", s)
	}
	mux := newMux(f)
	f.Fuzz(func(t *testing.T, method, target string) {
		routedLikeMux(t, mux, method, target)
	})
}
