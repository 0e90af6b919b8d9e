// Package bench drives a seckill server as a flash sale's buyers do and
// reports what it measured and whether the books balance: throughput and
// latency of admission, against a bare handler measured the same way in
// the same run; the cost of answering once sold out; the CPU each local
// process spent per request; latencies at a constant arrival rate; the
// drain of orders into the database; and oversell, lost orders and double
// buyers.
package bench

import (
	"bytes"
	"cmp"
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
	"syscall"
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
	// Concurrency is how many clients send requests at once, each on a
	// keep-alive connection of its own (per instance): the closed loops'
	// senders and the open loops' most in flight. Default 64.
	Concurrency int
	// Stock is the voucher's stock. Default Users/10.
	Stock int64
	// Shards is how many shards the bench's vouchers are split into in the
	// server's cache (POST /api/admin/vouchers's shards): above 1, one hot
	// voucher's admissions spread over that many Redis masters. Default 1,
	// sent as nothing, which every server takes.
	Shards int
	// FirstUser is the id of the first buyer; buyers are FirstUser,
	// FirstUser+1, …. Default 1,000,000 (clear of real users).
	FirstUser int64
	// ReferenceFor is how long to measure each reference before the sale,
	// the bare handler and GET /healthz; SoldOutFor, the answers after
	// sell-out. Defaults 3s each; negative skips.
	ReferenceFor, SoldOutFor time.Duration
	// Bare are the timeouts of the bare handler's server: the server's.
	Bare ServerTimeouts
	// OpenRate, if above zero, runs an open-loop step at this many
	// requests a second after the books are checked. Otherwise OpenSteps,
	// if set, first measures the admissions' closed-loop maximum and runs
	// a step at each of these fractions of it (e.g. 0.5, 0.8, 0.95).
	OpenRate  float64
	OpenSteps []float64
	// OpenFor is how long each open-loop step sends, and how long the
	// closed-loop maximum is measured. Default 5s.
	OpenFor time.Duration
	// Watch are the local processes whose CPU each phase reports. Default:
	// this process.
	Watch []Watch
	// ServerInProcess says that the server runs in this process: its CPU
	// beyond the bare handler's phase is then reported as the server's.
	ServerInProcess bool
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
	// Progress receives a line a second while the sale runs, and a line
	// per reference and open-loop step; nil for none. With Terminal, the
	// sale's line redraws in place with a progress bar.
	Progress io.Writer
	Terminal bool
	// Challenge makes the sale's voucher ask for a solved challenge
	// ("challenge": true on create): before each buy the buyer gets a
	// challenge with its token, solves it in Go and sends the solution in
	// the X-Altcha header, as a buyer's page does. The references, the
	// sold-out answers (which a challenge voucher gives without a
	// solution) and the open loop are as without it.
	Challenge bool
	// StartRounds, with Challenge, is how many pairs of start rounds run
	// after the books: the sale's buyers buy a fresh voucher from its
	// start, once without the challenge and once with it, the pairs in
	// alternating order, and the buys' arrivals are counted per 100 ms
	// (see Start). 0: none.
	StartRounds int
	// StartFor is how long a start round sends at most. Default 2s.
	StartFor time.Duration
	// Client sends the requests; default one with Concurrency connections
	// per host, and another like it for the bare handler.
	Client *http.Client
	// DBLatency, when the server's database is behind a delaying proxy, is
	// what that proxy was measured to add to a round trip before the run:
	// it is copied into the report. DBLatencyProbe, if set, measures it
	// again during the sale, under the sale's load.
	DBLatency      *Added
	DBLatencyProbe func(ctx context.Context) (Added, error)
	// Outage, if set, makes the database unreachable for a while during
	// the sale (Config.Outage.At after it starts).
	Outage *Outage
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
	if c.ReferenceFor == 0 {
		c.ReferenceFor = 3 * time.Second
	}
	if c.SoldOutFor == 0 {
		c.SoldOutFor = 3 * time.Second
	}
	if c.OpenFor <= 0 {
		c.OpenFor = 5 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 60 * time.Second
	}
	if c.StartFor <= 0 {
		c.StartFor = 2 * time.Second
	}
	if c.Watch == nil {
		c.Watch = []Watch{{Name: "bench", Self: true}}
	}
	return nil
}

// newClient is the bench's client: keep-alive connections, as many per
// host as there are senders, and no compression.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}, Timeout: 30 * time.Second}
}

// run is one run's state.
type run struct {
	cfg    Config
	report *Report
	tokens []string
	// client sends to the server, bareClient (configured alike) to the
	// bare handler, so that the bare handler's connections can be closed
	// without the server's.
	client, bareClient *http.Client
	bare               *bareServer
	cpu                *cpuMeter
	hist               histogram
	second             histogram
	answers            sync.Map // answer → *atomic.Int64
	// orders: buyer index → the order id they were answered 200 with.
	mu     sync.Mutex
	orders map[int]string
	ids    map[int]string // buyer → any order id an answer carried
	done   atomic.Int64
	errs   tally
	// soldOutAt is when the sale first answered sold_out (unix ns; 0
	// before), and afterSoldOut counts the answers since.
	soldOutAt    atomic.Int64
	afterSoldOut atomic.Int64
	// solves are the sale's challenges solved (Config.Challenge).
	solves solver
	// lastOK is when the sale last answered 200 (unix ns).
	lastOK      atomic.Int64
	soldOutSeen sync.Once
	// urls are the instances (Config.URL); next picks the next one.
	urls []string
	next atomic.Uint64
}

// Run runs a sale against the server and checks its books. Before the
// sale it measures the references, after it the sold-out answers and the
// drain, and last, if configured, the open-loop steps.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, report: &Report{Label: cfg.Label, Connections: cfg.Concurrency, Stock: cfg.Stock, Shards: cfg.Shards, Users: cfg.Users,
		Answers: map[string]int64{}, Phases: []Phase{}},
		orders: map[int]string{}, ids: map[int]string{}, urls: strings.Split(cfg.URL, ","), cpu: newCPUMeter(cfg.Watch)}
	r.client, r.bareClient = cfg.Client, cfg.Client
	if cfg.Client == nil {
		r.client, r.bareClient = newClient(cfg.Concurrency), newClient(cfg.Concurrency)
	}
	defer r.client.CloseIdleConnections()
	defer r.bareClient.CloseIdleConnections()
	if err := r.setUp(); err != nil {
		return nil, err
	}
	if cfg.ReferenceFor > 0 || cfg.OpenRate > 0 || len(cfg.OpenSteps) > 0 {
		body := soldOutBody(r.report.Voucher)
		bare, err := startBare(body, cfg.Bare)
		if err != nil {
			return nil, err
		}
		defer bare.close()
		r.bare, r.report.BareURL = bare, bare.url
		r.report.BareAnswer = Answer{Bytes: int64(len(body)), ContentType: soldOutType}
	}
	if cfg.ReferenceFor > 0 {
		if err := r.references(ctx); err != nil {
			return nil, err
		}
	}
	var err error
	r.phase("sale", func() loopResult {
		var res loopResult
		res, err = r.sale(ctx)
		return res
	})
	if err != nil {
		return nil, err
	}
	if cfg.SoldOutFor > 0 && r.report.Admitted >= cfg.Stock {
		r.soldOut(ctx)
	}
	if cfg.BeforeDrain != nil {
		cfg.BeforeDrain()
	}
	r.phase("drain", func() loopResult { return r.drain(ctx) })
	if err := r.books(ctx); err != nil {
		return nil, err
	}
	if cfg.Challenge && cfg.StartRounds > 0 {
		if err := r.startRounds(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.OpenRate > 0 || len(cfg.OpenSteps) > 0 {
		if err := r.openLoop(ctx); err != nil {
			return nil, err
		}
	}
	r.report.DBLatency = cfg.DBLatency
	r.report.summarize(cfg.ServerInProcess)
	return r.report, nil
}

// say prints a line of progress.
func (r *run) say(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// reply is what came back for one request.
type reply struct {
	status      int
	bytes       int64 // the body's size
	contentType string
}

// send sends one request to base, or to the server's instances in turn
// when base is empty, and decodes a JSON answer into out (nil: discard).
func (r *run) send(ctx context.Context, client *http.Client, base, method, path, token string, body any, out any) (reply, error) {
	return r.sendAltcha(ctx, client, base, method, path, token, "", body, out)
}

// sendAltcha is send with a challenge's solution in the X-Altcha header
// (none when altcha is empty).
func (r *run) sendAltcha(ctx context.Context, client *http.Client, base, method, path, token, altcha string, body any, out any) (reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{}, err
		}
		rd = bytes.NewReader(b)
	}
	if base == "" {
		base = r.urls[(r.next.Add(1)-1)%uint64(len(r.urls))]
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if altcha != "" {
		req.Header.Set("X-Altcha", altcha)
	}
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	rep := reply{status: res.StatusCode, contentType: res.Header.Get("Content-Type")}
	// Read to the end, so that the connection is kept for the next.
	data, err := io.ReadAll(res.Body)
	rep.bytes = int64(len(data))
	if err != nil || out == nil {
		return rep, err
	}
	return rep, json.Unmarshal(data, out)
}

// request sends one request to the server and decodes a JSON answer.
func (r *run) request(ctx context.Context, method, path, token string, body any, out any) (int, error) {
	rep, err := r.send(ctx, r.client, "", method, path, token, body, out)
	return rep.status, err
}

// buyCode sends a buy to the server and returns its answer's error code.
func (r *run) buyCode(ctx context.Context, base, path, token string) (reply, string, error) {
	return r.buyCodeWith(ctx, r.client, base, path, token)
}

func (r *run) buyCodeWith(ctx context.Context, client *http.Client, base, path, token string) (reply, string, error) {
	var a answer
	rep, err := r.send(ctx, client, base, "POST", path, token, nil, &a)
	if err == nil && a.Code == "sold_out" {
		r.noteSoldOut(rep)
	}
	return rep, a.Code, err
}

// noteSoldOut keeps the size of the server's first sold-out answer.
func (r *run) noteSoldOut(rep reply) {
	r.soldOutSeen.Do(func() { r.report.SoldOutAnswer = Answer{Bytes: rep.bytes, ContentType: rep.contentType} })
}

// path is the buy route of a voucher.
func (r *run) path(voucherID int64) string {
	return "/api/vouchers/" + strconv.FormatInt(voucherID, 10) + "/seckill"
}

// tally counts requests that got no answer, by kind.
type tally struct{ refused, reset, other atomic.Int64 }

// add counts err and returns its kind, as an answer's key.
func (t *tally) add(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		t.refused.Add(1)
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET):
		t.reset.Add(1)
		return "connection_reset"
	}
	t.other.Add(1)
	return "transport_error"
}

func (t *tally) total() int64 { return t.refused.Load() + t.reset.Load() + t.other.Load() }

// loopResult is what a phase's requests came to: n answered as expected,
// the failures, over elapsed.
type loopResult struct {
	n       int64
	elapsed time.Duration
	errs    *tally
}

// phase runs one timed part of the run, reads the CPU of the watched
// processes around it, and adds it to the report.
func (r *run) phase(name string, fn func() loopResult) Phase {
	before := r.cpu.sample()
	res := fn()
	after := r.cpu.sample()
	p := Phase{Name: name, Requests: res.n, Seconds: res.elapsed.Seconds(), CPU: r.cpu.since(before, after, res.n)}
	if p.Seconds > 0 {
		p.Rate = float64(res.n) / p.Seconds
	}
	if res.errs != nil {
		p.Errors, p.ConnRefused, p.ConnReset = res.errs.total(), res.errs.refused.Load(), res.errs.reset.Load()
	}
	r.report.Phases = append(r.report.Phases, p)
	return p
}

// closedLoop runs Concurrency senders, each sending its next request as
// soon as its last is answered, until d has passed or limit requests were
// started (0: no limit). Requests in flight at the end are answered and
// counted, not cancelled: the time is until the last answer. send's nil
// counts a request; an error, a failure.
func (r *run) closedLoop(ctx context.Context, d time.Duration, limit int64, send func(ctx context.Context, i int64) error) loopResult {
	var (
		n, next atomic.Int64
		errs    tally
	)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				i := next.Add(1) - 1
				if limit > 0 && i >= limit {
					return
				}
				switch err := send(ctx, i); {
				case err == nil:
					n.Add(1)
				case ctx.Err() == nil:
					errs.add(err)
				}
			}
		})
	}
	wg.Wait()
	return loopResult{n: n.Load(), elapsed: time.Since(start), errs: &errs}
}

// references measures, before the sale, with the same client and
// connections, for the same time: the bare handler, answering the sale's
// very requests with a sold-out answer and doing nothing else, and the
// server's GET /healthz through its whole middleware. Each is warmed up
// first, unmeasured, as the sale is by the references before it.
func (r *run) references(ctx context.Context) error {
	path := r.path(r.report.Voucher)
	bare := r.reference(ctx, "bare", func(ctx context.Context, i int64) error {
		rep, err := r.send(ctx, r.bareClient, r.bare.url, "POST", path, r.tokens[i%int64(len(r.tokens))], nil, nil)
		if err == nil && rep.status != http.StatusConflict {
			return fmt.Errorf("answered %d", rep.status)
		}
		return err
	})
	// The bare handler's connections are closed: with many, they would
	// hold open files through the sale.
	r.bareClient.CloseIdleConnections()
	healthz := r.reference(ctx, "healthz", func(ctx context.Context, _ int64) error {
		status, err := r.request(ctx, "GET", "/healthz", "", nil, nil)
		if err == nil && status != http.StatusOK {
			return fmt.Errorf("answered %d", status)
		}
		return err
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, p := range []Phase{bare, healthz} {
		if p.Errors > p.Requests {
			return fmt.Errorf("bench: the %s reference failed %d times (refused %d, reset %d), answered %d", p.Name, p.Errors, p.ConnRefused, p.ConnReset, p.Requests)
		}
	}
	r.report.Bare, r.report.Healthz = bare.Rate, healthz.Rate
	r.say("bare handler (plain net/http in this process, %s): %.0f req/s; GET /healthz: %.0f req/s", r.bare.url, bare.Rate, healthz.Rate)
	return nil
}

// reference warms up, then measures one reference.
func (r *run) reference(ctx context.Context, name string, send func(ctx context.Context, i int64) error) Phase {
	what := map[string]string{"bare": "the bare handler (plain net/http answering the sale's requests)", "healthz": "GET /healthz through the server's middleware"}[name]
	r.say("measuring %s for %v, before the sale…", cmp.Or(what, name), r.cfg.ReferenceFor+warmUp(r.cfg.ReferenceFor))
	r.warm(ctx, warmUp(r.cfg.ReferenceFor), send)
	return r.phase(name, func() loopResult { return r.closedLoop(ctx, r.cfg.ReferenceFor, 0, send) })
}

// warmUp is how long a phase of d is warmed up.
func warmUp(d time.Duration) time.Duration { return min(d/5, 500*time.Millisecond) }

// warm sends, unmeasured, as closedLoop does, for d and until every sender
// has been answered once: the connections are dialled, the goroutines
// started.
func (r *run) warm(ctx context.Context, d time.Duration, send func(ctx context.Context, i int64) error) {
	end := time.Now().Add(d)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for first := true; ctx.Err() == nil && (first || time.Now().Before(end)); first = false {
				send(ctx, next.Add(1)-1)
			}
		})
	}
	wg.Wait()
}

// createVoucher creates a voucher on sale now, with Config.Shards shards,
// asking for a challenge if challenge, and returns its id.
func (r *run) createVoucher(stock int64, title string, challenge bool) (int64, error) {
	admin, err := r.cfg.Token(1, true)
	if err != nil {
		return 0, fmt.Errorf("bench: admin token: %w", err)
	}
	now := time.Now().UTC()
	var v struct {
		ID string `json:"id"`
	}
	body := map[string]any{
		"title": "seckill bench " + r.cfg.Label + " " + title, "stock": stock,
		"beginTime": now.Add(-time.Minute).Format(time.RFC3339), "endTime": now.Add(time.Hour).Format(time.RFC3339),
	}
	if r.cfg.Shards > 1 {
		// No more shards than units: the server refuses that.
		body["shards"] = min(int64(r.cfg.Shards), stock)
	}
	if challenge {
		// Sent only when asked, as shards: a server without challenges
		// takes every plain run's voucher as before.
		body["challenge"] = true
	}
	status, err := r.request(context.Background(), "POST", "/api/admin/vouchers", admin, body, &v)
	if err != nil || status != http.StatusCreated {
		return 0, fmt.Errorf("bench: create the voucher: status %d, %v", status, err)
	}
	id, err := strconv.ParseInt(v.ID, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: voucher id %q: %w", v.ID, err)
	}
	return id, nil
}

// setUp creates the sale's voucher and mints the buyers' tokens.
func (r *run) setUp() error {
	id, err := r.createVoucher(r.cfg.Stock, "sale", r.cfg.Challenge)
	if err != nil {
		return err
	}
	r.report.Voucher = id
	if err := r.mintTokens(r.cfg.Users); err != nil {
		return err
	}
	if r.cfg.Challenge {
		r.report.Challenge = true
		return r.probeChallenge(context.Background(), id)
	}
	return nil
}

// mintTokens makes sure buyers 0 to n-1 have tokens.
func (r *run) mintTokens(n int) error {
	for i := len(r.tokens); i < n; i++ {
		t, err := r.cfg.Token(r.cfg.FirstUser+int64(i), false)
		if err != nil {
			return fmt.Errorf("bench: buyer token: %w", err)
		}
		r.tokens = append(r.tokens, t)
	}
	return nil
}

// answer is what the server said to one buy.
type answer struct {
	Code    string `json:"code"`
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
}

// buy sends one buyer's request and records it. With Config.Challenge
// the buyer first gets and solves a challenge; the latency recorded is
// the buy's alone.
func (r *run) buy(ctx context.Context, buyer int) {
	var altcha string
	if r.cfg.Challenge {
		header, key, err := r.solve(ctx, &r.solves, r.report.Voucher, r.tokens[buyer])
		if ctx.Err() != nil {
			return
		}
		if err != nil || key != "" {
			// No buy is sent: the attempt is counted by what stopped it.
			r.done.Add(1)
			if err != nil {
				key = r.errs.add(err)
			}
			c, _ := r.answers.LoadOrStore(key, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			return
		}
		altcha = header
	}
	start := time.Now()
	var a answer
	rep, err := r.sendAltcha(ctx, r.client, "", "POST", r.path(r.report.Voucher), r.tokens[buyer], altcha, nil, &a)
	d := time.Since(start)
	if ctx.Err() != nil {
		return
	}
	r.hist.record(d)
	r.second.record(d)
	r.done.Add(1)
	if a.Code == "sold_out" {
		r.soldOutAt.CompareAndSwap(0, time.Now().UnixNano())
		r.noteSoldOut(rep)
	}
	if r.soldOutAt.Load() != 0 {
		r.afterSoldOut.Add(1)
	}
	key := a.Code
	switch {
	case err != nil:
		key = r.errs.add(err)
	case rep.status == http.StatusOK:
		key = "ok"
		for now := time.Now().UnixNano(); ; {
			if was := r.lastOK.Load(); was >= now || r.lastOK.CompareAndSwap(was, now) {
				break
			}
		}
	case key == "":
		key = strconv.Itoa(rep.status)
	}
	c, _ := r.answers.LoadOrStore(key, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if a.OrderID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep.status == http.StatusOK {
		if prev, ok := r.orders[buyer]; ok && prev != a.OrderID {
			r.report.Doubles++ // answered 200 twice with two orders
		}
		r.orders[buyer] = a.OrderID
	}
	r.ids[buyer] = a.OrderID
}

// sale runs the buyers' requests, Concurrency at a time, and prints a line
// a second.
func (r *run) sale(ctx context.Context) (loopResult, error) {
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
	// The outage ends, and the probe returns, before the sale is over:
	// the drain and the books are then of a database that is back.
	var side sync.WaitGroup
	defer side.Wait()
	if o := r.cfg.Outage; o != nil {
		side.Go(func() { r.report.DBOutage = o.run(ctx, start) })
	}
	if probe := r.cfg.DBLatencyProbe; probe != nil {
		side.Go(func() { r.probeDBLatency(saleCtx, probe) })
	}
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
	r.report.MaxRate, r.report.DatabaseCoresPeak = stop()
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
		if last := r.lastOK.Load(); last != 0 {
			gap := time.Duration(at - last)
			r.report.SoldOutAfterLastUnit = &gap
		}
	}
	r.report.Mean, r.report.P50, r.report.P99, r.report.P999 = s.mean(), s.quantile(0.5), s.quantile(0.99), s.quantile(0.999)
	r.report.Max = time.Duration(s.max) * time.Microsecond
	r.report.Errors, r.report.ConnRefused, r.report.ConnReset = r.errs.total(), r.errs.refused.Load(), r.errs.reset.Load()
	r.answers.Range(func(k, v any) bool {
		r.report.Answers[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	r.report.ChallengeErrors = countCodes(r.report.Answers, challengeCodes)
	r.report.Solves = r.solves.stats()
	r.report.Admitted = int64(len(r.orders))
	return loopResult{n: s.n, elapsed: elapsed, errs: &r.errs}, ctx.Err()
}

// progress prints a line a second until the returned func is called, which
// returns the best second's rate: of the whole seconds, and of the last
// part if it lasted half a second or more; and the database's busiest
// second, in cores, when it is watched.
func (r *run) progress(start time.Time, total int64) func() (best, dbPeak float64) {
	done := make(chan struct{})
	var best, dbPeak float64
	last, lastAt := int64(0), start
	db := r.cpu.watchesDatabase()
	var cpuAt cpuSample
	if db {
		cpuAt = r.cpu.sample()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
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
				if db {
					next := r.cpu.sample()
					dbPeak = max(dbPeak, r.cpu.databaseCores(cpuAt, next))
					cpuAt = next
				}
				if r.cfg.Progress != nil {
					r.printProgress(now.Sub(start), n, total, rate, s)
				}
			}
		}
	})
	return func() (float64, float64) {
		close(done)
		wg.Wait()
		if r.cfg.Progress != nil && r.cfg.Terminal {
			fmt.Fprintln(r.cfg.Progress)
		}
		if rest := time.Since(lastAt); rest >= time.Second/2 || best == 0 { // best == 0: shorter than a second
			best = max(best, float64(r.done.Load()-last)/rest.Seconds())
			if db {
				dbPeak = max(dbPeak, r.cpu.databaseCores(cpuAt, r.cpu.sample()))
			}
		}
		return best, dbPeak
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
// can no longer win, asking as fast as they can; as many buyers as the
// sale's (at least 1,000), so that a per-buyer rate limit does not cut
// in.
func (r *run) soldOut(ctx context.Context) {
	tokens := make([]string, max(r.cfg.Users, 1000))
	for i := range tokens {
		t, err := r.cfg.Token(r.cfg.FirstUser+int64(r.cfg.Users+i), false)
		if err != nil {
			return
		}
		tokens[i] = t
	}
	path := r.path(r.report.Voucher)
	var refused sync.Map // code → *atomic.Int64
	p := r.phase("sold-out", func() loopResult {
		return r.closedLoop(ctx, r.cfg.SoldOutFor, 0, func(ctx context.Context, i int64) error {
			rep, code, err := r.buyCode(ctx, "", path, tokens[i%int64(len(tokens))])
			if err == nil && (rep.status != http.StatusConflict || code != "sold_out") {
				key := code
				if key == "" {
					key = strconv.Itoa(rep.status)
				}
				c, _ := refused.LoadOrStore(key, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
				return fmt.Errorf("answered %d %s", rep.status, code)
			}
			return err
		})
	})
	r.report.SoldOut = p.Rate
	refused.Range(func(k, v any) bool {
		if r.report.SoldOutOther == nil {
			r.report.SoldOutOther = map[string]int64{}
		}
		r.report.SoldOutOther[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
}

// drain waits for the database to hold every admitted order. Its count is
// of the orders written meanwhile when the workers were held back (the
// whole backlog), else none: they kept up with the sale.
func (r *run) drain(ctx context.Context) loopResult {
	expected := r.report.Admitted
	r.report.Drain = r.written(ctx, r.report.Voucher, r.cfg.Stock, expected)
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
	res := loopResult{elapsed: r.report.Drain}
	if r.cfg.BeforeDrain != nil {
		res.n = expected
	}
	return res
}

// written waits, at most DrainTimeout, until the database holds n orders
// of a voucher of that initial stock, and returns how long it waited.
func (r *run) written(ctx context.Context, voucherID, stock, n int64) time.Duration {
	start := time.Now()
	deadline := start.Add(r.cfg.DrainTimeout)
	path := "/api/vouchers/" + strconv.FormatInt(voucherID, 10)
	for ctx.Err() == nil {
		var v struct {
			Stock int64 `json:"stock"`
		}
		status, err := r.request(ctx, "GET", path, "", nil, &v)
		if err == nil && status == http.StatusOK && stock-v.Stock >= n {
			break
		}
		if time.Now().After(deadline) {
			break // the checks of books tell what is missing
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Since(start)
}

// books checks each buyer's orders and the voucher's stock.
func (r *run) books(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path := "/api/vouchers/" + strconv.FormatInt(r.report.Voucher, 10)
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
