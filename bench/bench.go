// Package bench drives a seckill server as a flash sale's buyers do and
// reports what it measured and whether the books balance: throughput and
// latency of admission, the cost of answering once sold out, the drain of
// orders into the database, and oversell, lost orders and double buyers.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a run. Zero fields take the defaults in their comments.
type Config struct {
	// URL is the server's base URL, or several instances' base URLs,
	// comma-separated: the requests go to each in turn, as a load
	// balancer would send them. Required.
	URL string
	// Label names the run in reports, e.g. "stream/mariadb".
	Label string
	// Token mints a token for a user, an admin's if admin. Required.
	Token func(userID int64, admin bool) (string, error)
	// Users is how many buyers take part. Default 1,000.
	Users int
	// Repeat is how many times each buyer asks. Default 2.
	Repeat int
	// MaxRepeat, if above Repeat, lets each buyer ask a random number of
	// times from Repeat to MaxRepeat, as impatient buyers click.
	MaxRepeat int
	// Duration, if set, runs the sale for this long instead, the buyers
	// asking again and again.
	Duration time.Duration
	// Concurrency is how many requests are in flight at once. Default 64.
	Concurrency int
	// Stock is the voucher's stock. Default Users/10.
	Stock int64
	// FirstUser is the id of the first buyer; buyers are FirstUser,
	// FirstUser+1, …. Default 1,000,000 (clear of real users).
	FirstUser int64
	// CeilingFor, SoldOutFor: how long to measure the trivial endpoint and
	// the answers after sell-out. Defaults 3s each; negative skips.
	CeilingFor, SoldOutFor time.Duration
	// DrainTimeout bounds the wait for the database to hold every admitted
	// order. Default 60s.
	DrainTimeout time.Duration
	// BeforeDrain, if set, runs after the sale and before the drain is
	// timed: a test harness starts held-back workers there, to time the
	// drain of a whole backlog.
	BeforeDrain func()
	// Agree, if set, checks that Redis and the database agree about the
	// voucher (seckill reconcile), returning a line to report.
	Agree func(ctx context.Context, voucherID int64) (ok bool, detail string, err error)
	// Progress receives a line a second while the sale runs; nil for none.
	// With Terminal, the line redraws in place with a progress bar.
	Progress io.Writer
	Terminal bool
	// Client sends the requests; default one with Concurrency connections.
	Client *http.Client
}

func (c *Config) withDefaults() error {
	if c.URL == "" || c.Token == nil {
		return errors.New("bench: URL and Token are required")
	}
	urls := strings.Split(c.URL, ",")
	for i, u := range urls {
		urls[i] = strings.TrimRight(strings.TrimSpace(u), "/")
	}
	c.URL = strings.Join(urls, ",")
	if c.Users <= 0 {
		c.Users = 1000
	}
	if c.Repeat <= 0 {
		c.Repeat = 2
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Stock <= 0 {
		c.Stock = max(int64(c.Users)/10, 1)
	}
	if c.FirstUser <= 0 {
		c.FirstUser = 1_000_000
	}
	if c.CeilingFor == 0 {
		c.CeilingFor = 3 * time.Second
	}
	if c.SoldOutFor == 0 {
		c.SoldOutFor = 3 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 60 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        c.Concurrency * 2,
			MaxIdleConnsPerHost: c.Concurrency * 2,
			DisableCompression:  true,
		}, Timeout: 30 * time.Second}
	}
	return nil
}

// Report is what a run measured. Rates are per second; latencies are of the
// sale's requests.
type Report struct {
	Label    string           `json:"label"`
	Voucher  int64            `json:"voucherId"`
	Stock    int64            `json:"stock"`
	Users    int              `json:"users"`
	Requests int64            `json:"requests"`
	Seconds  float64          `json:"seconds"`
	Rate     float64          `json:"reqPerSec"`
	MaxRate  float64          `json:"maxReqPerSec"`
	Mean     time.Duration    `json:"meanNs"`
	P50      time.Duration    `json:"p50Ns"`
	P99      time.Duration    `json:"p99Ns"`
	P999     time.Duration    `json:"p999Ns"`
	Max      time.Duration    `json:"maxNs"`
	Answers  map[string]int64 `json:"answers"`
	Errors   int64            `json:"errors"`
	Ceiling  float64          `json:"ceilingReqPerSec"`
	SoldOut  float64          `json:"soldOutReqPerSec"`
	// RateUntilSoldOut and RateAfterSoldOut split the sale at its first
	// sold_out answer: requests answered before it over the time until it,
	// and after it over the rest of the sale (0 when the sale did not sell
	// out). A sale that slows down once sold out shows it here.
	RateUntilSoldOut float64       `json:"reqPerSecUntilSoldOut"`
	RateAfterSoldOut float64       `json:"reqPerSecAfterSoldOut"`
	Admitted         int64         `json:"admitted"`
	Created          int64         `json:"created"`
	Oversold         int64         `json:"oversold"`
	Doubles          int64         `json:"buyersWithTwoOrders"`
	Lost             int64         `json:"lost"`
	Drain            time.Duration `json:"drainNs"`
	DrainRate        float64       `json:"dbOrdersPerSec"`
	Agree            *bool         `json:"redisAndDatabaseAgree,omitempty"`
	AgreeNote        string        `json:"agreeDetail,omitempty"`
}

// OK reports whether the books balance: no oversell, no order lost, no
// buyer twice, no transport error, and Redis and the database agree where
// that was checked.
func (r *Report) OK() bool {
	return r.Oversold == 0 && r.Lost == 0 && r.Doubles == 0 && r.Errors == 0 && (r.Agree == nil || *r.Agree)
}

// run is one run's state.
type run struct {
	cfg     Config
	report  *Report
	tokens  []string
	hist    histogram
	second  histogram
	answers sync.Map // answer → *atomic.Int64
	// orders: buyer index → the order id they were answered 200 with.
	mu     sync.Mutex
	orders map[int]string
	ids    map[int]string // buyer → any order id an answer carried
	done   atomic.Int64
	errors atomic.Int64
	// soldOutAt is when the sale first answered sold_out (unix ns; 0
	// before), and afterSoldOut counts the answers since.
	soldOutAt    atomic.Int64
	afterSoldOut atomic.Int64
	// urls are the instances (Config.URL); next picks the next one.
	urls []string
	next atomic.Uint64
}

// Run runs a sale against the server and checks its books.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, report: &Report{Label: cfg.Label, Stock: cfg.Stock, Users: cfg.Users, Answers: map[string]int64{}},
		orders: map[int]string{}, ids: map[int]string{}, urls: strings.Split(cfg.URL, ",")}
	if cfg.CeilingFor > 0 {
		rate, err := r.ceiling(ctx)
		if err != nil {
			return nil, err
		}
		r.report.Ceiling = rate
	}
	if err := r.setUp(); err != nil {
		return nil, err
	}
	if err := r.sale(ctx); err != nil {
		return nil, err
	}
	if cfg.SoldOutFor > 0 && r.report.Admitted >= cfg.Stock {
		r.report.SoldOut = r.soldOut(ctx)
	}
	if cfg.BeforeDrain != nil {
		cfg.BeforeDrain()
	}
	if err := r.books(ctx); err != nil {
		return nil, err
	}
	return r.report, nil
}

// request sends one request and decodes a JSON answer.
func (r *run) request(ctx context.Context, method, path, token string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	base := r.urls[(r.next.Add(1)-1)%uint64(len(r.urls))]
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := r.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, res.Body)
		return res.StatusCode, err
	}
	return res.StatusCode, json.NewDecoder(res.Body).Decode(out)
}

// ceiling measures the server's trivial endpoint with the same client and
// concurrency: the most any endpoint can do in this run.
func (r *run) ceiling(ctx context.Context) (float64, error) {
	var n, failed atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(r.cfg.CeilingFor))
	defer cancel()
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				status, err := r.request(ctx, "GET", "/healthz", "", nil, nil)
				switch {
				case err == nil && status == 200:
					n.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > n.Load() {
		return 0, fmt.Errorf("bench: %s/healthz failed %d times", r.cfg.URL, failed.Load())
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// setUp creates the voucher and mints the buyers' tokens.
func (r *run) setUp() error {
	admin, err := r.cfg.Token(1, true)
	if err != nil {
		return fmt.Errorf("bench: admin token: %w", err)
	}
	now := time.Now().UTC()
	var v struct {
		ID string `json:"id"`
	}
	status, err := r.request(context.Background(), "POST", "/api/admin/vouchers", admin, map[string]any{
		"title": "seckill bench " + r.cfg.Label, "stock": r.cfg.Stock,
		"beginTime": now.Add(-time.Minute).Format(time.RFC3339), "endTime": now.Add(time.Hour).Format(time.RFC3339),
	}, &v)
	if err != nil || status != http.StatusCreated {
		return fmt.Errorf("bench: create the voucher: status %d, %v", status, err)
	}
	if r.report.Voucher, err = strconv.ParseInt(v.ID, 10, 64); err != nil {
		return fmt.Errorf("bench: voucher id %q: %w", v.ID, err)
	}
	r.tokens = make([]string, r.cfg.Users)
	for i := range r.tokens {
		if r.tokens[i], err = r.cfg.Token(r.cfg.FirstUser+int64(i), false); err != nil {
			return fmt.Errorf("bench: buyer token: %w", err)
		}
	}
	return nil
}

// answer is what the server said to one buy.
type answer struct {
	Code    string `json:"code"`
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
}

// buy sends one buyer's request and records it.
func (r *run) buy(ctx context.Context, buyer int) {
	start := time.Now()
	var a answer
	status, err := r.request(ctx, "POST", "/api/vouchers/"+strconv.FormatInt(r.report.Voucher, 10)+"/seckill", r.tokens[buyer], nil, &a)
	d := time.Since(start)
	if ctx.Err() != nil {
		return
	}
	r.hist.record(d)
	r.second.record(d)
	r.done.Add(1)
	if a.Code == "sold_out" {
		r.soldOutAt.CompareAndSwap(0, time.Now().UnixNano())
	}
	if r.soldOutAt.Load() != 0 {
		r.afterSoldOut.Add(1)
	}
	key := a.Code
	switch {
	case err != nil:
		key = "transport_error"
		r.errors.Add(1)
	case status == http.StatusOK:
		key = "ok"
	case key == "":
		key = strconv.Itoa(status)
	}
	c, _ := r.answers.LoadOrStore(key, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if a.OrderID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if status == http.StatusOK {
		if prev, ok := r.orders[buyer]; ok && prev != a.OrderID {
			r.report.Doubles++ // answered 200 twice with two orders
		}
		r.orders[buyer] = a.OrderID
	}
	r.ids[buyer] = a.OrderID
}

// sale runs the buyers' requests, Concurrency at a time, and prints a line
// a second.
func (r *run) sale(ctx context.Context) error {
	total := int64(r.cfg.Users * r.cfg.Repeat)
	plan := make([]int32, 0, total)
	if r.cfg.Duration <= 0 {
		for i := range r.cfg.Users {
			n := r.cfg.Repeat
			if r.cfg.MaxRepeat > n {
				n += rand.IntN(r.cfg.MaxRepeat - n + 1)
			}
			for range n {
				plan = append(plan, int32(i))
			}
		}
		total = int64(len(plan))
		rand.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	}
	saleCtx := ctx
	if r.cfg.Duration > 0 {
		var cancel context.CancelFunc
		saleCtx, cancel = context.WithTimeout(ctx, r.cfg.Duration)
		defer cancel()
		total = 0
	}
	var next atomic.Int64
	start := time.Now()
	stop := r.progress(start, total)
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for saleCtx.Err() == nil {
				i := next.Add(1) - 1
				switch {
				case r.cfg.Duration > 0:
					r.buy(saleCtx, rand.IntN(r.cfg.Users))
				case i < int64(len(plan)):
					r.buy(saleCtx, int(plan[i]))
				default:
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	r.report.MaxRate = stop()
	s := r.hist.take(false)
	r.report.Requests, r.report.Seconds = s.n, elapsed.Seconds()
	r.report.Rate = float64(s.n) / elapsed.Seconds()
	if at := r.soldOutAt.Load(); at != 0 {
		soldOut := time.Unix(0, at)
		after := r.afterSoldOut.Load()
		if until := soldOut.Sub(start).Seconds(); until > 0 {
			r.report.RateUntilSoldOut = float64(s.n-after) / until
		}
		if rest := start.Add(elapsed).Sub(soldOut).Seconds(); rest > 0 {
			r.report.RateAfterSoldOut = float64(after) / rest
		}
	}
	r.report.Mean, r.report.P50, r.report.P99, r.report.P999 = s.mean(), s.quantile(0.5), s.quantile(0.99), s.quantile(0.999)
	r.report.Max = time.Duration(s.max) * time.Microsecond
	r.report.Errors = r.errors.Load()
	r.answers.Range(func(k, v any) bool {
		r.report.Answers[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	r.report.Admitted = int64(len(r.orders))
	return ctx.Err()
}

// progress prints a line a second until the returned func is called, which
// returns the best second's rate.
func (r *run) progress(start time.Time, total int64) func() float64 {
	done := make(chan struct{})
	var best float64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := r.done.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				best = max(best, rate)
				s := r.second.take(true)
				if r.cfg.Progress != nil {
					r.printProgress(now.Sub(start), n, total, rate, s)
				}
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		if r.cfg.Progress != nil && r.cfg.Terminal {
			fmt.Fprintln(r.cfg.Progress)
		}
		if best == 0 { // shorter than a second
			best = float64(r.done.Load()) / time.Since(start).Seconds()
		}
		return best
	}
}

func (r *run) printProgress(at time.Duration, n, total int64, rate float64, s *snapshot) {
	// Other answers are counted by their own keys: n, read a moment
	// earlier, may lag the answers' counts.
	counts, other := map[string]int64{}, int64(0)
	r.answers.Range(func(k, v any) bool {
		switch n := v.(*atomic.Int64).Load(); k {
		case "ok", "sold_out", "duplicate_order":
			counts[k.(string)] = n
		default:
			other += n
		}
		return true
	})
	line := fmt.Sprintf("%3.0fs %8.0f req/s  p50 %-8v p99 %-8v  ok %d  sold_out %d  duplicate %d  other %d",
		at.Seconds(), rate, s.quantile(0.5), s.quantile(0.99), counts["ok"], counts["sold_out"], counts["duplicate_order"], other)
	if !r.cfg.Terminal {
		fmt.Fprintln(r.cfg.Progress, line)
		return
	}
	bar := ""
	if total > 0 {
		const width = 30
		filled := int(float64(width) * float64(n) / float64(total))
		bar = "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "] "
	}
	fmt.Fprintf(r.cfg.Progress, "\r\033[K%s%s", bar, line)
}

// soldOut measures answers once the voucher is sold out: new buyers, who
// can no longer win, asking as fast as they can.
func (r *run) soldOut(ctx context.Context) float64 {
	tokens := make([]string, min(r.cfg.Users, 1000))
	for i := range tokens {
		t, err := r.cfg.Token(r.cfg.FirstUser+int64(r.cfg.Users+i), false)
		if err != nil {
			return 0
		}
		tokens[i] = t
	}
	var n atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(r.cfg.SoldOutFor))
	defer cancel()
	path := "/api/vouchers/" + strconv.FormatInt(r.report.Voucher, 10) + "/seckill"
	var wg sync.WaitGroup
	for w := range r.cfg.Concurrency {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += r.cfg.Concurrency {
				var a answer
				status, err := r.request(ctx, "POST", path, tokens[i%len(tokens)], nil, &a)
				if err == nil && status == http.StatusConflict && a.Code == "sold_out" {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// books waits for the database to hold every admitted order, then checks
// each buyer's orders and the voucher's stock.
func (r *run) books(ctx context.Context) error {
	expected := r.report.Admitted
	start := time.Now()
	deadline := start.Add(r.cfg.DrainTimeout)
	path := "/api/vouchers/" + strconv.FormatInt(r.report.Voucher, 10)
	for {
		var v struct {
			Stock int64 `json:"stock"`
		}
		status, err := r.request(ctx, "GET", path, "", nil, &v)
		if err == nil && status == http.StatusOK && r.cfg.Stock-v.Stock >= expected {
			break
		}
		if time.Now().After(deadline) {
			break // the checks below tell what is missing
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.report.Drain = time.Since(start)
	// With the workers held back during the sale, the drain is of the whole
	// backlog: its rate is the database's. Otherwise the workers wrote as
	// the sale went: the rate is over the sale and the drain.
	window := r.report.Drain.Seconds()
	if r.cfg.BeforeDrain == nil {
		window += r.report.Seconds
	}
	if window > 0 {
		r.report.DrainRate = float64(expected) / window
	}
	// Every order answered 200 must be created, once per buyer.
	var created, lost, doubles atomic.Int64
	buyers := make(chan int)
	var wg sync.WaitGroup
	for range min(r.cfg.Concurrency, 16) {
		wg.Go(func() {
			for b := range buyers {
				var list struct {
					Orders []struct {
						OrderID   string `json:"orderId"`
						VoucherID string `json:"voucherId"`
						Status    string `json:"status"`
					} `json:"orders"`
				}
				status, err := r.request(ctx, "GET", "/api/orders?limit=1000", r.tokens[b], nil, &list)
				if err != nil || status != http.StatusOK {
					lost.Add(1)
					continue
				}
				mine, found := 0, false
				for _, o := range list.Orders {
					if o.VoucherID != strconv.FormatInt(r.report.Voucher, 10) || o.Status != "created" {
						continue
					}
					mine++
					found = found || o.OrderID == r.orders[b]
				}
				if !found {
					lost.Add(1)
				}
				if mine > 1 {
					doubles.Add(1)
				}
				created.Add(int64(mine))
			}
		})
	}
	for b := range r.orders {
		buyers <- b
	}
	close(buyers)
	wg.Wait()
	r.report.Created, r.report.Lost = created.Load(), lost.Load()
	r.report.Doubles += doubles.Load()
	var v struct {
		Stock int64 `json:"stock"`
	}
	// Oversold: more orders created than stock, or a stock below zero.
	r.report.Oversold = max(r.report.Created-r.cfg.Stock, 0)
	if status, err := r.request(ctx, "GET", path, "", nil, &v); err == nil && status == http.StatusOK && v.Stock < 0 {
		r.report.Oversold = max(r.report.Oversold, -v.Stock)
	}
	if r.cfg.Agree != nil {
		ok, detail, err := r.cfg.Agree(ctx, r.report.Voucher)
		if err != nil {
			detail = err.Error()
		}
		r.report.Agree, r.report.AgreeNote = &ok, detail
	}
	return nil
}
