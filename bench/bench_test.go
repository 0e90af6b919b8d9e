package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// fakeShop is a stand-in server that sells correctly, except that it can be
// told to lose one order: answered 200, never created. Its answers are
// the real server's shape.
type fakeShop struct {
	mu       sync.Mutex
	vouchers []*fakeVoucher // id i+1
	lose     bool
	lost     int64
	nextID   int64
	// challenges are the challenge vouchers' (see fakeChallenges): nil,
	// the shop has no challenge route, as before challenges.
	challenges *fakeChallenges
}

type fakeVoucher struct {
	stock     int64
	shards    *int             // as asked: nil when not sent
	challenge *bool            // as asked: nil when not sent
	orders    map[string]int64 // user → order id
}

func (f *fakeShop) voucher(r *http.Request) (int64, *fakeVoucher) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 || id > int64(len(f.vouchers)) {
		return 0, nil
	}
	return id, f.vouchers[id-1]
}

func (f *fakeShop) handler() http.Handler {
	mux := http.NewServeMux()
	user := func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") }
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("POST /api/admin/vouchers", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stock     int64 `json:"stock"`
			Shards    *int  `json:"shards"`
			Challenge *bool `json:"challenge"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.vouchers = append(f.vouchers, &fakeVoucher{stock: body.Stock, shards: body.Shards, challenge: body.Challenge, orders: map[string]int64{}})
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":"%d"}`, len(f.vouchers))
	})
	mux.HandleFunc("POST /api/vouchers/{id}/seckill", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		vid, v := f.voucher(r)
		u := user(r)
		w.Header().Set("Content-Type", soldOutType)
		// As the server decides: a voucher known sold out is told so
		// without a solution; a duplicate needs one.
		if f.challenges != nil && v.challenge != nil && *v.challenge && (int64(len(v.orders)) < v.stock || f.challenges.forgetSoldOut) {
			if code := f.challenges.check(r, vid, u); code != "" {
				w.WriteHeader(403)
				fmt.Fprintf(w, `{"code":%q,"message":"no"}`+"\n", code)
				return
			}
		}
		if id, ok := v.orders[u]; ok {
			w.WriteHeader(409)
			fmt.Fprintf(w, `{"code":"duplicate_order","message":"you hold order %d","orderId":"%d"}`+"\n", id, id)
			return
		}
		if int64(len(v.orders)) >= v.stock {
			w.WriteHeader(409)
			fmt.Fprintf(w, `{"code":"sold_out","message":"voucher %d is sold out"}`+"\n", vid)
			return
		}
		f.nextID++
		v.orders[u] = f.nextID
		if f.lose && f.lost == 0 {
			f.lost = f.nextID
		}
		fmt.Fprintf(w, `{"orderId":"%d","status":"pending"}`+"\n", f.nextID)
	})
	if f.challenges != nil {
		mux.HandleFunc("GET /api/vouchers/{id}/challenge", func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			vid, v := f.voucher(r)
			f.mu.Unlock()
			if v.challenge == nil || !*v.challenge {
				w.WriteHeader(409)
				fmt.Fprint(w, `{"code":"challenge_not_needed","message":"no"}`)
				return
			}
			uid, _ := strconv.ParseInt(user(r), 10, 64)
			ch, err := seckill.NewChallenge(f.challenges.key, seckill.ChallengeClaims{UserID: uid, VoucherID: vid, Expires: time.Now().Add(time.Minute)}, f.challenges.maxNumber, nil)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("Cache-Control", "no-store")
			json.NewEncoder(w).Encode(ch)
		})
	}
	mux.HandleFunc("GET /api/vouchers/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id, v := f.voucher(r)
		created := int64(len(v.orders))
		for _, o := range v.orders {
			if o == f.lost {
				created--
			}
		}
		fmt.Fprintf(w, `{"id":"%d","stock":%d}`, id, v.stock-created)
	})
	mux.HandleFunc("GET /api/orders", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var list []string
		for i, v := range f.vouchers {
			if id, ok := v.orders[user(r)]; ok && id != f.lost {
				list = append(list, fmt.Sprintf(`{"orderId":"%d","voucherId":"%d","status":"created"}`, id, i+1))
			}
		}
		fmt.Fprintf(w, `{"orders":[%s]}`, strings.Join(list, ","))
	})
	return mux
}

func runFake(t *testing.T, lose bool) *Report {
	t.Helper()
	shop := &fakeShop{lose: lose}
	srv := httptest.NewServer(shop.handler())
	defer srv.Close()
	r, err := Run(context.Background(), Config{
		URL: srv.URL, Label: "fake", Users: 200, Repeat: 3, Stock: 50, Concurrency: 16,
		Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		ReferenceFor: 200 * time.Millisecond, SoldOutFor: 200 * time.Millisecond, DrainTimeout: time.Second,
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
	if r.Bare <= 0 || r.Healthz <= 0 || r.SoldOut <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
		t.Errorf("bare %v, healthz %v, sold-out %v, p50 %v, p99 %v", r.Bare, r.Healthz, r.SoldOut, r.P50, r.P99)
	}
	if r.TimesBare.Sale != r.Rate/r.Bare || r.TimesBare.SoldOut != r.SoldOut/r.Bare || r.TimesBare.Healthz != r.Healthz/r.Bare {
		t.Errorf("ratios to the bare handler %+v; rates: sale %v, sold-out %v, healthz %v, bare %v", r.TimesBare, r.Rate, r.SoldOut, r.Healthz, r.Bare)
	}
	// The bare handler answered as the server answers a sold-out buy.
	if r.SoldOutAnswer.Bytes == 0 || r.BareAnswer != r.SoldOutAnswer {
		t.Errorf("bare answer %+v, sold-out answer %+v: want the same size and type", r.BareAnswer, r.SoldOutAnswer)
	}
	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	if want := []string{"bare", "healthz", "sale", "sold-out", "drain"}; !slices.Equal(names, want) {
		t.Errorf("phases %v, want %v", names, want)
	}
	if sale := r.phase("sale"); sale == nil || sale.Requests != r.Requests || sale.Rate != r.Rate {
		t.Errorf("the sale's phase %+v; report: %d requests at %v req/s", sale, r.Requests, r.Rate)
	}
	// The sale sold out part-way: both of its halves have a rate, and
	// together they are the sale's requests over its time.
	if r.RateUntilSoldOut <= 0 || r.RateAfterSoldOut <= 0 {
		t.Errorf("rates until and after the first sold_out answer: %v, %v; want both", r.RateUntilSoldOut, r.RateAfterSoldOut)
	}
	if lo, hi := min(r.RateUntilSoldOut, r.RateAfterSoldOut), max(r.RateUntilSoldOut, r.RateAfterSoldOut); r.Rate < lo*0.99 || r.Rate > hi*1.01 {
		t.Errorf("the sale's rate %v is not between its halves' %v and %v", r.Rate, lo, hi)
	}
	// And the wait of the last buyers: the first sold_out, from the last
	// 200, within the sale.
	if g := r.SoldOutAfterLastUnit; g == nil || g.Abs().Seconds() > r.Seconds {
		t.Errorf("the first sold_out after the last 200: %v; want a gap within the sale's %.3fs", g, r.Seconds)
	}
}

// TestBooksCatchLostOrder: a server that answers 200 and never writes the
// order is caught.
// TestShards: with Shards the sale's voucher is asked for that many
// shards (no more than its units); without, nothing is sent, as before.
func TestShards(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shards int
		stock  int64
		want   *int
	}{
		{0, 20, nil},
		{1, 20, nil},
		{6, 20, ptr(6)},
		{6, 4, ptr(4)},
	} {
		shop := &fakeShop{}
		srv := httptest.NewServer(shop.handler())
		r, err := Run(context.Background(), Config{
			URL: srv.URL, Label: "fake", Users: 30, Repeat: 1, Stock: tc.stock, Shards: tc.shards, Concurrency: 4,
			Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
			ReferenceFor: -1, SoldOutFor: -1, DrainTimeout: time.Second,
		})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := shop.vouchers[0].shards; (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("Shards %d, stock %d: the voucher was asked for shards %v; want %v", tc.shards, tc.stock, deref(got), deref(tc.want))
		}
		if r.Shards != tc.shards || !r.OK() {
			t.Errorf("Shards %d: report says shards %d, books OK %v", tc.shards, r.Shards, r.OK())
		}
	}
}

func ptr(n int) *int { return &n }

func deref(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}

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
	shop := &fakeShop{}
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
		Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		ReferenceFor: -1, SoldOutFor: -1, DrainTimeout: time.Second,
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

// TestOpenLoopRun: the open-loop steps at fractions of the measured
// admissions maximum, each sent to the server (every request admitted, on
// a voucher of its own) and to the bare handler.
func TestOpenLoopRun(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer((&fakeShop{}).handler())
	defer srv.Close()
	r, err := Run(context.Background(), Config{
		URL: srv.URL, Label: "fake", Users: 100, Repeat: 2, Stock: 10, Concurrency: 8,
		Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		ReferenceFor: -1, SoldOutFor: -1, DrainTimeout: time.Second,
		OpenSteps: []float64{0.1, 0.8}, OpenFor: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Open
	if o == nil || o.MaxRate <= 0 || len(o.Steps) != 2 || r.phase("admissions max") == nil {
		t.Fatalf("open loop %+v", o)
	}
	for _, s := range o.Steps {
		n := int64(math.Ceil(s.Rate * 0.2))
		for _, res := range []OpenResult{s.Server, s.Bare} {
			if res.Scheduled != n || res.Sent != n || res.Dropped != 0 || res.Errors != 0 || res.P99 <= 0 {
				t.Errorf("step %v%%: %+v; want %d sent", s.Percent, res, n)
			}
		}
		if s.Server.Answers["ok"] != n || s.Bare.Answers["sold_out"] != n {
			t.Errorf("step %v%%: the server answered %v, the bare handler %v; want %d admitted, %d sold out", s.Percent, s.Server.Answers, s.Bare.Answers, n, n)
		}
		if (s.Percent == 80) != (s.TargetMet != nil) {
			t.Errorf("step %v%%: target %v; want it judged at 80%% only", s.Percent, s.TargetMet)
		}
	}
	var b strings.Builder
	Table(&b, []*Report{r})
	for _, want := range []string{"Open loop", "80%", "Target:", "admission p99"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTable: the headline is the whole sale's rate, the best second
// beside it, every ratio over the bare handler, and the CPU by phase.
func TestTable(t *testing.T) {
	t.Parallel()
	r := runFake(t, false)
	var b strings.Builder
	Table(&b, []*Report{r})
	out := b.String()
	for _, want := range []string{"req/s  × bare", "best second", "GET /healthz", "bare handler", "CPU ms per 1,000 requests", "sold-out"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ceiling") || strings.Contains(out, "WARNING") {
		t.Errorf("the table speaks of a ceiling or warns:\n%s", out)
	}
}

// fakeChallenges are a fake shop's challenges, made and verified with the
// protocol's own code, each solution taken once; refuse refuses every
// solution, as a broken server would.
type fakeChallenges struct {
	key       []byte
	maxNumber int64
	refuse    bool
	// forgetSoldOut asks for a solution even once sold out, as a server
	// whose memory of the sell-out lapsed.
	forgetSoldOut bool
	used          map[string]bool // the shop's lock guards it
	verified      int64
}

func newFakeChallenges(maxNumber int64) *fakeChallenges {
	return &fakeChallenges{key: seckill.ChallengeKey([]byte("bench test")), maxNumber: maxNumber, used: map[string]bool{}}
}

// check returns the code that refuses the buy's solution, or "".
func (c *fakeChallenges) check(r *http.Request, voucherID int64, user string) string {
	sol, err := seckill.ParseSolution(r.Header.Get("X-Altcha"))
	if errors.Is(err, seckill.ErrChallengeRequired) {
		return "challenge_required"
	}
	if err != nil || c.refuse {
		return "challenge_invalid"
	}
	claims, err := seckill.VerifySolution(c.key, sol, time.Now())
	if err != nil || strconv.FormatInt(claims.UserID, 10) != user || claims.VoucherID != voucherID || c.used[sol.Challenge] {
		return "challenge_invalid"
	}
	c.used[sol.Challenge] = true
	c.verified++
	return ""
}
