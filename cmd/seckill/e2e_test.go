package main

// Helpers of the end-to-end tests that run the real seckill binary against
// this machine's Redis, MariaDB and PostgreSQL: the binary built once per
// run, serve processes and redis-servers the tests kill, a load of buyers,
// and direct looks into the database and Redis to check what the API says.

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

// built is the seckill binary, built once per test run.
var built struct {
	once sync.Once
	path string
	err  error
}

// seckillBinary builds the seckill binary (with the race detector when the
// tests run with it) the first time a test asks, and returns its path.
func seckillBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the seckill binary")
	}
	built.once.Do(func() { built.path, built.err = buildBinary() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

func buildBinary() (string, error) {
	dir, err := binaryDir()
	if err != nil {
		return "", fmt.Errorf("directory for the seckill binary: %w", err)
	}
	path := filepath.Join(dir, "seckill")
	args := []string{"build", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return path, nil
}

// binaryDir is where the binary goes: beside the test binary when go test
// runs it from its work directory (go-build…/b001), which go test removes
// at the end; else, for a test binary run by hand, a temporary directory
// that stays behind.
func binaryDir() (string, error) {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "go-build") {
			return os.MkdirTemp(dir, "e2e-")
		}
	}
	return os.MkdirTemp("", "seckill-e2e-")
}

// childEnv is the environment of a process the tests start: this process's
// without any SECKILL_ variable, plus env.
func childEnv(env environ) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// serveEnv is the configuration of a serve of the crash tests: a claim
// lease of 2s and batches of 20, so that recovery takes seconds.
func serveEnv(redisURL, prefix, dbURL string) environ {
	return environ{
		"SECKILL_REDIS_URL":        redisURL,
		"SECKILL_REDIS_PREFIX":     prefix,
		"SECKILL_DB_URL":           dbURL,
		"SECKILL_JWT_SECRET":       testSecret,
		"SECKILL_ADDR":             "127.0.0.1:0",
		"SECKILL_LOG_FORMAT":       "json",
		"SECKILL_CLAIM_LEASE":      "2s",
		"SECKILL_BATCH_SIZE":       "20",
		"SECKILL_SHUTDOWN_TIMEOUT": "5s",
	}
}

// proc is a process the test started from a binary: a seckill serve or a
// redis-server. Its output (serve's JSON log) is kept in out.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{} // closed once the process has exited
}

// startProc starts bin with args and env. Cleanup kills it (SIGKILL, by its
// PID) if it still runs, and shows its output if the test failed.
func startProc(t *testing.T, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &lines{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		p.check(t)
	})
	return p
}

// kill kills the process with SIGKILL and waits for it to be gone. Killing
// a process that has exited does nothing.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// check fails the test if the process reported a data race or a panic, and
// shows the end of its output if the test failed.
func (p *proc) check(t *testing.T) {
	t.Helper()
	out := p.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		if i := strings.Index(out, bad); i >= 0 {
			t.Errorf("%s wrote %q:\n%s", p.name, bad, out[i:min(len(out), i+4000)])
		}
	}
	if t.Failed() {
		t.Logf("%s: the end of its output, without the answers it logged:\n%s", p.name, tail(out, 80))
	}
}

// requestLine is a line of serve's log about one answer: under load there
// are thousands, and they hide the rest.
var requestLine = regexp.MustCompile(`"msg":"(request failed|admission outcome unknown)"`)

// tail returns the last n lines of s, leaving out requestLine's, and counts
// every kind of message of the JSON log.
func tail(s string, n int) string {
	var ls []string
	counts := map[string]int{}
	msg := regexp.MustCompile(`"msg":"([^"]*)"`)
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if m := msg.FindStringSubmatch(l); m != nil {
			counts[m[1]]++
		}
		if !requestLine.MatchString(l) {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = append([]string{fmt.Sprintf("(%d lines before)", len(ls)-n)}, ls[len(ls)-n:]...)
	}
	if len(counts) > 0 {
		ls = append(ls, fmt.Sprintf("(messages logged: %v)", counts))
	}
	return strings.Join(ls, "\n")
}

// waitOutput waits up to timeout for the process to write a line matching
// pattern and returns the submatches. It fails the test at once if the
// process exits first.
func (p *proc) waitOutput(t *testing.T, pattern string, timeout time.Duration) []string {
	t.Helper()
	w := waiter{re: regexp.MustCompile(pattern), ch: make(chan []string, 1)}
	p.out.mu.Lock()
	p.out.waiters = append(p.out.waiters, w)
	p.out.match()
	p.out.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case m := <-w.ch:
		return m
	case <-p.done:
		// It may have written the line just before it exited.
		select {
		case m := <-w.ch:
			return m
		default:
		}
		t.Fatalf("%s exited (%v) before writing a line matching %q:\n%s", p.name, p.cmd.ProcessState, pattern, tail(p.out.String(), 40))
	case <-timer.C:
		t.Fatalf("%s wrote nothing matching %q within %v:\n%s", p.name, pattern, timeout, tail(p.out.String(), 40))
	}
	return nil
}

// count returns how many lines of the output match pattern.
func (p *proc) count(pattern string) int {
	return len(regexp.MustCompile(pattern).FindAllStringIndex(p.out.String(), -1))
}

// server is a running `seckill serve`.
type server struct {
	*proc
	url string
}

// startServe runs `seckill serve` with env and waits until it listens.
func startServe(t *testing.T, name string, env environ) *server {
	t.Helper()
	p := startProc(t, name, childEnv(env), seckillBinary(t), "serve")
	m := p.waitOutput(t, `"msg":"seckill listening","url":"(http://[^"]+)"`, 30*time.Second)
	return &server{proc: p, url: m[1]}
}

// consumer returns the name the serve took in the order streams' group: by
// default host-pid-random.
func (s *server) consumer(names []string) string {
	mark := "-" + strconv.Itoa(s.cmd.Process.Pid) + "-"
	for _, n := range names {
		if strings.Contains(n, mark) {
			return n
		}
	}
	return ""
}

// execReconcile runs `seckill reconcile` with env and returns its exit code
// and what it printed.
func execReconcile(t *testing.T, env environ) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, seckillBinary(t), "reconcile")
	cmd.Env = childEnv(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), stdout.String() + stderr.String()
	}
	t.Fatalf("seckill reconcile: %v\n%s%s", err, stdout.String(), stderr.String())
	return -1, ""
}

// redisServer is a redis-server of the test's own, as testenv.StartRedis
// starts, that the test can also start again on the same port and
// directory after killing it.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	args []string
	proc *proc
	runs int
}

// startRedisServer starts a redis-server on a free loopback port in a
// directory of the test's, with no persistence unless args say otherwise
// (later arguments win).
func startRedisServer(t *testing.T, args ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not installed: " + err.Error()
		if testenv.CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	r := &redisServer{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir(), args: args}
	l.Close()
	r.start(bin)
	return r
}

// URL is the server's redis:// URL; it stays the same across restarts.
func (r *redisServer) URL() string {
	return "redis://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) + "/0"
}

func (r *redisServer) start(bin string) {
	r.t.Helper()
	r.runs++
	argv := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir, "--save", "", "--appendonly", "no"}, r.args...)
	r.proc = startProc(r.t, fmt.Sprintf("redis-server run %d", r.runs), os.Environ(), bin, argv...)
	r.proc.waitOutput(r.t, "Ready to accept connections", 30*time.Second)
}

// kill kills the server with SIGKILL, by its PID, and waits for it to exit.
func (r *redisServer) kill() { r.proc.kill() }

// restart starts the server again on the same port and directory: with
// appendonly, it loads what it had written there.
func (r *redisServer) restart() {
	r.t.Helper()
	r.start(r.proc.cmd.Path)
}

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
}

func newLoad(t *testing.T, c *http.Client, voucher int64, users []int64) *load {
	t.Helper()
	l := &load{
		client:   c,
		voucher:  voucher,
		tokens:   make(map[int64]string, len(users)),
		progress: make(chan struct{}, 1),
		accepted: map[int64]int64{},
		byUser:   map[int64][]int64{},
		dups:     map[int64]int64{},
		counts:   map[string]int{},
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
			if perr != nil || body["status"] != "pending" {
				l.record("unexpected", func() { l.unexpected = append(l.unexpected, fmt.Sprintf("200 %v", body)) })
				return
			}
			l.record("200", func() {
				l.accepted[id] = user
				l.byUser[user] = append(l.byUser[user], id)
				l.maxLatency = max(l.maxLatency, took)
			})
			return
		case status == 409 && code == "sold_out":
			l.record(code, nil)
			return
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

// database is a direct look into the database of a test, with
// database/sql, to check what the API says.
type database struct {
	db *sql.DB
	pg bool
}

// openDatabase opens the mysql:// or postgres:// URL that serve is given.
func openDatabase(t *testing.T, raw string) *database {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	d := &database{pg: u.Scheme != "mysql"}
	if d.pg {
		d.db, err = sql.Open("pgx", raw)
	} else {
		cfg := mysqldriver.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		d.db, err = sql.Open("mysql", cfg.FormatDSN())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.db.Close() })
	return d
}

// query runs a query written with ? placeholders.
func (d *database) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if d.pg {
		var b strings.Builder
		n := 0
		for _, r := range q {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		q = b.String()
	}
	return d.db.QueryContext(ctx, q, args...)
}

// pairs returns the two columns of a query's rows.
func (d *database) pairs(ctx context.Context, q string, args ...any) (map[int64]int64, error) {
	rows, err := d.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			return nil, err
		}
		out[a] = b
	}
	return out, rows.Err()
}

// orders returns the voucher's created and failed orders: order id → buyer.
func (d *database) orders(ctx context.Context, voucher int64) (created, failed map[int64]int64, err error) {
	if created, err = d.pairs(ctx, "SELECT id, user_id FROM orders WHERE voucher_id = ?", voucher); err != nil {
		return nil, nil, err
	}
	if failed, err = d.pairs(ctx, "SELECT id, user_id FROM failed_orders WHERE voucher_id = ?", voucher); err != nil {
		return nil, nil, err
	}
	return created, failed, nil
}

// doubleBuyers returns the buyers with more than one order of the voucher,
// and how many they have.
func (d *database) doubleBuyers(ctx context.Context, voucher int64) (map[int64]int64, error) {
	return d.pairs(ctx, "SELECT user_id, COUNT(*) FROM orders WHERE voucher_id = ? GROUP BY user_id HAVING COUNT(*) > 1", voucher)
}

// stock returns the voucher's stock and initial stock in the database.
func (d *database) stock(ctx context.Context, voucher int64) (stock, initial int64, err error) {
	rows, err := d.query(ctx, "SELECT stock, initial_stock FROM vouchers WHERE id = ?", voucher)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	if !rows.Next() {
		return 0, 0, fmt.Errorf("voucher %d not in the database: %v", voucher, rows.Err())
	}
	err = rows.Scan(&stock, &initial)
	return stock, initial, err
}

// redisView is a direct look into a voucher's keys in Redis.
type redisView struct {
	c      rueidis.Client
	prefix string
}

func openRedisView(t *testing.T, raw, prefix string) *redisView {
	t.Helper()
	opt, err := rueidis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to Redis: %v", err)
	}
	t.Cleanup(c.Close)
	return &redisView{c: c, prefix: prefix}
}

// key is the voucher's key of the name, as package redis builds it.
func (r *redisView) key(voucher int64, name string) string {
	return fmt.Sprintf("%s:{v%d}:%s", r.prefix, voucher, name)
}

// streamState is what a voucher's order stream holds.
type streamState struct {
	entries     map[string]int64 // entry id → order id
	pending     int64            // delivered, not acknowledged
	undelivered int64            // not read by the group yet
	consumers   map[string]int64 // consumer → its pending count
	noGroup     bool             // the stream or its group is gone
}

func (r *redisView) stream(ctx context.Context, voucher int64) (*streamState, error) {
	k := r.key(voucher, "orders")
	st := &streamState{entries: map[string]int64{}, consumers: map[string]int64{}}
	xr, err := r.c.Do(ctx, r.c.B().Xrange().Key(k).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", k, err)
	}
	for _, e := range xr {
		st.entries[e.ID], _ = strconv.ParseInt(e.FieldValues["id"], 10, 64)
	}
	groups, err := r.c.Do(ctx, r.c.B().XinfoGroups().Key(k).Build()).ToArray()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			st.noGroup = true
			return st, nil
		}
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", k, err)
	}
	last := ""
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg, lastMsg := m["name"], m["last-delivered-id"]
		if name, _ := nameMsg.ToString(); name == redis.Group {
			last, _ = lastMsg.ToString()
		}
	}
	if last == "" {
		st.noGroup = true
		return st, nil
	}
	for id := range st.entries {
		if compareEntryIDs(id, last) > 0 {
			st.undelivered++
		}
	}
	summary, err := r.c.Do(ctx, r.c.B().Xpending().Key(k).Group(redis.Group).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", k, err)
	}
	st.pending, _ = summary[0].AsInt64()
	if len(summary) > 3 {
		cs, _ := summary[3].ToArray()
		for _, c := range cs {
			pair, _ := c.ToArray()
			if len(pair) == 2 {
				name, _ := pair[0].ToString()
				n, _ := pair[1].AsInt64()
				if n == 0 {
					s, _ := pair[1].ToString()
					n, _ = strconv.ParseInt(s, 10, 64)
				}
				st.consumers[name] = n
			}
		}
	}
	return st, nil
}

// consumerNames returns the names of the consumers in the voucher's group.
func (r *redisView) consumerNames(ctx context.Context, voucher int64) ([]string, error) {
	cs, err := r.c.Do(ctx, r.c.B().XinfoConsumers().Key(r.key(voucher, "orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range cs {
		m, err := c.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg := m["name"]
		name, _ := nameMsg.ToString()
		names = append(names, name)
	}
	return names, nil
}

// pendingOf returns the order ids of the entries the consumer holds
// unacknowledged.
func (r *redisView) pendingOf(ctx context.Context, voucher int64, consumer string) ([]int64, error) {
	k := r.key(voucher, "orders")
	res, err := r.c.Do(ctx, r.c.B().Xpending().Key(k).Group(redis.Group).Start("-").End("+").Count(100000).Consumer(consumer).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	st, err := r.stream(ctx, voucher)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, p := range res {
		f, err := p.ToArray()
		if err != nil || len(f) < 1 {
			return nil, fmt.Errorf("XPENDING entry %v: %v", p, err)
		}
		entry, _ := f[0].ToString()
		ids = append(ids, st.entries[entry])
	}
	return ids, nil
}

// remaining returns the voucher's stock left in Redis, and whether it has
// one.
func (r *redisView) remaining(ctx context.Context, voucher int64) (int64, bool, error) {
	n, err := r.c.Do(ctx, r.c.B().Get().Key(r.key(voucher, "stock")).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// deadLetters returns the length of the voucher's dead-letter stream.
func (r *redisView) deadLetters(ctx context.Context, voucher int64) (int64, error) {
	return r.c.Do(ctx, r.c.B().Xlen().Key(r.key(voucher, "dlq")).Build()).AsInt64()
}

// compareEntryIDs orders two stream entry ids "ms-seq".
func compareEntryIDs(a, b string) int {
	parse := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		s, _ := strconv.ParseUint(seq, 10, 64)
		return m, s
	}
	am, as := parse(a)
	bm, bs := parse(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

// waitDrained waits until every order of must is in the database (created
// or failed) and the voucher's stream holds nothing pending or undelivered,
// and returns how long that took.
func waitDrained(t *testing.T, db *database, rv *redisView, voucher int64, must map[int64]int64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	ctx := context.Background()
	var why string
	for {
		created, failed, err := db.orders(ctx, voucher)
		st, serr := rv.stream(ctx, voucher)
		switch {
		case err != nil:
			why = fmt.Sprintf("database: %v", err)
		case serr != nil:
			why = fmt.Sprintf("redis: %v", serr)
		default:
			missing := 0
			for id := range must {
				if _, ok := created[id]; !ok {
					if _, ok := failed[id]; !ok {
						missing++
					}
				}
			}
			why = fmt.Sprintf("%d orders not in the database; stream: %d pending %v, %d undelivered, group lost %v",
				missing, st.pending, st.consumers, st.undelivered, st.noGroup)
			if missing == 0 && st.pending == 0 && st.undelivered == 0 && !st.noGroup {
				return time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained within %v: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// saleState is a voucher's state read straight from the database and Redis.
type saleState struct {
	stock, initial  int64
	created, failed map[int64]int64
	remaining       int64
	loaded          bool
	pending         int64 // stream entries whose order the database lacks
	deadLetters     int64
}

func readSale(t *testing.T, db *database, rv *redisView, voucher int64) *saleState {
	t.Helper()
	ctx := context.Background()
	s := &saleState{}
	var err error
	if s.remaining, s.loaded, err = rv.remaining(ctx, voucher); err != nil {
		t.Fatalf("read remaining stock: %v", err)
	}
	st, err := rv.stream(ctx, voucher)
	if err != nil {
		t.Fatal(err)
	}
	if s.deadLetters, err = rv.deadLetters(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	if s.created, s.failed, err = db.orders(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	if s.stock, s.initial, err = db.stock(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, id := range st.entries {
		_, c := s.created[id]
		_, f := s.failed[id]
		if !c && !f && !seen[id] {
			s.pending++
		}
		seen[id] = true
	}
	return s
}

// checkDatabase checks G1 and G2 in the database: orders ≤ stock, stock
// never negative and equal to initial less orders, one order per buyer.
func checkDatabase(t *testing.T, db *database, s *saleState, voucher int64) {
	t.Helper()
	orders := int64(len(s.created))
	if orders > s.initial {
		t.Errorf("G1: the database holds %d orders of a stock of %d", orders, s.initial)
	}
	if s.stock < 0 || s.stock != s.initial-orders {
		t.Errorf("G1: the database's stock is %d with %d orders of an initial %d", s.stock, orders, s.initial)
	}
	doubles, err := db.doubleBuyers(context.Background(), voucher)
	if err != nil {
		t.Fatal(err)
	}
	if len(doubles) > 0 {
		t.Errorf("G2: buyers with more than one order in the database (buyer → orders): %v", doubles)
	}
	for id := range s.created {
		if _, ok := s.failed[id]; ok {
			t.Errorf("order %d is both created and failed in the database", id)
		}
	}
}

// checkAgreement checks G6: remaining (Redis) + orders (database) + pending
// == initial stock, and that `seckill reconcile` agrees (exit 0).
func checkAgreement(t *testing.T, env environ, s *saleState) {
	t.Helper()
	if !s.loaded {
		t.Errorf("G6: the voucher has no stock in Redis")
	}
	if sum := s.remaining + int64(len(s.created)) + s.pending; sum != s.initial {
		t.Errorf("G6: remaining %d + orders %d + pending %d = %d, want the initial stock %d (drift %d)",
			s.remaining, len(s.created), s.pending, sum, s.initial, s.initial-sum)
	}
	code, out := execReconcile(t, env)
	if code != 0 {
		t.Errorf("seckill reconcile exited %d, want 0:\n%s", code, out)
	} else {
		t.Logf("seckill reconcile:\n%s", out)
	}
}

// waitFor polls cond every 100ms until it holds, for up to timeout; cond
// also says what it saw, for the failure message.
func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, saw)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// merge returns the orders of both maps.
func merge(a, b map[int64]int64) map[int64]int64 {
	out := make(map[int64]int64, len(a)+len(b))
	for id, u := range a {
		out[id] = u
	}
	for id, u := range b {
		out[id] = u
	}
	return out
}

// checkNothingLost checks, after the drain, that every order answered 200
// or named by a duplicate_order answer is created, through the API (G3);
// no buyer got two orders (G2, G5); the database holds no more than the
// stock, one order per buyer (G1, G2), nothing failed or dead-lettered; and
// Redis and the database agree (G6).
func checkNothingLost(t *testing.T, l *load, base string, db *database, rv *redisView, env environ) *saleState {
	t.Helper()
	l.checkAnswers(t)
	l.checkOnePerBuyer(t)
	accepted, dups := l.orders()
	all := merge(accepted, dups)
	statuses := l.statuses(t, base, all)
	notCreated := 0
	for id, u := range all {
		if statuses[id] != "created" {
			if notCreated++; notCreated <= 10 {
				how := "200"
				if _, ok := accepted[id]; !ok {
					how = "duplicate_order"
				}
				t.Errorf("G3: order %d of buyer %d, answered %s, is %q after the drain", id, u, how, statuses[id])
			}
		}
	}
	if notCreated > 0 {
		t.Errorf("G3: %d of %d orders answered are not created after the drain", notCreated, len(all))
	}
	s := readSale(t, db, rv, l.voucher)
	for id := range all {
		if _, ok := s.created[id]; !ok {
			t.Errorf("G3: order %d, answered, is not in the database's orders", id)
			break
		}
	}
	checkDatabase(t, db, s, l.voucher)
	if len(s.failed) > 0 || s.deadLetters > 0 {
		t.Errorf("%d failed orders in the database, %d dead letters in Redis; want none", len(s.failed), s.deadLetters)
	}
	checkAgreement(t, env, s)
	t.Logf("answers: %v; %d orders answered 200, %d named by duplicate_order only; database: %d orders, stock %d/%d; Redis remaining %d",
		l.stats(), len(accepted), len(all)-len(accepted), len(s.created), s.stock, s.initial, s.remaining)
	return s
}
