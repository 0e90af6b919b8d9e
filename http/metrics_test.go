package http

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/auth"
)

// getMetrics asks url's /metrics with the Authorization header auth (none
// if empty) and returns the status, the WWW-Authenticate header and the
// body.
func getMetrics(t *testing.T, url, auth string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("WWW-Authenticate"), string(body)
}

func newMetricsServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Services{Tokens: tokens}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMetricsToken: with --metrics-token, /metrics answers only a client
// that sends it; without, anyone, as before.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(newMetricsServer(t, Config{MetricsToken: "scrape-secret"}).Handler())
	t.Cleanup(hs.Close)
	for _, h := range []string{"", "Bearer wrong", "Bearer scrape-secre", "Basic c2NyYXBlLXNlY3JldA==", "scrape-secret"} {
		status, challenge, body := getMetrics(t, hs.URL, h)
		if status != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") || !strings.Contains(body, `"unauthorized"`) {
			t.Errorf("Authorization %q: %d (WWW-Authenticate %q) %.100s; want 401 unauthorized with a Bearer challenge", h, status, challenge, body)
		}
		if strings.Contains(body, "seckill_") {
			t.Errorf("Authorization %q: the metrics were sent", h)
		}
	}
	for _, h := range []string{"Bearer scrape-secret", "bearer  scrape-secret"} {
		if status, _, body := getMetrics(t, hs.URL, h); status != http.StatusOK || !strings.Contains(body, "seckill_http_requests_total") {
			t.Errorf("Authorization %q: %d %.100s; want 200 and the metrics", h, status, body)
		}
	}

	open := httptest.NewServer(newMetricsServer(t, Config{}).Handler())
	t.Cleanup(open.Close)
	if status, _, _ := getMetrics(t, open.URL, ""); status != http.StatusOK {
		t.Errorf("without a token configured: %d, want 200", status)
	}
}

// TestMetricsAddr: with --metrics-addr, /metrics is served there alone,
// and the public address answers it 404.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	s := newMetricsServer(t, Config{Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", MetricsToken: "scrape-secret"})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	if s.MetricsAddr() == nil {
		t.Fatal("MetricsAddr() = nil with Config.MetricsAddr set")
	}
	public, private := "http://"+s.Addr().String(), "http://"+s.MetricsAddr().String()
	if status, _, body := getMetrics(t, public, "Bearer scrape-secret"); status != http.StatusNotFound || strings.Contains(body, "seckill_") {
		t.Errorf("public /metrics: %d %.100s; want 404", status, body)
	}
	if status, _, body := getMetrics(t, private, "Bearer scrape-secret"); status != http.StatusOK || !strings.Contains(body, "seckill_http_requests_total") {
		t.Errorf("/metrics on the metrics address: %d %.100s; want 200 and the metrics", status, body)
	}
	if status, _, _ := getMetrics(t, private, ""); status != http.StatusUnauthorized {
		t.Errorf("/metrics on the metrics address without the token: %d, want 401", status)
	}
	// The metrics address serves nothing else.
	res, err := http.Get(private + "/api/vouchers")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /api/vouchers on the metrics address = %d, want 404", res.StatusCode)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(private + "/metrics"); err == nil {
		t.Error("the metrics address still answers after Shutdown")
	}
}
