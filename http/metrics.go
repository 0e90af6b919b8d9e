package http

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckill/seckill"
)

// metricsPattern is the pattern of the metrics route.
const metricsPattern = "GET /metrics"

// metricsRoute serves reg's metrics, to a client with the metrics token if
// one is configured. The sale's gauges cost a read of Redis and the
// database per open voucher, which the monitor makes at most once per
// --metrics-cache however many ask: a scrape costs Redis nothing more.
func (s *Server) metricsRoute(reg *prometheus.Registry) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelError)})
	if s.cfg.MetricsToken == "" {
		return h
	}
	// Compared as digests: in constant time, whatever the lengths.
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			s.error(w, r, seckill.Errorf(seckill.ErrUnauthorized, "/metrics needs the metrics token: Authorization: Bearer <token>"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// metrics are the server's request counters and latency histograms,
// labelled by route pattern (not by raw path, which a client controls).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// routes holds each route's series, found once (see routeMetrics); it
	// is filled before the server serves and only read after.
	routes map[string]*routeMetrics
}

// routeMetrics are one route's series, kept so that a request does not
// hash its labels to find them.
type routeMetrics struct {
	duration prometheus.Observer
	// codes holds the counter of each status code from 100 to 599, made
	// on first use: a series per code the route never answers would show
	// in every scrape.
	codes [500]atomic.Pointer[prometheus.Counter]
}

// unmatched is the route label of requests that matched no route.
const unmatched = "unmatched"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_http_requests_total",
			Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_http_request_duration_seconds",
			Help: "Time to answer an HTTP request, by route pattern.",
			// Admission answers in about a millisecond; the tail matters.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		routes: map[string]*routeMetrics{},
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("http: register metrics: %w", err)
		}
	}
	return m, nil
}

// addRoute finds the series of the route with the pattern.
func (m *metrics) addRoute(pattern string) {
	m.routes[pattern] = &routeMetrics{duration: m.duration.WithLabelValues(pattern)}
}

// observe counts and times one answer of the route with the pattern.
func (m *metrics) observe(pattern string, status int, d time.Duration) {
	if pattern == "" {
		pattern = unmatched
	}
	rm := m.routes[pattern]
	if rm == nil || status < 100 || status >= 600 {
		// Not a route of the table (a test's mux): the slow way.
		m.requests.WithLabelValues(pattern, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(pattern).Observe(d.Seconds())
		return
	}
	c := rm.codes[status-100].Load()
	if c == nil {
		counter := m.requests.WithLabelValues(pattern, strconv.Itoa(status))
		c = &counter
		rm.codes[status-100].Store(c)
	}
	(*c).Inc()
	rm.duration.Observe(d.Seconds())
}

// instrument counts and times every request under the pattern the mux
// matched, or "unmatched", and turns the mux's own 404 and 405 into JSON
// errors (replaceFallback). The mux records the pattern on the request it
// is given, which must be the one instrument passes on.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, req: r}
		next.ServeHTTP(sw, r)
		s.metrics.observe(r.Pattern, sw.status, time.Since(start))
	})
}

// statusWriter remembers the status code written, and replaces the mux's
// fallback answers.
type statusWriter struct {
	http.ResponseWriter
	req         *http.Request
	status      int
	wroteHeader bool
	// replaced: the answer is replaceFallback's; the mux's body is
	// dropped.
	replaced bool
}

func (w *statusWriter) WriteHeader(status int) {
	if w.replaced {
		return
	}
	if !w.wroteHeader {
		w.status, w.wroteHeader = status, true
		if replaceFallback(w.ResponseWriter, w.req, status) {
			w.replaced = true
			return
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.replaced {
		return len(p), nil
	}
	w.wroteHeader = true
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
