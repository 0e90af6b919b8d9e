package main

// A sale behind a load balancer: three serve instances behind nginx, run
// with the example configuration of deploy/nginx, one of them killed in
// the middle of the sale.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// The sale behind nginx: a stock of 2,000 for 8,000 buyers, 2,000 of whom
// press "buy" a second time.
const (
	lbStock   = 2000
	lbBuyers  = 8000
	lbRepeats = 2000
)

// exampleNginxConf is deploy/nginx/nginx.conf, from this package's
// directory.
const exampleNginxConf = "../../deploy/nginx/nginx.conf"

// TestThreeInstancesBehindNginx runs a sale through nginx, configured as
// deploy/nginx/nginx.conf says, in front of three serve instances that
// share a Redis Cluster and a MariaDB database, and kills one instance
// with SIGKILL in the middle of the sale, never to restart it. The buyers
// talk to nginx only; a 502 or 504 from nginx is no answer to them, and
// they ask again, as a client does.
//
// Whatever nginx did with the buys in flight to the dead instance (a 502,
// or a retry on another instance answered 200 or 409 duplicate_order), the
// sale must end as the guarantees say: every order answered is created
// (G3), no more than the stock is sold and no buyer twice (G1, G2), the
// whole stock is sold, and `seckill reconcile` finds Redis and the
// database agreeing (G6). The test logs nginx's answers by code, what
// happened to the requests in flight to the dead instance, and how long
// the survivors took to reclaim and write the orders it held.
//
// To be sure the killed instance holds orders it read and did not
// persist, its database connection goes through a proxy that is paused
// just before the kill (as in TestReclaimFromKilledInstance).
func TestThreeInstancesBehindNginx(t *testing.T) {
	t.Parallel()
	nginxBin := lookNginx(t)
	cluster := faults.SharedCluster(t)
	// The shared cluster dies with the test binary: the keys under this
	// prefix need no cleanup.
	prefix := "t" + testenv.Random()
	mysqlURL := testenv.MySQLURL(t)
	u, err := url.Parse(mysqlURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faults.StartProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr()

	// The instances believe nginx's X-Forwarded-For, as its README says.
	// Each keeps at most 8 database connections rather than 20: three
	// instances share this machine's MariaDB (151 connections) with the
	// tests that run beside this one, and `seckill reconcile` must still
	// get one at the end.
	lbEnv := func(dbURL string) environ {
		env := serveEnv(cluster.URL, prefix, dbURL)
		env["SECKILL_TRUSTED_PROXIES"] = "127.0.0.1"
		env["SECKILL_DB_MAX_CONNS"] = "8"
		return env
	}
	env := lbEnv(mysqlURL)
	db := openDatabase(t, mysqlURL)
	rv := openRedisView(t, cluster.URL, prefix)

	survivors := []*server{startServe(t, "serve 1", env), startServe(t, "serve 2", env)}
	victim := startServe(t, "serve 3 (killed)", lbEnv(viaProxy.String()))
	instances := []*server{survivors[0], survivors[1], victim}
	var addrs []string
	for _, s := range instances {
		addrs = append(addrs, strings.TrimPrefix(s.url, "http://"))
	}
	victimAddr := addrs[2]
	lb := startNginx(t, nginxBin, addrs)

	codes := &codeCounter{next: newClient(t).Transport}
	client := &http.Client{Transport: codes, Timeout: 15 * time.Second}
	voucher := createVoucher(t, client, lb.url, lbStock)
	var victimName string
	waitFor(t, 20*time.Second, func() (bool, string) {
		names, err := rv.consumerNames(context.Background(), voucher)
		victimName = victim.consumer(names)
		n := 0
		for _, s := range instances {
			if s.consumer(names) != "" {
				n++
			}
		}
		return err == nil && n == len(instances), fmt.Sprintf("consumers %v (%v)", names, err)
	})

	users := buyers(lbBuyers)
	l := newLoad(t, client, voucher, users)
	l.setTargets(lb.url)
	attempts := shuffledAttempts(users, lbRepeats)
	loadStart := time.Now()
	l.start(t, attempts, 16, 0, 75*time.Second)
	l.waitCount(t, "200", lbStock/4, 30*time.Second)

	proxy.Pause()
	waitFor(t, 15*time.Second, func() (bool, string) {
		held, err := rv.pendingOf(context.Background(), voucher, victimName)
		return err == nil && len(held) >= 5, fmt.Sprintf("the instance to kill holds %d orders (%v)", len(held), err)
	})
	atKill := l.stats()
	victim.kill()
	killedAt := time.Now()
	proxy.Down()
	held, err := rv.pendingOf(context.Background(), voucher, victimName)
	if err != nil || len(held) == 0 {
		t.Fatalf("the killed instance held %d orders unacknowledged (%v): nothing to reclaim", len(held), err)
	}
	t.Logf("killed %s (%s) after %v of load, holding %d orders; answers before the kill: %v",
		victim.name, victimAddr, killedAt.Sub(loadStart).Round(time.Millisecond), len(held), atKill)

	// The survivors take the held orders over after the claim lease.
	waitFor(t, 30*time.Second, func() (bool, string) {
		created, _, err := db.orders(context.Background(), voucher)
		n := 0
		for _, id := range held {
			if _, ok := created[id]; ok {
				n++
			}
		}
		return err == nil && n == len(held), fmt.Sprintf("%d of the %d orders the killed instance held are created (%v)", n, len(held), err)
	})
	reclaimed := time.Since(killedAt)

	l.wait()
	loadTook := time.Since(loadStart)
	accepted, dups := l.orders()
	drained := waitDrained(t, db, rv, voucher, merge(accepted, dups), 40*time.Second)
	s := checkNothingLost(t, l, lb.url, db, rv, env)
	if len(s.created) != lbStock || s.remaining != 0 {
		t.Errorf("%d orders created and %d left in Redis of a stock of %d, with %d buyers: want it all sold", len(s.created), s.remaining, lbStock, lbBuyers)
	}
	n := 0
	for _, sv := range survivors {
		n += sv.count(`"msg":"reclaimed order messages`)
	}
	if n == 0 {
		t.Errorf("no survivor's log says it reclaimed order messages")
	}

	t.Logf("the load took %v (%d requests), drained %v after it", loadTook.Round(time.Millisecond), len(attempts), drained.Round(time.Millisecond))
	t.Logf("nginx answered the buys: %v; other requests: %v", codes.buys(), codes.others())
	lb.logVictim(t, victimAddr)
	t.Logf("the survivors reclaimed the %d orders the killed instance held, and wrote them, %v after the kill (claim lease %s; %d reclaims logged)",
		len(held), reclaimed.Round(time.Millisecond), env["SECKILL_CLAIM_LEASE"], n)
}

// lookNginx returns the path of nginx, and skips the test (fails it with
// CI set) when it is not installed.
func lookNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	msg := "nginx is not installed (apt-get install nginx; .ci/run installs it)"
	if testenv.CI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// nginxConf returns the example configuration with its upstream addresses
// and listen line replaced: the three instances, and listen. It fails the
// test if the example no longer has them, once each.
func nginxConf(t testing.TB, upstreams []string, listen string) string {
	t.Helper()
	raw, err := os.ReadFile(exampleNginxConf)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	repl := map[string]string{"listen 80;": "listen " + listen + ";"}
	for i, a := range upstreams {
		repl[fmt.Sprintf("server 10.0.0.%d:8080 ", 11+i)] = "server " + a + " "
	}
	for from, to := range repl {
		if n := strings.Count(conf, from); n != 1 {
			t.Fatalf("%s holds %q %d times, want once: the test replaces it", exampleNginxConf, from, n)
		}
		conf = strings.Replace(conf, from, to, 1)
	}
	return conf
}

// nginxProc is an nginx of the test's: its master process runs in the
// foreground with every file (pid, logs, temp files) in dir.
type nginxProc struct {
	url  string // http://127.0.0.1:port
	dir  string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{}
}

// startNginx runs nginx with the example configuration in front of the
// upstreams (host:port) on a free loopback port, and waits until it
// answers GET /healthz through them. Cleanup stops it by its PID (SIGTERM:
// the master stops its workers; SIGKILL would leave them running), fails
// the test on an [alert] or worse in its log, and shows the log's end if
// the test failed.
func startNginx(t *testing.T, bin string, upstreams []string) *nginxProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	// A directory of its own, that the workers (nobody, when the test
	// runs as root) may enter for their temp files.
	dir, err := os.MkdirTemp("", "seckill-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(t, upstreams, addr)), 0o644); err != nil {
		t.Fatal(err)
	}

	n := &nginxProc{url: "http://" + addr, dir: dir, out: &lines{}, done: make(chan struct{})}
	n.cmd = exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "logs", "error.log"), "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	go func() {
		n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() { n.stop(t) })

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Second}
	testenv.WaitFor(t, 20*time.Second, "nginx answers GET /healthz", func() bool {
		select {
		case <-n.done:
			t.Fatalf("nginx exited (%v) at start: %s\n%s", n.cmd.ProcessState, n.out.String(), n.errorLog())
		default:
		}
		res, err := c.Get(n.url + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return n
}

// stop stops nginx by its PID and checks its error log.
func (n *nginxProc) stop(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		t.Errorf("nginx (pid %d) did not stop within 10s of SIGTERM; killed", n.cmd.Process.Pid)
		n.cmd.Process.Kill()
		<-n.done
	}
	log := n.errorLog()
	if m := regexp.MustCompile(`(?m)^.*\[(alert|crit|emerg)\].*$`).FindString(log); m != "" {
		t.Errorf("nginx logged: %s", m)
	}
	if t.Failed() {
		t.Logf("nginx: its output: %q; the end of its error log:\n%s", n.out.String(), tail(log, 40))
	}
}

func (n *nginxProc) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "logs", "error.log"))
	return string(b)
}

// accessLine reads a line of the example's access log format: method,
// path, status to the client, the instances tried and what each answered.
var accessLine = regexp.MustCompile(`"(\S+) (\S+) [^"]*" (\d{3}) .* upstream="([^"]*)" ustatus="([^"]*)"`)

// errorLine reads an upstream failure of nginx's error log: what failed,
// at which step, the request's method and path, and the upstream's
// address.
var errorLine = regexp.MustCompile(`\[error\] [^*]*\*\d+ (.*?) while ([^,]*), client: .*?, request: "(\S+) (\S+) [^"]*", upstream: "http://([^/"]+)`)

// logVictim logs what nginx did with the buys it tried on the killed
// instance at addr: their failures in its error log, by kind (a request in
// flight when it died fails "while reading response header", a connection
// after it is refused "while connecting"), and what those buyers were
// answered in the end (another instance's 200 or 409, or a 502).
func (n *nginxProc) logVictim(t *testing.T, addr string) {
	t.Helper()
	failures := map[string]int{}
	for _, m := range errorLine.FindAllStringSubmatch(n.errorLog(), -1) {
		if m[5] == addr && m[3] == http.MethodPost && strings.HasSuffix(m[4], "/seckill") {
			failures[m[1]+" while "+m[2]]++
		}
	}
	raw, err := os.ReadFile(filepath.Join(n.dir, "logs", "access.log"))
	if err != nil {
		t.Errorf("nginx's access log: %v", err)
		return
	}
	answered := map[string]int{} // what the client got after a failed try on addr
	tries := 0
	for _, m := range accessLine.FindAllStringSubmatch(string(raw), -1) {
		if !strings.HasSuffix(m[2], "/seckill") {
			continue
		}
		ups, sts := strings.Split(m[4], ", "), strings.Split(m[5], ", ")
		for i, a := range ups {
			if a == addr && i < len(sts) && (sts[i] == "502" || sts[i] == "504") {
				tries++
				next := "none"
				if i+1 < len(ups) {
					next = "another instance"
				}
				answered[m[3]+" from "+next]++
				break
			}
		}
	}
	inFlight := 0
	for k, v := range failures {
		if strings.HasSuffix(k, "while reading response header from upstream") || strings.HasSuffix(k, "while sending request to upstream") {
			inFlight += v
		}
	}
	t.Logf("nginx and the killed instance: %d buys in flight to it when it died (502s from it); %d buys failed on it in all, answered in the end %v; its error log: %v",
		inFlight, tries, answered, failures)
}

// codeCounter is the buyers' transport to nginx. It counts nginx's answers
// by status, and turns a 502 or 504 (nginx got no answer from an
// instance) into an error: to the load, as to a client, that is no answer,
// and the buyer asks again.
type codeCounter struct {
	next http.RoundTripper

	mu         sync.Mutex
	buy, other map[int]int
}

// RoundTrip sends the request and counts the answer.
func (c *codeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.buy == nil {
		c.buy, c.other = map[int]int{}, map[int]int{}
	}
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/seckill") {
		c.buy[res.StatusCode]++
	} else {
		c.other[res.StatusCode]++
	}
	c.mu.Unlock()
	if res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusGatewayTimeout {
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		return nil, errors.New("nginx answered " + strconv.Itoa(res.StatusCode) + ": no answer from an instance")
	}
	return res, nil
}

func (c *codeCounter) buys() string   { return c.format(func() map[int]int { return c.buy }) }
func (c *codeCounter) others() string { return c.format(func() map[int]int { return c.other }) }

func (c *codeCounter) format(m func() map[int]int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := m()
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d: %d", code, counts[code]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
