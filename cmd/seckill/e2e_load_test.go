package main

// The buyers of the end-to-end tests: a crowd of HTTP clients that press
// "buy" as people do, and what each was answered.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/seckill/seckill/auth"
)

// newClient returns an HTTP client of the test's, whose idle connections
// close when the test ends.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// do sends a JSON request and returns the status and the decoded answer.
func do(ctx context.Context, c *http.Client, method, url, token, body string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return res.StatusCode, nil, fmt.Errorf("%s %s: %d answer %q is not a JSON object", method, url, res.StatusCode, raw)
	}
	return res.StatusCode, out, nil
}

// mint returns a token for the user, signed with testSecret.
func mint(t testing.TB, user int64, admin bool) string {
	t.Helper()
	tokens, err := auth.NewTokens([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	token, err := tokens.Mint(auth.Identity{UserID: user, Admin: admin}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// adminUser is the user id of the admin who creates vouchers; buyers are
// 1001 and up.
const adminUser = 1

// createVoucher creates a voucher on sale now, for an hour, with the stock.
func createVoucher(t *testing.T, c *http.Client, base string, stock int) int64 {
	t.Helper()
	now := time.Now().UTC()
	body := fmt.Sprintf(`{"title":"crash test","stock":%d,"beginTime":"%s","endTime":"%s"}`,
		stock, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	status, out, err := do(context.Background(), c, "POST", base+"/api/admin/vouchers", mint(t, adminUser, true), body)
	if err != nil || status != 201 {
		t.Fatalf("create voucher = %d %v %v", status, out, err)
	}
	id, err := strconv.ParseInt(fmt.Sprint(out["id"]), 10, 64)
	if err != nil {
		t.Fatalf("voucher id %v: %v", out["id"], err)
	}
	return id
}

// buyers returns n buyer ids, 1001 and up.
func buyers(n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(1001 + i)
	}
	return ids
}

// shuffledAttempts returns the requests of a sale in a random order: each
// buyer once, and repeats more from buyers picked at random (a buyer who
// presses "buy" again).
func shuffledAttempts(users []int64, repeats int) []int64 {
	out := slices.Clone(users)
	for range repeats {
		out = append(out, users[rand.IntN(len(users))])
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// load is a crowd of buyers, each request sent to one of the current
// targets. A request that gets no answer (connection refused, reset) or a
// 503 is sent again after a short pause, as a buyer presses again, until
// it gets an answer or the load's context ends. Every answer is counted,
// and the order ids of 200s and of duplicate_order answers are kept.
type load struct {
	client  *http.Client
	voucher int64
	tokens  map[int64]string
	// admitted is the status of an order answered 200: pending, or
	// created in the sync mode.
	admitted string

	targets atomic.Pointer[[]string]
	rr      atomic.Uint64
	next    atomic.Int64
	wg      sync.WaitGroup

	// progress gets a value, if it has room, at each answer.
	progress chan struct{}

	mu         sync.Mutex
	accepted   map[int64]int64   // order id → buyer, answered 200
	byUser     map[int64][]int64 // buyer → order ids answered 200, in order
	dups       map[int64]int64   // order id → buyer, answered 409 duplicate_order
	counts     map[string]int    // "200", "sold_out", "duplicate_order", "503", "conn_error", "gave_up", …
	unexpected []string          // answers the API does not allow
	maxLatency time.Duration     // of a 200
	// sentAt is when the request answered 200 was sent, by order id: an
	// admission after a pause or an end was answered is one sent after.
	sentAt map[int64]time.Time
	// controlled says an operator may pause or end the sale: 409 paused
	// (the buyer presses again) and 409 ended are answers the API allows;
	// else they are unexpected.
	controlled bool
}

func newLoad(t *testing.T, c *http.Client, voucher int64, users []int64) *load {
	t.Helper()
	l := &load{
		client:   c,
		voucher:  voucher,
		admitted: "pending",
		tokens:   make(map[int64]string, len(users)),
		progress: make(chan struct{}, 1),
		accepted: map[int64]int64{},
		byUser:   map[int64][]int64{},
		dups:     map[int64]int64{},
		counts:   map[string]int{},
		sentAt:   map[int64]time.Time{},
	}
	tokens, err := auth.NewTokens([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if l.tokens[u], err = tokens.Mint(auth.Identity{UserID: u}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// setTargets sets the base URLs the requests go to, in turn.
func (l *load) setTargets(urls ...string) { l.targets.Store(&urls) }

func (l *load) target() string {
	ts := *l.targets.Load()
	return ts[l.rr.Add(1)%uint64(len(ts))]
}

// start sends the attempts (buyer ids) with workers goroutines, each pausing
// pace between requests, and returns at once; wait waits for the end. The
// load gives up after timeout, and stops when the test ends.
func (l *load) start(t *testing.T, attempts []int64, workers int, pace, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(func() {
		cancel()
		l.wg.Wait()
	})
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				i := l.next.Add(1) - 1
				if int(i) >= len(attempts) {
					return
				}
				l.buy(ctx, attempts[i])
				if pace > 0 && !sleep(ctx, pace) {
					return
				}
			}
		}()
	}
}

// wait waits for the workers to send every attempt.
func (l *load) wait() { l.wg.Wait() }

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func (l *load) buy(ctx context.Context, user int64) {
	path := fmt.Sprintf("/api/vouchers/%d/seckill", l.voucher)
	for {
		start := time.Now()
		status, body, err := do(ctx, l.client, "POST", l.target()+path, l.tokens[user], "")
		took := time.Since(start)
		code, _ := body["code"].(string)
		switch {
		case err != nil && status == 0:
			if ctx.Err() != nil {
				l.record("gave_up", nil)
				return
			}
			l.record("conn_error", nil)
		case err != nil:
			l.record("unexpected", func() { l.unexpected = append(l.unexpected, err.Error()) })
			return
		case status == 200:
			id, perr := strconv.ParseInt(fmt.Sprint(body["orderId"]), 10, 64)
			if perr != nil || body["status"] != l.admitted {
				l.record("unexpected", func() { l.unexpected = append(l.unexpected, fmt.Sprintf("200 %v", body)) })
				return
			}
			l.record("200", func() {
				l.accepted[id] = user
				l.byUser[user] = append(l.byUser[user], id)
				l.maxLatency = max(l.maxLatency, took)
				l.sentAt[id] = start
			})
			return
		case status == 409 && (code == "sold_out" || (l.controlled && code == "ended")):
			l.record(code, nil)
			return
		case status == 409 && l.controlled && code == "paused":
			// The operator paused the sale: the buyer presses again.
			l.record(code, nil)
		case status == 409 && code == "duplicate_order":
			id, perr := strconv.ParseInt(fmt.Sprint(body["orderId"]), 10, 64)
			if perr != nil {
				l.record("unexpected", func() { l.unexpected = append(l.unexpected, fmt.Sprintf("409 %v", body)) })
				return
			}
			l.record(code, func() { l.dups[id] = user })
			return
		case status == 503 || status == 429:
			l.record(strconv.Itoa(status), nil)
		default:
			l.record("unexpected", func() { l.unexpected = append(l.unexpected, fmt.Sprintf("%d %v", status, body)) })
			return
		}
		// No answer, or "try again": the buyer presses again shortly.
		if !sleep(ctx, 20*time.Millisecond) {
			l.record("gave_up", nil)
			return
		}
	}
}

func (l *load) record(what string, f func()) {
	l.mu.Lock()
	l.counts[what]++
	if f != nil {
		f()
	}
	l.mu.Unlock()
	select {
	case l.progress <- struct{}{}:
	default:
	}
}

// stats returns a copy of the answer counts.
func (l *load) stats() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.counts))
	for k, v := range l.counts {
		out[k] = v
	}
	return out
}

// waitCount waits until the count of what reaches n.
func (l *load) waitCount(t *testing.T, what string, n int, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if l.stats()[what] >= n {
			return
		}
		select {
		case <-l.progress:
		case <-timer.C:
			t.Fatalf("the load did not reach %d %q answers within %v: %v", n, what, timeout, l.stats())
		}
	}
}

// orders returns the order ids answered 200 and with duplicate_order, with
// their buyers.
func (l *load) orders() (accepted, dups map[int64]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	accepted, dups = make(map[int64]int64, len(l.accepted)), make(map[int64]int64, len(l.dups))
	for id, u := range l.accepted {
		accepted[id] = u
	}
	for id, u := range l.dups {
		dups[id] = u
	}
	return accepted, dups
}

// checkAnswers fails the test for answers the API does not allow and for
// buyers the load gave up on.
func (l *load) checkAnswers(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.unexpected) > 0 {
		t.Errorf("%d answers the API does not allow; the first: %q", len(l.unexpected), l.unexpected[:min(5, len(l.unexpected))])
	}
	if n := l.counts["gave_up"]; n > 0 {
		t.Errorf("%d buyers got no answer before the load's deadline", n)
	}
}

// checkOnePerBuyer fails the test if a buyer was answered 200 twice (G2),
// or told by duplicate_order of another order than the one they were
// answered 200 with (G5).
func (l *load) checkOnePerBuyer(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	twice := 0
	for u, ids := range l.byUser {
		if len(ids) > 1 {
			if twice++; twice <= 5 {
				t.Errorf("G2: buyer %d was answered 200 %d times, with orders %v", u, len(ids), ids)
			}
		}
	}
	mismatched := 0
	for id, u := range l.dups {
		if ids := l.byUser[u]; len(ids) > 0 && !slices.Contains(ids, id) {
			if mismatched++; mismatched <= 5 {
				t.Errorf("G5: buyer %d, answered 200 with order %v, was then told of order %d (duplicate_order)", u, ids, id)
			}
		}
	}
}

// statuses reads each order through the API with its buyer's token and
// returns its status: created, failed, pending, or not_found (404).
func (l *load) statuses(t *testing.T, base string, orders map[int64]int64) map[int64]string {
	t.Helper()
	type job struct{ id, user int64 }
	jobs := make(chan job)
	var (
		mu   sync.Mutex
		out  = make(map[int64]string, len(orders))
		errs []string
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				status, body, err := do(context.Background(), l.client, "GET", fmt.Sprintf("%s/api/orders/%d", base, j.id), l.tokens[j.user], "")
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Sprintf("order %d: %v", j.id, err))
				case status == 404 && body["code"] == "order_not_found":
					out[j.id] = "not_found"
				case status != 200:
					errs = append(errs, fmt.Sprintf("order %d: %d %v", j.id, status, body))
				case body["orderId"] != strconv.FormatInt(j.id, 10) || body["userId"] != strconv.FormatInt(j.user, 10) ||
					body["voucherId"] != strconv.FormatInt(l.voucher, 10):
					errs = append(errs, fmt.Sprintf("order %d of buyer %d, voucher %d: the API shows %v", j.id, j.user, l.voucher, body))
				default:
					out[j.id] = fmt.Sprint(body["status"])
				}
				mu.Unlock()
			}
		}()
	}
	for id, u := range orders {
		jobs <- job{id, u}
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		t.Errorf("GET /api/orders/{id} failed for %d orders; the first: %q", len(errs), errs[:min(5, len(errs))])
	}
	return out
}

// takeMaxLatency returns the longest time a 200 took since the last call.
func (l *load) takeMaxLatency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.maxLatency
	l.maxLatency = 0
	return d
}

// diff returns what the counts of now add to those of before.
func diff(before, now map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
