package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is sysconf(_SC_CLK_TCK), the unit of utime and stime in
// /proc/PID/stat: 100 on every Linux the bench runs on (the kernel's
// USER_HZ, fixed for user space whatever the kernel's own HZ).
const clockTicks = 100

// Watch names local processes whose CPU time a run reports for each phase,
// read from /proc (Linux only; elsewhere nothing is reported).
type Watch struct {
	// Name is how the report names them, e.g. "redis-server".
	Name string
	// Self watches this process.
	Self bool
	// Port watches the processes that hold the TCP socket listening on this
	// local port, and their children (PostgreSQL's backends).
	Port int
	// Comms, when no process listens on Port (or Port is 0), watches every
	// process but this one whose name (/proc/PID/comm) is one of these.
	Comms []string
	// Database marks the database: its cores during the sale are reported
	// as the database's CPU.
	Database bool
	// Server marks a seckill server run as a process of its own: the
	// start figure reports its CPU per buy.
	Server bool
}

// procStat is what the bench reads of one /proc/PID/stat.
type procStat struct {
	pid   int
	comm  string
	ppid  int
	ticks uint64 // utime + stime, in clock ticks
}

// parseStat parses a /proc/PID/stat line. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("stat %q: no (comm)", truncate(b))
	}
	var s procStat
	var err error
	if s.pid, err = strconv.Atoi(string(bytes.TrimSpace(b[:open]))); err != nil {
		return procStat{}, fmt.Errorf("stat %q: pid: %w", truncate(b), err)
	}
	s.comm = string(b[open+1 : end])
	// After the comm: state(3) ppid(4) … utime(14) stime(15), counted
	// from 1 for the pid as proc(5) does.
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat %q: %d fields after the comm, want at least 13", truncate(b), len(f))
	}
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("stat %q: ppid: %w", truncate(b), err)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, fmt.Errorf("stat %q: utime, stime: %w", truncate(b), err)
	}
	s.ticks = utime + stime
	return s, nil
}

func truncate(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// listenInodes returns the socket inodes of /proc/net/tcp or tcp6 text
// that listen on port.
func listenInodes(data []byte, port int) []uint64 {
	var out []uint64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err != nil || int(p) != port {
			continue
		}
		if inode, err := strconv.ParseUint(f[9], 10, 64); err == nil && inode != 0 {
			out = append(out, inode)
		}
	}
	return out
}

// procs is one read of every process's stat.
type procs map[int]procStat

// readProcs reads /proc/*/stat; processes that end meanwhile are skipped.
func readProcs(root string) procs {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	out := procs{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if s, err := parseStat(b); err == nil {
			out[s.pid] = s
		}
	}
	return out
}

// portOwners returns the processes holding a socket that listens on port.
func portOwners(root string, port int, all procs) []int {
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		for _, in := range listenInodes(b, port) {
			inodes["socket:["+strconv.FormatUint(in, 10)+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	var out []int
	for pid := range all {
		dir := filepath.Join(root, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && inodes[link] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// cpuMeter reads the CPU time of the watched processes.
type cpuMeter struct {
	root    string // /proc
	self    int
	watches []Watch
	owners  [][]int // per watch, the port's owners once found
}

// newCPUMeter looks the ports' owners up at once: the lookup reads every
// process's open files (0.3 s of this process's CPU, measured on a busy
// machine), which the first phase would otherwise count as its own.
func newCPUMeter(watches []Watch) *cpuMeter {
	m := &cpuMeter{root: "/proc", self: os.Getpid(), watches: watches, owners: make([][]int, len(watches))}
	m.sample()
	return m
}

// cpuSample is the CPU ticks of each watch's processes at one instant.
type cpuSample struct {
	at    time.Time
	ticks []map[int]uint64 // per watch: pid → ticks
}

// sample reads the watched processes' CPU time now.
func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), ticks: make([]map[int]uint64, len(m.watches))}
	all := readProcs(m.root)
	if len(all) == 0 {
		return s
	}
	for i, w := range m.watches {
		pids := m.pids(i, w, all)
		s.ticks[i] = make(map[int]uint64, len(pids))
		for _, pid := range pids {
			s.ticks[i][pid] = all[pid].ticks
		}
	}
	return s
}

// pids returns the processes of watch i in all.
func (m *cpuMeter) pids(i int, w Watch, all procs) []int {
	if w.Self {
		if _, ok := all[m.self]; ok {
			return []int{m.self}
		}
		return nil
	}
	if w.Port > 0 {
		if m.owners[i] == nil { // looked up once; none found is kept as empty
			m.owners[i] = append([]int{}, portOwners(m.root, w.Port, all)...)
		}
		if owners := descendants(all, m.owners[i]); len(owners) > 0 {
			return owners
		}
	}
	var out []int
	for pid, p := range all {
		if pid != m.self && slices.Contains(w.Comms, p.comm) {
			out = append(out, pid)
		}
	}
	return out
}

// descendants returns the roots still running and all their descendants.
func descendants(all procs, roots []int) []int {
	children := map[int][]int{}
	for pid, p := range all {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var out []int
	seen := map[int]bool{}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if _, ok := all[pid]; !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// CPU is the CPU time that one watched process (or group of processes)
// spent during a phase.
type CPU struct {
	// Process names it (Watch.Name); PIDs are the processes summed.
	Process string `json:"process"`
	PIDs    []int  `json:"pids"`
	// Seconds is user + system CPU time, in seconds.
	Seconds float64 `json:"cpuSeconds"`
	// MsPer1k is CPU milliseconds per 1,000 of the phase's requests (per
	// 1,000 orders for the drain); 0 when the phase counted none.
	MsPer1k float64 `json:"cpuMsPer1kRequests"`
	// Cores is Seconds over the phase's wall time: 1 is one core busy.
	Cores float64 `json:"cores"`
	// Self is set on this process (the client, and the server when it
	// runs in this process); Database on the database's processes.
	Self     bool `json:"self,omitempty"`
	Database bool `json:"database,omitempty"`
	// Server is set on a seckill server's processes (Watch.Server).
	Server bool `json:"server,omitempty"`
}

// since returns what each watch spent from a to b, for n requests.
func (m *cpuMeter) since(a, b cpuSample, n int64) []CPU {
	wall := b.at.Sub(a.at).Seconds()
	var out []CPU
	for i, w := range m.watches {
		if b.ticks[i] == nil {
			continue
		}
		c := CPU{Process: w.Name, PIDs: []int{}, Self: w.Self, Database: w.Database, Server: w.Server}
		var ticks uint64
		for pid, t := range b.ticks[i] {
			c.PIDs = append(c.PIDs, pid)
			before := a.ticks[i][pid] // 0 for a process started meanwhile
			if t >= before {
				ticks += t - before
			} else {
				ticks += t // a pid reused
			}
		}
		slices.Sort(c.PIDs)
		c.Seconds = float64(ticks) / clockTicks
		if n > 0 {
			c.MsPer1k = c.Seconds * 1000 / (float64(n) / 1000)
		}
		if wall > 0 {
			c.Cores = c.Seconds / wall
		}
		out = append(out, c)
	}
	return out
}

// watchesDatabase reports whether a watch is of the database.
func (m *cpuMeter) watchesDatabase() bool {
	return slices.ContainsFunc(m.watches, func(w Watch) bool { return w.Database })
}

// databaseCores returns the database's cores busy from a to b: the sum
// over its watches.
func (m *cpuMeter) databaseCores(a, b cpuSample) float64 {
	var cores float64
	for _, c := range m.since(a, b, 0) {
		if c.Database {
			cores += c.Cores
		}
	}
	return cores
}
