package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

const testSecret = "e2e-secret-0123456789abcdef0123456789"

// environ is a fake process environment.
type environ map[string]string

func (e environ) get(name string) string { return e[name] }

// lines is an io.Writer that keeps what is written and lets a test wait
// for a line matching a pattern: the signal that the program got there.
type lines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	waiters []waiter
}

type waiter struct {
	re *regexp.Regexp
	ch chan []string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.match()
	return len(p), nil
}

func (l *lines) match() {
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if m := w.re.FindStringSubmatch(l.buf.String()); m != nil {
			w.ch <- m
			continue
		}
		kept = append(kept, w)
	}
	l.waiters = kept
}

// wait returns the submatches of the first match of pattern, waiting up to
// 30s for it to be written.
func (l *lines) wait(t *testing.T, pattern string) []string {
	t.Helper()
	w := waiter{re: regexp.MustCompile(pattern), ch: make(chan []string, 1)}
	l.mu.Lock()
	l.waiters = append(l.waiters, w)
	l.match()
	l.mu.Unlock()
	select {
	case m := <-w.ch:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing matched %q within 30s; output so far:\n%s", pattern, l.String())
		return nil
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// process is `seckill serve` running in the test's process.
type process struct {
	stdout, stderr *lines
	cancel         context.CancelFunc
	exit           chan int
}

func start(t *testing.T, env environ, args ...string) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{stdout: &lines{}, stderr: &lines{}, cancel: cancel, exit: make(chan int, 1)}
	go func() { p.exit <- run(ctx, args, env.get, p.stdout, p.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.exit:
		case <-time.After(30 * time.Second):
			t.Error("seckill did not stop within 30s of its context ending")
		}
	})
	return p
}

// stop ends the process as SIGTERM would and returns its exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	p.cancel()
	select {
	case code := <-p.exit:
		p.exit <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("seckill did not stop within 30s")
		return -1
	}
}

// runCmd runs a command to its end and returns its exit code and output.
func runCmd(env environ, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, env.get, &out, &errOut)
	return code, out.String(), errOut.String()
}

// call sends a JSON request and decodes the JSON answer.
func call(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
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
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer %q is not a JSON object", method, url, raw)
	}
	return res.StatusCode, out
}

// createAndRead creates a voucher as admin and reads it back, as the
// README's walk-through does with curl.
func createAndRead(t *testing.T, base, adminToken string) string {
	t.Helper()
	now := time.Now().UTC()
	body := fmt.Sprintf(`{"title":"e2e","stock":7,"beginTime":"%s","endTime":"%s"}`,
		now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	status, created := call(t, "POST", base+"/api/admin/vouchers", adminToken, body)
	if status != 201 {
		t.Fatalf("create voucher = %d %v", status, created)
	}
	id := created["id"].(string)
	status, got := call(t, "GET", base+"/api/vouchers/"+id, "", "")
	if status != 200 || got["title"] != "e2e" || got["stock"] != float64(7) || got["remaining"] != float64(7) {
		t.Fatalf("read back voucher %s = %d %v", id, status, got)
	}
	return id
}

func TestServeEmbedded(t *testing.T) {
	dir := t.TempDir()
	p := start(t, environ{}, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	base := p.stdout.wait(t, `Listening on (http://\S+)`)[1]
	token := p.stdout.wait(t, `export TOKEN=(\S+)`)[1]
	banner := p.stdout.String()
	for _, want := range []string{"EMBEDDED DEFAULT", "not for production", filepath.Join(dir, "seckill.db")} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	id := createAndRead(t, base, token)

	// A second serve on the same directory would sell the stock again from
	// a Redis of its own: it is refused, and the first one's Redis address
	// stays for the tools.
	addr, err := os.ReadFile(filepath.Join(dir, embeddedAddrFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // else serving until then
	defer cancel()
	var second bytes.Buffer
	code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, environ{}.get, io.Discard, &second)
	if code == 0 || !strings.Contains(second.String(), "another seckill serve") {
		t.Errorf("a second serve on %s = %d, want refused as another serve's:\n%s", dir, code, second.String())
	}
	if again, err := os.ReadFile(filepath.Join(dir, embeddedAddrFile)); err != nil || string(again) != string(addr) {
		t.Errorf("the first serve's Redis address after the second was refused: %q, %v; want %q", again, err, addr)
	}

	// The banner's token is an admin's, signed with the secret kept in the
	// data directory, which `seckill token` uses too.
	code, out, errOut := runCmd(environ{}, "token", "--data-dir", dir, "--user", "5")
	if code != 0 {
		t.Fatalf("seckill token = %d: %s", code, errOut)
	}
	status, _ := call(t, "POST", base+"/api/admin/vouchers", strings.TrimSpace(out), `{}`)
	if status != 403 {
		t.Errorf("a non-admin token from `seckill token` got %d on an admin route, want 403", status)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d after shutdown:\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "seckill stopped") {
		t.Errorf("no clean stop in the log:\n%s", p.stderr.String())
	}

	// Start again: the embedded Redis starts empty, the voucher has no
	// orders, so its stock is loaded again from the database.
	p = start(t, environ{}, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	base = p.stdout.wait(t, `Listening on (http://\S+)`)[1]
	status, got := call(t, "GET", base+"/api/vouchers/"+id, "", "")
	if status != 200 || got["remaining"] != float64(7) {
		t.Fatalf("after a restart, voucher %s = %d %v; want remaining 7", id, status, got)
	}
	// The secret survived the restart: the first token still works.
	if status, _ := call(t, "POST", base+"/api/admin/vouchers", token, `{}`); status != 400 {
		t.Errorf("the first run's admin token got %d after a restart, want 400 (accepted, empty body refused)", status)
	}
}

func TestServeRealServices(t *testing.T) {
	for name, dbURL := range map[string]func(testing.TB) string{
		"mariadb":    testenv.MySQLURL,
		"postgresql": testenv.PostgresURL,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := environ{
				"SECKILL_REDIS_URL":    testenv.RedisURL(t),
				"SECKILL_REDIS_PREFIX": testenv.RedisPrefix(t),
				"SECKILL_DB_URL":       dbURL(t),
				"SECKILL_JWT_SECRET":   testSecret,
				"SECKILL_ADDR":         "127.0.0.1:0",
			}
			p := start(t, env, "serve")
			base := p.stderr.wait(t, `"msg":"seckill listening","url":"(http://[^"]+)"`)[1]
			if out := p.stdout.String(); out != "" {
				t.Errorf("serve on real services wrote a banner to stdout:\n%s", out)
			}
			// The start line says which Redis it runs on.
			if !strings.Contains(p.stderr.String(), `"redis":"single: 1 master (127.0.0.1:6379), `) {
				t.Errorf("the start line does not describe the Redis:\n%s", p.stderr.String())
			}
			code, out, errOut := runCmd(env, "token", "--user", "1", "--admin", "--token-ttl", "10m")
			if code != 0 {
				t.Fatalf("seckill token = %d: %s", code, errOut)
			}
			createAndRead(t, base, strings.TrimSpace(out))
			// The fake payments, the default, are said to be fake here.
			if !strings.Contains(p.stderr.String(), `"msg":"payments are fake:`) {
				t.Errorf("serve on real services with the fake payment provider did not warn:\n%s", p.stderr.String())
			}
			if status, body := call(t, "GET", base+"/readyz", "", ""); status != 200 {
				t.Errorf("/readyz = %d %v", status, body)
			}
			if code := p.stop(t); code != 0 {
				t.Fatalf("serve exited %d:\n%s", code, p.stderr.String())
			}
			// migrate on an up-to-date database is a no-op that says so.
			code, out, errOut = runCmd(env, "migrate")
			if code != 0 || !strings.Contains(out, "up to date") {
				t.Errorf("seckill migrate = %d %q %q", code, out, errOut)
			}
			if strings.Contains(out, "@") && strings.Contains(out, ":"+"secret") {
				t.Errorf("migrate printed a password: %q", out)
			}
		})
	}
}

// TestServeMetricsAddr: with SECKILL_METRICS_ADDR and
// SECKILL_METRICS_TOKEN, /metrics is served on its own address, to the
// token's bearer only, and the public address answers it 404.
func TestServeMetricsAddr(t *testing.T) {
	t.Parallel()
	env := environ{
		"SECKILL_REDIS_URL":     testenv.RedisURL(t),
		"SECKILL_REDIS_PREFIX":  testenv.RedisPrefix(t),
		"SECKILL_DB_URL":        testenv.MySQLURL(t),
		"SECKILL_JWT_SECRET":    testSecret,
		"SECKILL_ADDR":          "127.0.0.1:0",
		"SECKILL_METRICS_ADDR":  "127.0.0.1:0",
		"SECKILL_METRICS_TOKEN": "scrape-secret",
	}
	p := start(t, env, "serve")
	m := p.stderr.wait(t, `"msg":"seckill listening","url":"(http://[^"]+)".*"metrics":"(http://[^"]+)","metrics_token":true`)
	base, metrics := m[1], m[2]
	if metrics == base+"/metrics" {
		t.Fatalf("the start line names %s for the metrics, on the public address", metrics)
	}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
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
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if status, _ := get(base+"/metrics", "scrape-secret"); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the public address = %d, want 404", status)
	}
	if status, _ := get(metrics, ""); status != http.StatusUnauthorized {
		t.Errorf("GET %s without the token = %d, want 401", metrics, status)
	}
	if status, body := get(metrics, "scrape-secret"); status != http.StatusOK || !strings.Contains(body, "seckill_stats_up 1") {
		t.Errorf("GET %s with the token = %d, want 200 with seckill_stats_up 1:\n%.300s", metrics, status, body)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, p.stderr.String())
	}
}

func TestServeRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		env  environ
		args []string
		want string
	}{
		"redis without db":    {environ{"SECKILL_REDIS_URL": "redis://127.0.0.1:1"}, nil, "SECKILL_DB_URL is not"},
		"db without redis":    {environ{"SECKILL_DB_URL": "sqlite://x.db"}, nil, "SECKILL_REDIS_URL is not"},
		"no secret":           {environ{"SECKILL_REDIS_URL": "redis://127.0.0.1:1", "SECKILL_DB_URL": "sqlite://x.db"}, nil, "SECKILL_JWT_SECRET is required"},
		"short secret":        {environ{"SECKILL_JWT_SECRET": "short"}, nil, "at least 32"},
		"unknown mode":        {environ{}, []string{"--mode", "fast"}, "--mode"},
		"wait in queue mode":  {environ{}, []string{"--mode", "queue", "--redis-wait-replicas", "1"}, "needs --mode stream"},
		"bad log level":       {environ{"SECKILL_LOG_LEVEL": "loud"}, nil, "--log-level"},
		"unknown currency":    {environ{"SECKILL_CURRENCY": "XBT"}, nil, "--currency: must be an ISO 4217 code"},
		"lower-case currency": {environ{}, []string{"--currency", "usd"}, "--currency"},
		"bad duration env":    {environ{"SECKILL_SHUTDOWN_TIMEOUT": "soon"}, nil, "SECKILL_SHUTDOWN_TIMEOUT"},
		"unknown db scheme":   {environ{"SECKILL_REDIS_URL": "redis://127.0.0.1:1", "SECKILL_DB_URL": "oracle://u:hunter2@x/db", "SECKILL_JWT_SECRET": testSecret}, nil, "unknown scheme"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, tc.args...)
			code, _, errOut := runCmd(tc.env, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and a message with %q", code, errOut, tc.want)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("the error shows a password: %q", errOut)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	if code, _, errOut := runCmd(environ{}); code != 2 || !strings.Contains(errOut, "serve") {
		t.Errorf("no command: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCmd(environ{}, "fly"); code != 2 || errOut != "seckill: unknown command \"fly\"\nrun 'seckill --help' for usage\n" {
		t.Errorf("unknown command: exit %d, %q; want 2 and two lines", code, errOut)
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		if code, out, _ := runCmd(environ{}, args...); code != 0 || !strings.Contains(out, "sms-sink") || !strings.Contains(out, "completion") {
			t.Errorf("%q: exit %d; want the commands on stdout:\n%s", args, code, out)
		}
	}
}

func TestToken(t *testing.T) {
	code, out, errOut := runCmd(environ{"SECKILL_JWT_SECRET": testSecret}, "token", "--user", "42", "--admin", "--token-ttl", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	tokens, err := auth.NewTokens([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	id, err := tokens.Verify(strings.TrimSpace(out))
	if err != nil || id != (auth.Identity{UserID: 42, Admin: true}) {
		t.Fatalf("token verifies as %+v, %v; want admin 42", id, err)
	}
	tokens.Now = func() time.Time { return time.Now().Add(61 * time.Minute) }
	if _, err := tokens.Verify(strings.TrimSpace(out)); err == nil {
		t.Error("a --token-ttl 1h token still verifies 61 minutes later")
	}
	if code, _, _ := runCmd(environ{"SECKILL_JWT_SECRET": testSecret}, "token"); code != 2 {
		t.Errorf("token without --user: exit %d, want 2", code)
	}
}

// TestSIGTERM builds the real binary, starts it, and stops it with SIGTERM:
// it must finish and exit 0.
func TestSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(seckillBinary(t), "serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "SECKILL_REDIS_URL=", "SECKILL_DB_URL=", "SECKILL_JWT_SECRET=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lines
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var base string
	for sc.Scan() {
		if _, url, ok := strings.Cut(sc.Text(), "Listening on "); ok {
			base = url
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if base == "" {
		t.Fatalf("no Listening line; stderr:\n%s", stderr.String())
	}
	if status, _ := call(t, "GET", base+"/healthz", "", ""); status != 200 {
		t.Fatalf("/healthz = %d", status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "seckill stopped") {
		t.Errorf("no clean stop in the log:\n%s", stderr.String())
	}
}
