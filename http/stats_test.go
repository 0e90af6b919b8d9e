package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	sechttp "github.com/seckill/seckill/http"
)

// statsSource is a fixed snapshot, or an error.
type statsSource struct {
	st  *seckill.Stats
	err error
}

func (s statsSource) Stats(context.Context) (*seckill.Stats, error) { return s.st, s.err }

func statsServer(t *testing.T, src seckill.StatsSource) (url string, tokens *auth.Tokens) {
	t.Helper()
	tokens, err := auth.NewTokens([]byte("stats-test-secret-0123456789abcdef-0123"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sechttp.New(sechttp.Config{}, sechttp.Services{Tokens: tokens, Stats: src}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, tokens
}

func getStats(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/api/admin/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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
	return res.StatusCode, body
}

func mint(t *testing.T, tokens *auth.Tokens, id auth.Identity) string {
	t.Helper()
	token, err := tokens.Mint(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// sampleStats is a snapshot with every field the API shows set, and some
// not known (a lag, a remaining stock).
func sampleStats() *seckill.Stats {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lag, remaining := int64(3), int64(5)
	v := &seckill.Voucher{ID: 9007199254740993, Title: "big id", Stock: 6, InitialStock: 10, BeginTime: at.Add(-time.Hour), EndTime: at.Add(time.Hour), Shards: 1, Paused: true,
		Price: 1250, Currency: "CNY"}
	sharded := &seckill.Voucher{ID: 3, Title: "sharded", Stock: 12, InitialStock: 12, BeginTime: at, EndTime: at.Add(time.Hour), Shards: 2,
		Price: 1200, Currency: "JPY"}
	shardLag := int64(1)
	return &seckill.Stats{
		Time: at,
		Vouchers: []seckill.VoucherStats{
			{Voucher: v, Remaining: &remaining, Created: 4, Failed: 1, Pending: 1, Drift: 0, RedisNode: "10.0.0.7:6379",
				AwaitingPayment: 1, Paid: 3, Cancelled: 2, Returned: 1,
				Stream: seckill.StreamStats{Length: 7, Pending: 2, Lag: &lag, OldestAge: 1500 * time.Millisecond, Consumers: 2, DeadLetters: 1}},
			{Voucher: &seckill.Voucher{ID: 2, Title: "lost", InitialStock: 1, BeginTime: at, EndTime: at, Shards: 1, Currency: "USD"}, Drift: 1},
			{Voucher: sharded, Pending: 1, Drift: 0,
				Stream: seckill.StreamStats{Length: 1, Pending: 0, Lag: nil, Consumers: 1},
				Shards: []seckill.ShardState{
					{Index: 0, Tag: "gk3x9.0.12", Node: "10.0.0.7:6379", Loaded: true, Remaining: 4, Buyers: 1, Length: 1, Lag: &shardLag, TransfersOut: 1, TransferredOut: 3},
					{Index: 1, Tag: "gk3x9.1.0", Node: "10.0.0.8:6379", DeadLetters: 2},
				}},
		},
		Admissions: []seckill.AdmissionSecond{{Time: at, Counts: map[string]int64{"admitted": 3, "sold_out": 9}}, {Time: at.Add(time.Second)}},
		Workers:    seckill.WorkerStats{Consumer: "host-1", Mode: seckill.ModeStream, Busy: 1, Allowed: 4, Breaker: "closed"},
	}
}

// TestAdminStatsJSON: the snapshot's JSON, field by field: ids as strings,
// null for a lag or a remaining stock that is not known.
func TestAdminStatsJSON(t *testing.T) {
	t.Parallel()
	url, tokens := statsServer(t, statsSource{st: sampleStats()})
	status, body := getStats(t, url, mint(t, tokens, auth.Identity{UserID: 1, Admin: true}))
	if status != 200 {
		t.Fatalf("GET /api/admin/stats = %d %s", status, body)
	}
	var got, want any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{
		"time": "2026-12-01T12:00:00Z",
		"vouchers": [
			{"id": "9007199254740993", "title": "big id", "stock": 6, "initialStock": 10, "remaining": 5,
			 "created": 4, "failed": 1, "pending": 1, "drift": 0, "awaitingPayment": 1, "paid": 3, "cancelled": 2, "returned": 1,
			 "beginTime": "2026-12-01T11:00:00Z", "endTime": "2026-12-01T13:00:00Z", "paused": true,
			 "price": 1250, "currency": "CNY", "priceText": "12.50 CNY", "revenue": 3750, "revenueText": "37.50 CNY",
			 "stream": {"length": 7, "pending": 2, "lag": 3, "oldestPendingSeconds": 1.5, "consumers": 2, "deadLetters": 1},
			 "redisNode": "10.0.0.7:6379", "shards": 1},
			{"id": "2", "title": "lost", "stock": 0, "initialStock": 1, "remaining": null,
			 "created": 0, "failed": 0, "pending": 0, "drift": 1, "awaitingPayment": 0, "paid": 0, "cancelled": 0, "returned": 0,
			 "beginTime": "2026-12-01T12:00:00Z", "endTime": "2026-12-01T12:00:00Z", "paused": false,
			 "price": 0, "currency": "USD", "priceText": "0.00 USD", "revenue": 0, "revenueText": "0.00 USD",
			 "stream": {"length": 0, "pending": 0, "lag": null, "oldestPendingSeconds": 0, "consumers": 0, "deadLetters": 0},
			 "redisNode": "", "shards": 1},
			{"id": "3", "title": "sharded", "stock": 12, "initialStock": 12, "remaining": null,
			 "created": 0, "failed": 0, "pending": 1, "drift": 0, "awaitingPayment": 0, "paid": 0, "cancelled": 0, "returned": 0,
			 "beginTime": "2026-12-01T12:00:00Z", "endTime": "2026-12-01T13:00:00Z", "paused": false,
			 "price": 1200, "currency": "JPY", "priceText": "1200 JPY", "revenue": 0, "revenueText": "0 JPY",
			 "stream": {"length": 1, "pending": 0, "lag": null, "oldestPendingSeconds": 0, "consumers": 1, "deadLetters": 0},
			 "redisNode": "", "shards": 2,
			 "shardStats": [
				{"index": 0, "tag": "gk3x9.0.12", "redisNode": "10.0.0.7:6379", "remaining": 4, "buyers": 1,
				 "length": 1, "pending": 0, "lag": 1, "deadLetters": 0, "transfersOut": 1, "transferredOut": 3},
				{"index": 1, "tag": "gk3x9.1.0", "redisNode": "10.0.0.8:6379", "remaining": null, "buyers": 0,
				 "length": 0, "pending": 0, "lag": null, "deadLetters": 2, "transfersOut": 0, "transferredOut": 0}
			 ]}
		],
		"admissions": [
			{"time": "2026-12-01T12:00:00Z", "counts": {"admitted": 3, "sold_out": 9}},
			{"time": "2026-12-01T12:00:01Z", "counts": {}}
		],
		"workers": {"consumer": "host-1", "mode": "stream", "busy": 1, "allowed": 4, "breaker": "closed"}
	}`), &want); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.MarshalIndent(got, "", "  ")
	wantJSON, _ := json.MarshalIndent(want, "", "  ")
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("got\n%s\nwant\n%s", gotJSON, wantJSON)
	}
}

// TestAdminStatsDecodes: a server's answer, read into StatsJSON (as
// `seckill stats --url` reads it), is the snapshot the server was given:
// the one JSON type serves both ends.
func TestAdminStatsDecodes(t *testing.T) {
	t.Parallel()
	want := sampleStats()
	url, tokens := statsServer(t, statsSource{st: want})
	status, body := getStats(t, url, mint(t, tokens, auth.Identity{UserID: 1, Admin: true}))
	if status != 200 {
		t.Fatalf("GET /api/admin/stats = %d %s", status, body)
	}
	var j sechttp.StatsJSON
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	// A second without answers is shown as {}: read back, an empty map.
	if diff := cmp.Diff(want, j.Stats(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the answer read back (-sent +read):\n%s", diff)
	}
}

// TestAdminStatsAccess: admins only; a failed read is a 503, not a 500.
func TestAdminStatsAccess(t *testing.T) {
	t.Parallel()
	url, tokens := statsServer(t, statsSource{st: &seckill.Stats{}})
	if status, body := getStats(t, url, ""); status != 401 {
		t.Errorf("no token: %d %s, want 401", status, body)
	}
	if status, body := getStats(t, url, mint(t, tokens, auth.Identity{UserID: 2})); status != 403 {
		t.Errorf("a buyer: %d %s, want 403", status, body)
	}
	status, body := getStats(t, url, mint(t, tokens, auth.Identity{UserID: 1, Admin: true}))
	var empty struct {
		Vouchers   []any `json:"vouchers"`
		Admissions []any `json:"admissions"`
	}
	if err := json.Unmarshal(body, &empty); status != 200 || err != nil || empty.Vouchers == nil || len(empty.Admissions) != 300 {
		t.Errorf("no vouchers: %d %s, want 200 with vouchers [] and 300 seconds of admissions", status, body)
	}

	url, tokens = statsServer(t, statsSource{err: errors.New("dial tcp 10.0.0.7:3306: i/o timeout")})
	status, body = getStats(t, url, mint(t, tokens, auth.Identity{UserID: 1, Admin: true}))
	if status != 503 || strings.Contains(string(body), "10.0.0.7") {
		t.Errorf("source fails: %d %s, want 503 without the cause", status, body)
	}
	url, tokens = statsServer(t, nil)
	if status, body := getStats(t, url, mint(t, tokens, auth.Identity{UserID: 1, Admin: true})); status != 503 {
		t.Errorf("no source: %d %s, want 503", status, body)
	}
}
