package http_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/worker"
)

// buyBench is the service as serve builds it, on this machine's Redis and
// database, called through its handler without a network: what the server
// spends on a buy. The per-buyer rate limit is on, as serve's default is,
// but high enough never to refuse a benchmark's buyers: it costs the same.
type buyBench struct {
	handler http.Handler
	app     *app.App
	tokens  *auth.Tokens
}

func newBuyBench(b *testing.B) *buyBench {
	b.Helper()
	logger := slog.New(slog.DiscardHandler)
	store := apptest.Store(b)
	cache, _, _ := apptest.Redis(b, logger)
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(context.Background(), app.Config{
		Store: store, Cache: cache, Tokens: tokens, Logger: logger, Registry: prometheus.NewRegistry(),
		HTTP:   sechttp.Config{RateUser: 1e6, RateUserBurst: 1e6},
		Stream: worker.Config{Consumer: "bench"},
		Test:   app.TestConfig{NoNodeWait: true, NoCacheWatch: true},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.Close)
	return &buyBench{handler: a.Handler(), app: a, tokens: tokens}
}

// voucher puts a voucher on sale with the stock and returns its buy path.
func (bb *buyBench) voucher(b *testing.B, stock int64) string {
	b.Helper()
	now := time.Now()
	v, err := bb.app.Vouchers.Create(context.Background(), &seckill.Voucher{Title: "bench", Stock: stock,
		BeginTime: now.Add(-time.Second), EndTime: now.Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	return "/api/vouchers/" + strconv.FormatInt(v.ID, 10) + "/seckill"
}

// requests makes a buy request for each of n buyers, from user first on.
func (bb *buyBench) requests(b *testing.B, path string, first, n int) []*http.Request {
	b.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		token, err := bb.tokens.Mint(auth.Identity{UserID: int64(first + i)}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		reqs[i] = r
	}
	return reqs
}

// benchWriter is a ResponseWriter that keeps the status only.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

// pool is how many buyers a benchmark of first clicks makes: b.N, and at
// least 4096 whatever b.N, so that instruction counts of two b.N up to that
// differ by the requests alone.
func pool(b *testing.B) int { return max(b.N, 4096) }

// serve runs the requests, each in turn, from many goroutines at once (so
// that the Redis client pipelines them, as under load), checking each
// status.
func (bb *buyBench) serve(b *testing.B, reqs []*http.Request, want int) {
	b.Helper()
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		w := &benchWriter{h: http.Header{}}
		for pb.Next() {
			i := seq.Add(1) - 1
			clear(w.h)
			w.status = http.StatusOK
			bb.handler.ServeHTTP(w, reqs[i%int64(len(reqs))])
			if w.status != want {
				b.Errorf("request %d: status %d, want %d", i, w.status, want)
				return
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the CPU time this process has used, user and system, in
// ns: a benchmark's CPU per request, which its wall time (mostly waiting
// for Redis, one request at a time) does not show.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkBuy measures POST /api/vouchers/{id}/seckill through the whole
// handler (middleware, token, rate limit, service, Redis), one request at a
// time:
//   - admitted: a buyer's first click, stock left (an admission script);
//   - sold-out/first: a buyer's first click after the sell-out (a token
//     not seen before, and a read of the buyer's slot);
//   - sold-out/repeat: a click again after the sell-out (the token seen);
//   - duplicate: a winner asking again after the sell-out.
func BenchmarkBuy(b *testing.B) {
	bb := newBuyBench(b)
	b.Run("admitted", func(b *testing.B) {
		path := bb.voucher(b, int64(b.N)+1)
		bb.serve(b, bb.requests(b, path, 1, pool(b)), http.StatusOK)
	})
	const winners = 1024
	soldOut := bb.voucher(b, winners)
	won := bb.requests(b, soldOut, 1, winners)
	for _, r := range won {
		bb.handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	var next atomic.Int64
	next.Store(winners + 1)
	// One loser finds it sold out by the script; the rest from memory.
	bb.serve(b, bb.requests(b, soldOut, int(next.Add(1))-1, 1), http.StatusConflict)
	b.Run("sold-out/first", func(b *testing.B) {
		n := pool(b)
		first := int(next.Add(int64(n))) - n
		bb.serve(b, bb.requests(b, soldOut, first, n), http.StatusConflict)
	})
	b.Run("sold-out/repeat", func(b *testing.B) {
		reqs := bb.requests(b, soldOut, int(next.Add(4096))-4096, 4096)
		for _, r := range reqs {
			bb.handler.ServeHTTP(httptest.NewRecorder(), r)
		}
		bb.serve(b, reqs, http.StatusConflict)
	})
	b.Run("duplicate", func(b *testing.B) {
		bb.serve(b, won, http.StatusConflict)
	})
}
