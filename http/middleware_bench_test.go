package http

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMiddleware measures what every request pays before and after
// its handler (limits, metrics, recovery, the mux): GET /healthz through
// the server's handler, and a request that matches no route (the mux's
// 404, made JSON).
func BenchmarkMiddleware(b *testing.B) {
	s, err := New(Config{}, Services{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, path string
		status     int
	}{{"healthz", "/healthz", http.StatusOK}, {"no-route", "/nowhere", http.StatusNotFound}} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", bc.path, nil)
			w := &statusRecorder{h: http.Header{}}
			b.ReportAllocs()
			for range b.N {
				clear(w.h)
				s.Handler().ServeHTTP(w, r)
				if w.status != bc.status {
					b.Fatalf("status %d, want %d", w.status, bc.status)
				}
			}
		})
	}
}

// statusRecorder is a ResponseWriter that keeps the status only.
type statusRecorder struct {
	h      http.Header
	status int
}

func (w *statusRecorder) Header() http.Header         { return w.h }
func (w *statusRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (w *statusRecorder) WriteHeader(status int)      { w.status = status }
