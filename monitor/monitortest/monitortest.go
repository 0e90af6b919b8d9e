// Package monitortest runs a flash sale on this machine's Redis and
// MariaDB (isolated per test, through internal/testenv) with every metric of
// the service on one registry: the HTTP server's, the workers' and the
// monitor's. The tests of the metrics, of `seckill stats` and of the
// dashboards and alert rules share it.
package monitortest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/monitor"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/worker"
)

// Secret signs the sale's tokens.
const Secret = "monitortest-secret-0123456789abcdef0123"

// Options shape a Sale.
type Options struct {
	// HoldWorkers leaves the workers stopped until StartWorkers: the
	// admitted orders wait in the streams.
	HoldWorkers bool
	// RedisURL is a Redis of the test's own (faults.StartRedis), for a
	// test that reads the server's statistics; default the shared one.
	RedisURL string
	// MetricsCacheFor is the monitor's (monitor.Config); default none,
	// every scrape reads afresh, for the tests that look after each step.
	MetricsCacheFor time.Duration
}

// Sale is a running service: the store, Redis, the workers, the monitor and
// the HTTP server, with their metrics on Registry.
type Sale struct {
	t *testing.T
	// RedisURL and Prefix, DBURL: where the sale lives.
	RedisURL, Prefix, DBURL string
	Registry                *prometheus.Registry
	Store                   seckill.Store
	Cache                   *redis.Client
	Vouchers                *seckill.VoucherService
	Monitor                 *monitor.Monitor
	Pool                    *worker.Pool
	// URL is the HTTP server's; AdminToken an admin's token for it.
	URL        string
	AdminToken string
	Consumer   string

	tokens  *auth.Tokens
	raw     rueidis.Client
	started sync.Once
}

// Start starts a sale's service for the test; everything stops when the
// test ends.
func Start(t *testing.T, opts Options) *Sale {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(testenv.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := &Sale{t: t, RedisURL: opts.RedisURL, Prefix: testenv.RedisPrefix(t), DBURL: testenv.MySQLURL(t), Registry: prometheus.NewRegistry()}
	if s.RedisURL == "" {
		s.RedisURL = testenv.RedisURL(t)
	}
	metricsCacheFor := opts.MetricsCacheFor
	if metricsCacheFor == 0 {
		metricsCacheFor = -1
	}
	s.Consumer = "test-" + testenv.Random()
	store, err := mysql.Open(ctx, s.DBURL, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.Store = store
	if s.Cache, err = redis.Open(ctx, redis.Config{URL: s.RedisURL, Prefix: s.Prefix}, logger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Cache.Close)
	s.raw = testenv.RawRedis(t, s.RedisURL)
	if s.tokens, err = auth.NewTokens([]byte(Secret)); err != nil {
		t.Fatal(err)
	}
	s.AdminToken = s.Token(auth.Identity{UserID: 1, Admin: true})

	// The service as serve builds it, with every read fresh (the tests
	// look right after each step) and short worker periods.
	a, err := app.New(ctx, app.Config{
		Store:    store,
		Cache:    s.Cache,
		Tokens:   s.tokens,
		Logger:   logger,
		Registry: s.Registry,
		HTTP:     sechttp.Config{RequestTimeout: time.Minute},
		Stream: worker.Config{
			Consumer:     s.Consumer,
			Block:        100 * time.Millisecond,
			Lease:        2 * time.Second,
			ReclaimEvery: 200 * time.Millisecond,
			WatchEvery:   200 * time.Millisecond,
		},
		// The test's key prefix is its own: no lease holder predates it.
		Test:              app.TestConfig{NoNodeWait: true, NoCacheWatch: true, NoStatsCache: true},
		MetricsCacheFor:   metricsCacheFor,
		StatsActiveWithin: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	s.Vouchers, s.Monitor, s.Pool = a.Vouchers, a.Monitor, a.Pool
	srv := a.Server
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	if !opts.HoldWorkers {
		s.StartWorkers()
	}
	return s
}

// StartWorkers starts the workers, if not yet.
func (s *Sale) StartWorkers() {
	s.started.Do(func() {
		if err := s.Pool.Start(context.Background()); err != nil {
			s.t.Fatal(err)
		}
	})
}

// Token mints a token for id.
func (s *Sale) Token(id auth.Identity) string {
	s.t.Helper()
	token, err := s.tokens.Mint(id, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	return token
}

// Voucher creates a voucher on sale now with stock.
func (s *Sale) Voucher(stock int64) *seckill.Voucher {
	s.t.Helper()
	now := time.Now()
	view, err := s.Vouchers.Create(context.Background(), &seckill.Voucher{
		Title: "monitortest", Stock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return view.Voucher
}

// Buy is one click of user on the voucher, through the API; it returns the
// result: "admitted", or the error code.
func (s *Sale) Buy(userID, voucherID int64) string {
	s.t.Helper()
	res, body := s.Do("POST", fmt.Sprintf("/api/vouchers/%d/seckill", voucherID), s.Token(auth.Identity{UserID: userID}))
	var answer struct{ Code, Status string }
	if err := json.Unmarshal(body, &answer); err != nil {
		s.t.Fatalf("buy: %d %s: %v", res, body, err)
	}
	if res == http.StatusOK {
		return "admitted"
	}
	return answer.Code
}

// Run has buyers 1..buyers (plus firstUser-1) click clicks times each on
// the voucher, each buyer in a goroutine of its own, and returns the count
// of each result.
func (s *Sale) Run(voucherID, firstUser int64, buyers, clicks int) map[string]int {
	s.t.Helper()
	var (
		mu      sync.Mutex
		results = map[string]int{}
		wg      sync.WaitGroup
	)
	for b := range buyers {
		wg.Go(func() {
			for range clicks {
				r := s.Buy(firstUser+int64(b), voucherID)
				mu.Lock()
				results[r]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results
}

// Do sends a request to the server with token and returns the status and
// the body.
func (s *Sale) Do(method, path, token string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.URL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return res.StatusCode, body
}

// WaitCreated waits until the database holds n created orders of the
// voucher and its stream has none pending or undelivered, and fails the
// test after 30s.
func (s *Sale) WaitCreated(voucherID, n int64) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		created, err := s.Store.CountOrders(ctx, voucherID)
		if err != nil {
			s.t.Fatal(err)
		}
		info, err := s.Cache.State(ctx, voucherID)
		if err != nil {
			s.t.Fatal(err)
		}
		if created == n && info.Pending == 0 && info.Lag != nil && *info.Lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("voucher %d: %d orders created, %d pending, lag %v after 30s; want %d created, none waiting", voucherID, created, info.Pending, info.Lag, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Deliver reads up to n new order messages of the voucher as consumer (not
// a worker: they stay pending until DeadLetter or a reclaim).
func (s *Sale) Deliver(voucherID int64, consumer string, n int) []seckill.OrderMessage {
	s.t.Helper()
	msgs, err := s.Cache.ReadOrders(context.Background(), seckill.Shard{VoucherID: voucherID}, consumer, n, 10*time.Millisecond)
	if err != nil || len(msgs) != n {
		s.t.Fatalf("read %d orders of voucher %d as %s: %d, %v", n, voucherID, consumer, len(msgs), err)
	}
	return msgs
}

// DeadLetter fails a delivered message's order and moves the message to
// the dead letters, giving its stock back, as a worker does with a message
// it cannot persist.
func (s *Sale) DeadLetter(msg seckill.OrderMessage) {
	s.t.Helper()
	ctx := context.Background()
	o := msg.Order
	o.Status, o.Reason = seckill.OrderFailed, "monitortest"
	if err := s.Store.FailOrder(ctx, &o); err != nil {
		s.t.Fatal(err)
	}
	if moved, err := s.Cache.DeadLetter(ctx, msg, seckill.DeadLetter{Reason: "monitortest"}); err != nil || !moved {
		s.t.Fatalf("dead-letter %s: %v, %v", msg.EntryID, moved, err)
	}
}

// Redis runs a command on the sale's Redis; key names start with Prefix.
func (s *Sale) Redis(args ...string) rueidis.RedisResult {
	s.t.Helper()
	res := s.raw.Do(context.Background(), s.raw.B().Arbitrary(args...).Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		s.t.Fatalf("%v: %v", args, err)
	}
	return res
}

// OrdersKey is the voucher's order stream's key.
func (s *Sale) OrdersKey(voucherID int64) string {
	return testenv.VoucherKey(s.Prefix, voucherID, "orders")
}

// Value returns the value of the metric name with labels (name, value
// pairs; all of the series' labels) in g: a counter's or gauge's value, a
// histogram's count (name_sum: its sum). It reports false if there is no
// such series.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	// name_sum is a histogram's sum of samples.
	base, sum := strings.CutSuffix(name, "_sum")
	for _, f := range families {
		if f.GetName() != name && (!sum || f.GetName() != base) {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelsAre(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil && sum:
				return m.Histogram.GetSampleSum(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// Want fails the test unless the metric's series has value want.
func Want(t testing.TB, g prometheus.Gatherer, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := Value(t, g, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series, want %v", name, labels, want)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func labelsAre(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// Lines returns text's lines, trimmed, without empty ones: for checking a
// command's table output.
func Lines(text string) []string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
