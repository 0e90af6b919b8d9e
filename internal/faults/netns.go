package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seckill/seckill/internal/testenv"
)

// Netns is a network namespace of a test's own, linked to the host by two
// veth pairs, for tests that cut a process off from the services while
// the test still talks to it:
//
//   - the services link, host HostServices (10.213.X.1/30) ↔ namespace
//     NsServices (10.213.X.2/30): what a process inside reaches Redis and
//     the database through, once they listen on HostServices (a Redis
//     bound and announcing there, or a proxy from StartProxy);
//   - the clients link, host HostClients (10.213.X.5/30) ↔ namespace
//     NsClients (10.213.X.6/30): what the test reaches a server inside
//     through, when it listens on NsClients.
//
// The namespace has no default route: from inside, only these two /30s
// (and its own loopback) are reachable, so the services' addresses are
// reached over the services link alone. Cut takes that link down and Heal
// brings it back; the clients link stays up throughout.
//
// It needs root and the ip command (iproute2); without them the test is
// skipped, or failed when CI is set.
type Netns struct {
	// Name is the namespace's name, as `ip netns` lists it:
	// seckill-<pid>-<random>.
	Name string
	// HostServices and NsServices are the services link's addresses, on
	// the host and inside.
	HostServices, NsServices string
	// HostClients and NsClients are the clients link's addresses, on the
	// host and inside.
	HostClients, NsClients string
	// HostServicesLink and HostClientsLink name the links' host ends,
	// sk<random>s and sk<random>c.
	HostServicesLink, HostClientsLink string
}

// The links' names inside the namespace.
const (
	nsServicesLink = "svc0"
	nsClientsLink  = "cli0"
)

// netnsPrefix starts the names of the tests' namespaces, followed by the
// PID of the test process that made them, so that a later process can
// remove those of one that died without its cleanups.
const netnsPrefix = "seckill-"

// netnsLock is a file every test process locks while it picks a subnet and
// makes its links, so that two never take the same one.
var netnsLock = filepath.Join(os.TempDir(), "seckill-netns.lock")

var netnsSweep sync.Once

// NewNetns makes a namespace with its two links, and removes it and the
// links' host ends when the test ends, failed or not. X is picked at
// random among those whose 10.213.X.0/24 no address of the host is in.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	requireNetns(t)
	unlock, err := lockFile(netnsLock)
	if err != nil {
		t.Fatalf("netns: lock %s: %v", netnsLock, err)
	}
	defer unlock()
	netnsSweep.Do(sweepNetns)
	x, err := freeSubnet()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	suffix := testenv.Random()[:6]
	base := "10.213." + strconv.Itoa(x) + "."
	n := &Netns{
		Name:             netnsPrefix + strconv.Itoa(os.Getpid()) + "-" + suffix,
		HostServices:     base + "1",
		NsServices:       base + "2",
		HostClients:      base + "5",
		NsClients:        base + "6",
		HostServicesLink: "sk" + suffix + "s",
		HostClientsLink:  "sk" + suffix + "c",
	}
	if err := ipCmd("netns", "add", n.Name); err != nil {
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(n.remove)
	steps := [][]string{
		{"link", "add", n.HostServicesLink, "type", "veth", "peer", "name", nsServicesLink, "netns", n.Name},
		{"link", "add", n.HostClientsLink, "type", "veth", "peer", "name", nsClientsLink, "netns", n.Name},
		{"addr", "add", n.HostServices + "/30", "dev", n.HostServicesLink},
		{"addr", "add", n.HostClients + "/30", "dev", n.HostClientsLink},
		{"link", "set", n.HostServicesLink, "up"},
		{"link", "set", n.HostClientsLink, "up"},
		{"-n", n.Name, "addr", "add", n.NsServices + "/30", "dev", nsServicesLink},
		{"-n", n.Name, "addr", "add", n.NsClients + "/30", "dev", nsClientsLink},
		{"-n", n.Name, "link", "set", nsServicesLink, "up"},
		{"-n", n.Name, "link", "set", nsClientsLink, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := ipCmd(args...); err != nil {
			t.Fatalf("netns %s: %v", n.Name, err)
		}
	}
	for _, link := range []string{n.HostServicesLink, n.HostClientsLink} {
		if err := waitOperstate(link, "up"); err != nil {
			t.Fatalf("netns %s: %v", n.Name, err)
		}
	}
	return n
}

// requireNetns skips the test (fails it in CI) unless it runs as root with
// the ip command.
func requireNetns(t testing.TB) {
	t.Helper()
	var why string
	if _, err := exec.LookPath("ip"); err != nil {
		why = "the ip command is not installed (apt-get install iproute2): " + err.Error()
	} else if os.Geteuid() != 0 {
		why = "making network namespaces needs root"
	}
	if why == "" {
		return
	}
	if testenv.CI() {
		t.Fatal(why)
	}
	t.Skip(why)
}

// Cut takes the host end of the services link down: from inside, Redis and
// the database stop answering, as in a network partition: nothing is
// refused or reset, packets are lost; open connections hang and new ones
// fail once the neighbour lookup gives up (no route to host, after about
// 3s). The test still reaches a server inside over the clients link, and
// the host's address stays, so processes on the host go on reaching the
// services there.
func (n *Netns) Cut(t testing.TB) {
	t.Helper()
	if err := ipCmd("link", "set", n.HostServicesLink, "down"); err != nil {
		t.Fatalf("netns %s: cut: %v", n.Name, err)
	}
}

// Heal brings the services link up again and waits until it carries
// packets. Connections that outlived the cut go on.
//
// The neighbour entries of both ends are flushed: one that failed during
// the cut (a connection tried then) could otherwise answer the first
// connection after the heal "no route to host" at once, as CI saw once.
func (n *Netns) Heal(t testing.TB) {
	t.Helper()
	if err := ipCmd("link", "set", n.HostServicesLink, "up"); err != nil {
		t.Fatalf("netns %s: heal: %v", n.Name, err)
	}
	if err := waitOperstate(n.HostServicesLink, "up"); err != nil {
		t.Fatalf("netns %s: heal: %v", n.Name, err)
	}
	err := poll(5*time.Second, func() error {
		out, err := exec.Command("ip", "-n", n.Name, "-o", "link", "show", nsServicesLink).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip link inside: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "state UP") {
			return fmt.Errorf("inside, %s is not up: %s", nsServicesLink, out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netns %s: heal: %v", n.Name, err)
	}
	for _, args := range [][]string{
		{"neigh", "flush", "dev", n.HostServicesLink},
		{"-n", n.Name, "neigh", "flush", "dev", nsServicesLink},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatalf("netns %s: heal: %v", n.Name, err)
		}
	}
}

// Command returns a command that runs name with args inside the namespace
// (ip netns exec, which execs name in place: the command's PID is the
// process's).
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Dial connects from inside the namespace, as a process there would.
func (n *Netns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens inside the namespace (on NsClients, say): the listener's
// connections come from outside through the namespace's links.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.inside(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// inside runs f on an OS thread of its own that has joined the namespace:
// sockets f makes belong to it. The thread is never given back to other
// goroutines; it ends with f's goroutine.
func (n *Netns) inside(f func() error) error {
	done := make(chan error, 1)
	go func() {
		// The thread goes back to its own namespace afterwards and is
		// unlocked, not left to die with the goroutine: a thread that ends
		// kills every child it started with Pdeathsig (the Redis servers of
		// StartRedisProc), whatever test they belong to.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer home.Close()
		ns, err := os.Open(filepath.Join("/run/netns", n.Name))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET)
		ns.Close()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked, in the other namespace, and dies with this goroutine
		done <- ferr
	}()
	return <-done
}

// StartProxy starts a Proxy to target (host:port, on the host's loopback,
// say) that listens on HostServices, and stops it when the test ends: a
// way for a process inside to reach a service that listens on loopback
// only, through the services link.
func (n *Netns) StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostServices, "0"))
	if err != nil {
		t.Fatalf("netns %s: proxy: listen: %v", n.Name, err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.resume = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// remove deletes the namespace and the links' host ends (deleting one end
// of a veth pair deletes both). What is already gone is no error.
func (n *Netns) remove() {
	for _, link := range []string{n.HostServicesLink, n.HostClientsLink} {
		if _, err := os.Stat(filepath.Join("/sys/class/net", link)); err == nil {
			ipCmd("link", "del", link)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", n.Name)); err == nil {
		ipCmd("netns", "del", n.Name)
	}
}

// ipCmd runs ip with args and returns its complaint as the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitOperstate waits up to 5s for a link of the host to reach state.
func waitOperstate(link, state string) error {
	return poll(5*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", link, "operstate"))
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(b)); s != state {
			return fmt.Errorf("link %s is %s, not %s", link, s, state)
		}
		return nil
	})
}

// freeSubnet picks X at random such that no address of the host is in
// 10.213.X.0/24. The caller holds netnsLock until its links carry the
// addresses.
func freeSubnet() (int, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("ip -o -4 addr show: %w", err)
	}
	used := string(out)
	for _, x := range rand.Perm(254) {
		if !strings.Contains(used, " 10.213."+strconv.Itoa(x+1)+".") {
			return x + 1, nil
		}
	}
	return 0, errors.New("every subnet 10.213.X.0/24 is in use")
}

// sweepNetns removes the namespaces of test processes that exited without
// their cleanups (killed, timed out): nothing else would.
func sweepNetns() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), netnsPrefix), "-")
		if !ok || !strings.HasPrefix(e.Name(), netnsPrefix) {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			ipCmd("netns", "del", e.Name())
		}
	}
}

// lockFile takes an exclusive lock on the file at path, made if missing,
// and returns what releases it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
