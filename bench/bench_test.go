package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeShop is a stand-in server that sells correctly, except that it can be
// told to lose one order: answered 200, never created.
type fakeShop struct {
	mu     sync.Mutex
	stock  int64
	orders map[string]int64 // user → order id
	lose   bool
	lost   int64
}

func (f *fakeShop) handler() http.Handler {
	mux := http.NewServeMux()
	user := func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") }
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("POST /api/admin/vouchers", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stock int64 `json:"stock"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		f.stock = body.Stock
		w.WriteHeader(201)
		fmt.Fprint(w, `{"id":"7"}`)
	})
	mux.HandleFunc("POST /api/vouchers/7/seckill", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		u := user(r)
		if id, ok := f.orders[u]; ok {
			w.WriteHeader(409)
			fmt.Fprintf(w, `{"code":"duplicate_order","orderId":"%d"}`, id)
			return
		}
		if int64(len(f.orders)) >= f.stock {
			w.WriteHeader(409)
			fmt.Fprint(w, `{"code":"sold_out"}`)
			return
		}
		id := int64(len(f.orders) + 1)
		f.orders[u] = id
		if f.lose && f.lost == 0 {
			f.lost = id
		}
		fmt.Fprintf(w, `{"orderId":"%d","status":"pending"}`, id)
	})
	mux.HandleFunc("GET /api/vouchers/7", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		created := int64(len(f.orders))
		if f.lost != 0 {
			created--
		}
		fmt.Fprintf(w, `{"id":"7","stock":%d}`, f.stock-created)
	})
	mux.HandleFunc("GET /api/orders", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id, ok := f.orders[user(r)]
		if !ok || id == f.lost {
			fmt.Fprint(w, `{"orders":[]}`)
			return
		}
		fmt.Fprintf(w, `{"orders":[{"orderId":"%d","voucherId":"7","status":"created"}]}`, id)
	})
	return mux
}

func runFake(t *testing.T, lose bool) *Report {
	t.Helper()
	shop := &fakeShop{orders: map[string]int64{}, lose: lose}
	srv := httptest.NewServer(shop.handler())
	defer srv.Close()
	r, err := Run(context.Background(), Config{
		URL: srv.URL, Label: "fake", Users: 200, Repeat: 3, Stock: 50, Concurrency: 16,
		Token:      func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		CeilingFor: 200 * time.Millisecond, SoldOutFor: 200 * time.Millisecond, DrainTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBooksBalance(t *testing.T) {
	t.Parallel()
	r := runFake(t, false)
	if r.Admitted != 50 || r.Created != 50 || r.Lost != 0 || r.Oversold != 0 || r.Doubles != 0 || !r.OK() {
		t.Fatalf("a correct server: %+v", r)
	}
	if r.Requests != 600 || r.Answers["ok"] != 50 || r.Answers["sold_out"]+r.Answers["duplicate_order"] != 550 {
		t.Errorf("answers %v of %d requests", r.Answers, r.Requests)
	}
	if r.Ceiling <= 0 || r.SoldOut <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
		t.Errorf("ceiling %v, sold-out %v, p50 %v, p99 %v", r.Ceiling, r.SoldOut, r.P50, r.P99)
	}
	// The sale sold out part-way: both of its halves have a rate, and
	// together they are the sale's requests over its time.
	if r.RateUntilSoldOut <= 0 || r.RateAfterSoldOut <= 0 {
		t.Errorf("rates until and after the first sold_out answer: %v, %v; want both", r.RateUntilSoldOut, r.RateAfterSoldOut)
	}
	if lo, hi := min(r.RateUntilSoldOut, r.RateAfterSoldOut), max(r.RateUntilSoldOut, r.RateAfterSoldOut); r.Rate < lo*0.99 || r.Rate > hi*1.01 {
		t.Errorf("the sale's rate %v is not between its halves' %v and %v", r.Rate, lo, hi)
	}
}

// TestBooksCatchLostOrder: a server that answers 200 and never writes the
// order is caught.
func TestBooksCatchLostOrder(t *testing.T) {
	t.Parallel()
	r := runFake(t, true)
	if r.Lost != 1 || r.OK() {
		t.Fatalf("a server that loses an order: lost %d, OK %v; want 1, false", r.Lost, r.OK())
	}
	if v := Verdict(r); !strings.Contains(v, "1 of 50 orders answered 200 are not in the database") {
		t.Errorf("verdict does not say so:\n%s", v)
	}
}

// TestSeveralInstances: with several URLs, every instance is sent a share
// of the requests, and the books are checked across them.
func TestSeveralInstances(t *testing.T) {
	t.Parallel()
	shop := &fakeShop{orders: map[string]int64{}}
	var hits [3]atomic.Int64
	urls := make([]string, len(hits))
	for i := range hits {
		h := shop.handler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			h.ServeHTTP(w, r)
		}))
		defer srv.Close()
		urls[i] = srv.URL + "/"
	}
	r, err := Run(context.Background(), Config{
		URL: strings.Join(urls, ","), Label: "fake", Users: 200, Repeat: 3, Stock: 50, Concurrency: 16,
		Token:      func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		CeilingFor: -1, SoldOutFor: -1, DrainTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Admitted != 50 || r.Created != 50 || !r.OK() {
		t.Errorf("books across three instances: %+v", r)
	}
	for i := range hits {
		if n := hits[i].Load(); n < 150 {
			t.Errorf("instance %d was sent %d requests of over 600, want about a third", i, n)
		}
	}
}
