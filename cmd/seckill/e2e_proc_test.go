package main

// The processes of the end-to-end tests, which run the real seckill binary
// against this machine's Redis, MariaDB and PostgreSQL: the binary built
// once per run, serve and reconcile runs, and redis-servers the tests kill
// and restart.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/seckill/seckill/internal/testenv"
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

// execReconcile runs `seckill reconcile` with env and args and returns its
// exit code and what it printed.
func execReconcile(t *testing.T, env environ, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, seckillBinary(t), append([]string{"reconcile"}, args...)...)
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

// redisServer is a redis-server of the test's own, as faults.StartRedis
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

// waitFor is testenv.WaitFor for a condition that also says what it saw:
// each new state it saw while waiting is logged, for the failure.
func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	testenv.WaitFor(t, timeout, "the condition (its states are logged above)", func() bool {
		ok, saw := cond()
		if !ok && saw != last {
			t.Logf("waiting: %s", saw)
			last = saw
		}
		return ok
	})
}
