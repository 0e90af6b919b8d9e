package bench

import (
	"net"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       procStat
	}{
		{"plain", "2041 (redis-server) S 1 2041 2041 0 -1 4194560 1317 0 0 0 873 412 0 0 20 0 6 0 1801 77430784 2761 18446744073709551615\n",
			procStat{pid: 2041, comm: "redis-server", ppid: 1, ticks: 873 + 412}},
		{"spaces and parentheses in the name", "77 (my (odd) proc) R 12 77 77 0 -1 4194304 10 0 0 0 250 130 0 0 20 0 1 0 99 0 0\n",
			procStat{pid: 77, comm: "my (odd) proc", ppid: 12, ticks: 380}},
		{"a name that ends like fields", "5 (x) S 1 2 3) S 4 5 5 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 1 0 0",
			procStat{pid: 5, comm: "x) S 1 2 3", ppid: 4, ticks: 15}},
	} {
		got, err := parseStat([]byte(tc.line))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: parseStat = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"", "12 redis S 1", "x (a) S 1 2 3 4 5 6 7 8 9 10 11 12", "1 (a) S 1 2 3", "1 (a) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if s, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, s)
		}
	}
}

func TestListenInodes(t *testing.T) {
	t.Parallel()
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 23456 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 34567 1 0000000000000000 100 0 0 10 0
   2: 0100007F:18EB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   100        0 45678 1 0000000000000000 20 4 30 10 -1
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 56789 1 0000000000000000 100 0 0 10 0
`
	if got := listenInodes([]byte(tcp), 6379); !slices.Equal(got, []uint64{23456}) {
		t.Errorf("port 6379 in tcp: %v, want [23456] (the established connection is not listening)", got)
	}
	if got := listenInodes([]byte(tcp), 3306); !slices.Equal(got, []uint64{34567}) {
		t.Errorf("port 3306 in tcp: %v, want [34567]", got)
	}
	if got := listenInodes([]byte(tcp6), 6379); !slices.Equal(got, []uint64{56789}) {
		t.Errorf("port 6379 in tcp6: %v, want [56789]", got)
	}
	if got := listenInodes([]byte(tcp), 5432); len(got) != 0 {
		t.Errorf("port 5432: %v, want none", got)
	}
}

func TestDescendants(t *testing.T) {
	t.Parallel()
	all := procs{1: {pid: 1}, 10: {pid: 10, ppid: 1}, 11: {pid: 11, ppid: 10}, 12: {pid: 12, ppid: 11}, 20: {pid: 20, ppid: 1}}
	got := descendants(all, []int{10, 99})
	slices.Sort(got)
	if !slices.Equal(got, []int{10, 11, 12}) {
		t.Errorf("descendants of 10 (and of 99, gone) = %v, want [10 11 12]", got)
	}
}

// TestCPUSince: CPU per 1,000 requests and cores, from two samples; a
// process started meanwhile counts whole.
func TestCPUSince(t *testing.T) {
	t.Parallel()
	m := &cpuMeter{watches: []Watch{{Name: "db", Database: true}, {Name: "gone"}}}
	at := time.Unix(1000, 0)
	a := cpuSample{at: at, ticks: []map[int]uint64{{1: 100, 2: 50}, nil}}
	b := cpuSample{at: at.Add(2 * time.Second), ticks: []map[int]uint64{{1: 250, 2: 50, 3: 30}, nil}}
	got := m.since(a, b, 4000)
	if len(got) != 1 {
		t.Fatalf("since = %+v, want one watch (the other has no processes)", got)
	}
	c := got[0]
	// 150 + 0 + 30 ticks = 1.8 s, over 4,000 requests and 2 s.
	if c.Process != "db" || !c.Database || c.Seconds != 1.8 || c.MsPer1k != 450 || c.Cores != 0.9 || !slices.Equal(c.PIDs, []int{1, 2, 3}) {
		t.Errorf("since = %+v, want db, 1.8 s, 450 ms per 1k, 0.9 cores, pids 1 2 3", c)
	}
}

// TestCPUMeterSelf reads this process's own CPU from /proc.
func TestCPUMeterSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	m := newCPUMeter([]Watch{{Name: "me", Self: true}})
	a := m.sample()
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); { // busy
	}
	got := m.since(a, m.sample(), 1000)
	if len(got) != 1 || got[0].Seconds <= 0 || !slices.Equal(got[0].PIDs, []int{os.Getpid()}) {
		t.Errorf("since = %+v, want this process's CPU time above 0", got)
	}
}

// TestPortOwners finds this process by a port it listens on.
func TestPortOwners(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	m := newCPUMeter([]Watch{{Name: "listener", Port: port}})
	// Looked up before any phase, whose CPU would count the lookup's.
	if !slices.Contains(m.owners[0], os.Getpid()) {
		t.Errorf("the port's owners after newCPUMeter: %v, want this process (%d), looked up already", m.owners[0], os.Getpid())
	}
	got := m.pids(0, m.watches[0], readProcs(m.root))
	if !slices.Contains(got, os.Getpid()) {
		t.Errorf("the processes listening on port %d: %v, want this one (%d)", port, got, os.Getpid())
	}
}

// TestDatabaseCores sums the database's watches only.
func TestDatabaseCores(t *testing.T) {
	t.Parallel()
	m := &cpuMeter{watches: []Watch{{Name: "db", Database: true}, {Name: "redis"}, {Name: "db2", Database: true}}}
	at := time.Unix(1000, 0)
	a := cpuSample{at: at, ticks: []map[int]uint64{{1: 100}, {2: 0}, {3: 0}}}
	b := cpuSample{at: at.Add(time.Second), ticks: []map[int]uint64{{1: 150}, {2: 100}, {3: 20}}}
	if got := m.databaseCores(a, b); got != 0.7 {
		t.Errorf("databaseCores = %v, want 0.7 (50 + 20 ticks in a second, not redis's 100)", got)
	}
	if !m.watchesDatabase() || (&cpuMeter{watches: []Watch{{Name: "redis"}}}).watchesDatabase() {
		t.Error("watchesDatabase: want true with a database watch only")
	}
}
