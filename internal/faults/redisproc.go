package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/testenv"
)

// StartRedis starts a redis-server of the test's own on a free loopback
// port, with the extra configuration args (e.g. "--maxmemory-policy",
// "allkeys-lru"), and stops it by PID when the test ends. It returns the
// server's redis:// URL and a func that kills the server (with SIGKILL,
// and waits for it to exit); calling it again does nothing. Use it for
// tests that change the server's configuration or stop it; the shared
// server serves the rest. It is StartRedisProc for those that need no more
// than a URL and a kill.
func StartRedis(t testing.TB, args ...string) (url string, kill func()) {
	t.Helper()
	p := StartRedisProc(t, args...)
	return "redis://" + p.Addr + "/0", p.Kill
}

// RedisProc is a redis-server process of the tests' own, on a loopback
// port: tests kill, pause and restart it to see what the code under test
// does when a node fails. It dies with the test binary even when that
// dies without its cleanups (Pdeathsig).
//
// It runs without a goroutine of ours: its output goes to a file in Dir and
// it is reaped when killed, so a shared process that outlives every test does
// not show up as a leaked goroutine in a package's goleak check.
type RedisProc struct {
	// Addr is where it listens, 127.0.0.1:Port.
	Addr string
	// Port is its port; Port+10000 was free too when it started, for
	// the cluster bus.
	Port int
	// Dir is its working directory (--dir): its log, redis.log, its
	// cluster or sentinel configuration.
	Dir string

	bin   string   // the binary to run: redis-server or redis-sentinel
	head  []string // arguments that must come first: a config file, --sentinel
	args  []string // the caller's extra arguments, after ours
	ready string   // the log line that says it serves

	mu     sync.Mutex
	cmd    *exec.Cmd
	killed bool
	paused bool
}

// ReplyError is an error reply of Redis (-ERR ...), as RedisProc.Do
// returns it, so that a test tells it from a connection failure.
type ReplyError string

// Error returns the reply as Redis sent it, "ERR ..." or "MOVED ...".
func (e ReplyError) Error() string { return string(e) }

// readyLine is what redis-server logs once it accepts connections.
const readyLine = "Ready to accept connections"

// startTimeout bounds the wait for a process's ready line: a start takes
// well under a second, but the machine may be loaded.
const startTimeout = 30 * time.Second

// StartRedisProc starts a redis-server on a free loopback port, in a
// directory of the test's own, and kills it when the test ends. args are
// configuration for it ("--maxmemory", "10mb"), after the defaults --save ""
// and --appendonly no, so they may override them; a first argument that
// does not start with "-" is a config file, which redis-server must see
// first. Do not pass --logfile, --port, --dir or --daemonize: the process is
// watched through its output. Without redis-server the test is skipped (or
// fails in CI).
func StartRedisProc(t testing.TB, args ...string) *RedisProc {
	t.Helper()
	bin := lookRedis(t, "redis-server")
	sp := newSpawner(t)
	dir, err := sp.dir()
	if err != nil {
		t.Fatal(err)
	}
	head, rest := splitConf(args)
	p, err := sp.start(bin, dir, head, readyLine, rest)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lookRedis finds a Redis binary, skipping the test (failing it in CI)
// when it is missing, as require does for the services.
func lookRedis(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		msg := name + " is not installed (apt-get install redis-server): " + err.Error()
		if testenv.CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// splitConf separates a leading config file from the options.
func splitConf(args []string) (head, rest []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[:1], args[1:]
	}
	return nil, args
}

// PID returns the process ID of the running server, 0 once it is killed.
func (p *RedisProc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed || p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it
// to exit, so that its port is free when Kill returns. Calling it again
// does nothing.
func (p *RedisProc) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kill()
}

func (p *RedisProc) kill() {
	if p.killed || p.cmd == nil {
		return
	}
	p.cmd.Process.Kill() // a stopped process dies of SIGKILL as well
	p.cmd.Wait()
	p.killed, p.paused = true, false
}

// Pause stops the server with SIGSTOP: it keeps its connections but
// answers nothing, as a node that hangs or is cut off does.
func (p *RedisProc) Pause() { p.signal(syscall.SIGSTOP, true) }

// Resume lets a paused server run again (SIGCONT).
func (p *RedisProc) Resume() { p.signal(syscall.SIGCONT, false) }

func (p *RedisProc) signal(sig syscall.Signal, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed || p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	p.paused = paused
}

// live reports whether the server runs and is not paused: the helpers ask
// only such nodes, since a paused one would hold them up to their timeout.
func (p *RedisProc) live() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.killed && !p.paused
}

// Restart starts the server again on the same port, in the same directory
// and with the same arguments, as a node that comes back after a crash;
// it kills it first if it still runs. A cluster node keeps its identity
// (its nodes.conf is in Dir) but, without persistence, not its data.
func (p *RedisProc) Restart(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kill()
	if err := p.launch(); err != nil {
		t.Fatalf("restart redis-server on %s: %v", p.Addr, err)
	}
}

// Do runs one command on this server alone, on a connection of its own
// that it closes after, and returns the reply: a string (simple or bulk),
// an int64, nil, or a []any of those. An error reply is a ReplyError. It
// does not follow cluster redirections: a test asks this node, not the
// cluster.
func (p *RedisProc) Do(ctx context.Context, args ...string) (any, error) {
	r, err := p.DoMulti(ctx, args)
	if len(r) == 0 {
		return nil, err
	}
	return r[0], err
}

// DoMulti runs the commands in order on one connection, for those that
// depend on the connection: WAIT counts the replicas that have the writes
// made on its own connection. It returns every reply it read; a command's
// error reply is its element, and the first one is also the error.
func (p *RedisProc) DoMulti(ctx context.Context, cmds ...[]string) ([]any, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// A cancelled context without a deadline ends the exchange too.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	w := bufio.NewWriter(conn)
	for _, args := range cmds {
		fmt.Fprintf(w, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	rd := bufio.NewReader(conn)
	replies := make([]any, 0, len(cmds))
	var first error
	for range cmds {
		v, err := readReply(rd)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return replies, err
		}
		if e, ok := v.(ReplyError); ok && first == nil {
			first = e
		}
		replies = append(replies, v)
	}
	return replies, first
}

// readReply reads one RESP2 reply: the protocol of a new connection.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("resp: bad line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return ReplyError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("resp: bad length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		if kind == '$' {
			b := make([]byte, n+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, err
			}
			return string(b[:n]), nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("resp: unknown reply %q", line)
}

// doShort runs a command with a short timeout: the helpers' way of asking
// a node that may be down or paused.
func (p *RedisProc) doShort(args ...string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return p.Do(ctx, args...)
}

// str runs a command as doShort does, for a reply that is a string.
func (p *RedisProc) str(args ...string) (string, error) {
	v, err := p.doShort(args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v is not a string", args[0], v)
	}
	return s, nil
}

// Info returns the server's INFO section ("replication", "cluster"), ""
// when it does not answer within a second.
func (p *RedisProc) Info(section string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, _ := p.Do(ctx, "INFO", section)
	s, _ := v.(string)
	return s
}

// Role returns "master" or "slave", as INFO replication says, "" when the
// server does not answer.
func (p *RedisProc) Role() string { return infoField(p.Info("replication"), "role") }

// infoField returns the value of one "name:value" line of INFO output.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ports holds every port this test process has given a server, so that
// a killed node's port, which its Restart will need, is not given to
// another.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// freePort picks a port at random from 12000-21999 whose cluster bus port
// (+10000) is free too. The range is below the kernel's ephemeral ports
// (32768 and up), so that outgoing connections do not take them, and
// random, so that test processes started together rarely collide; the
// caller still retries when the server cannot bind.
func freePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	for range 200 {
		port := 12000 + rand.IntN(10000)
		if ports.used[port] || !canListen(port) || !canListen(port+10000) {
			continue
		}
		if ports.used == nil {
			ports.used = map[int]bool{}
		}
		ports.used[port] = true
		return port, nil
	}
	return 0, errors.New("no free port pair in 12000-21999")
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// errAddrInUse is a start that failed because another process took the
// port between freePort and the server's bind.
var errAddrInUse = errors.New("address already in use")

// listen starts the server on a free port, and on another when the port
// was taken meanwhile.
func (p *RedisProc) listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 10 {
		port, err := freePort()
		if err != nil {
			return err
		}
		p.Port, p.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = p.launch(); !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return errors.New("redis-server: every port tried was taken")
}

// launch runs the server on p.Port and waits for its ready line in its
// log. p.mu is held.
func (p *RedisProc) launch() error {
	logPath := filepath.Join(p.Dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	from, err := log.Seek(0, io.SeekEnd) // a restart appends; read what it adds
	if err != nil {
		log.Close()
		return err
	}
	argv := append(slices.Clip(p.head), "--bind", "127.0.0.1", "--port", strconv.Itoa(p.Port), "--dir", p.Dir,
		"--daemonize", "no", "--save", "", "--appendonly", "no")
	argv = append(argv, p.args...)
	cmd := exec.Command(p.bin, argv...)
	cmd.Dir = p.Dir
	// An *os.File as output needs no copying goroutine.
	cmd.Stdout, cmd.Stderr = log, log
	// Should the test binary die without its cleanups (a panic, a
	// timeout, SIGKILL), the kernel kills the server too. (Strictly, when
	// the thread that started it ends: Go keeps its threads, unless a
	// goroutine locked to one exits, which tests do not do.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	log.Close()
	if err != nil {
		return err
	}
	p.cmd, p.killed, p.paused = cmd, false, false
	out := func() string {
		b, _ := os.ReadFile(logPath)
		if int64(len(b)) >= from {
			b = b[from:]
		}
		return string(b)
	}
	err = poll(startTimeout, func() error {
		if exited(cmd.Process.Pid) {
			return errExited
		}
		if !strings.Contains(out(), p.ready) {
			return errors.New("no ready line yet")
		}
		// A sentinel logs +monitor while it reads its configuration,
		// before it binds its port (and exits if the port is taken):
		// ready is also answering there.
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	if err == nil {
		return nil
	}
	p.kill()
	o := out()
	if strings.Contains(o, "Address already in use") {
		return errAddrInUse
	}
	if errors.Is(err, errExited) {
		return fmt.Errorf("%s on port %d exited at start:\n%s", filepath.Base(p.bin), p.Port, o)
	}
	return fmt.Errorf("%s on port %d did not log %q within %v:\n%s", filepath.Base(p.bin), p.Port, p.ready, startTimeout, o)
}

var errExited = errors.New("exited")

// exited reports whether the process has ended (a zombie not yet reaped),
// without reaping it: cmd.Wait does that, in kill.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// poll calls cond until it returns nil, as WaitFor does, and returns an
// error naming its last complaint after timeout: for the starts of shared
// deployments, which must fail every test that uses them rather than the
// one that happened to start them.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	pause := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil || errors.Is(err, errExited) {
			return err // an exited process will not become ready
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// spawner starts the processes of one deployment: for a test, in its temp
// directory and killed at its end; for a shared deployment, in a directory
// of the test process and never killed (the kernel kills them with the test
// binary, and the next test process removes the directory).
type spawner struct {
	t    testing.TB // nil for a shared deployment
	root string

	mu    sync.Mutex
	procs []*RedisProc
}

func newSpawner(t testing.TB) *spawner { return &spawner{t: t, root: t.TempDir()} }

// sharedPrefix names the directories of shared deployments, with the PID
// of the test process that owns them.
const sharedPrefix = "seckill-testenv-"

var sweepOnce sync.Once

func newSharedSpawner() (*spawner, error) {
	sweepOnce.Do(sweepShared)
	root, err := os.MkdirTemp("", sharedPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	return &spawner{root: root}, nil
}

// sweepShared removes the directories of shared deployments whose test
// process has exited: nothing else would.
func sweepShared() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedPrefix+"*"))
	for _, d := range dirs {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), sharedPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

func (s *spawner) dir() (string, error) { return os.MkdirTemp(s.root, "redis-") }

// start starts a process in dir, with head first on its command line and
// args last (see StartRedisProc), and waits until it logs ready. It may run
// on any goroutine: it reports failure as an error.
func (s *spawner) start(bin, dir string, head []string, ready string, args []string) (*RedisProc, error) {
	p := &RedisProc{Dir: dir, bin: bin, head: head, ready: ready, args: args}
	if err := p.listen(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	if s.t != nil {
		s.t.Cleanup(p.Kill)
	}
	return p, nil
}

// startAll starts n processes at once, each in a directory of its own;
// args gives the arguments of the i-th, in its directory.
func (s *spawner) startAll(n int, bin, ready string, args func(i int, dir string) (head, rest []string, err error)) ([]*RedisProc, error) {
	procs := make([]*RedisProc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			dir, err := s.dir()
			if err != nil {
				errs[i] = err
				return
			}
			head, rest, err := args(i, dir)
			if err != nil {
				errs[i] = err
				return
			}
			procs[i], errs[i] = s.start(bin, dir, head, ready, rest)
		})
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// killAll kills what a failed start had started, since a shared
// deployment has no cleanup to do it.
func (s *spawner) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		p.Kill()
	}
}

// lazy holds a shared deployment: started by its first user, and its
// failure, if any, given to every user.
type lazy[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.once.Do(func() {
		l.err = errors.New("the start panicked") // stays if start does not return
		l.v, l.err = start()
	})
	return l.v, l.err
}
