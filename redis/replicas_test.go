package redis

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// records is a slog handler that keeps what is logged, for tests that
// check a warning was given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// warnings returns the messages logged at Warn, each with its "master"
// attribute.
func (r *records) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level != slog.LevelWarn {
			continue
		}
		master := ""
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "master" {
				master = a.Value.String()
			}
			return true
		})
		out = append(out, master+": "+rec.Message)
	}
	return out
}

// count reports how many of the warnings contain part.
func count(warnings []string, part string) int {
	n := 0
	for _, w := range warnings {
		if strings.Contains(w, part) {
			n++
		}
	}
	return n
}

// The warnings CheckReplicas gives, by a part of each.
const (
	warnBelow    = "below the"
	warnFewer    = "fewer than --redis-wait-replicas"
	warnPriority = "replica-priority differ"
	warnMinRepl  = "min-replicas-to-write is 0"
)

// replicaSet starts a master (with args) and a replica of it for each
// priority, in sync.
func replicaSet(t *testing.T, masterArgs []string, priorities ...int) *faults.RedisProc {
	t.Helper()
	master := faults.StartRedisProc(t, masterArgs...)
	var replicas []*faults.RedisProc
	for _, p := range priorities {
		replicas = append(replicas, faults.StartRedisProc(t, "--replicaof", "127.0.0.1", itoa(master.Port), "--replica-priority", itoa(p)))
	}
	testenv.WaitFor(t, defaultWait, "the replicas in sync", func() bool {
		for _, r := range replicas {
			if testenvField(r.Info("replication"), "master_link_status") != "up" {
				return false
			}
		}
		return testenvField(master.Info("replication"), "connected_slaves") == itoa(len(priorities))
	})
	return master
}

// checkReplicas opens a client of url that waits for n replicas, runs
// CheckReplicas and returns the warnings it logged, after checking that it
// returned the same.
func checkReplicas(t *testing.T, url string, n int) []string {
	t.Helper()
	logs := &records{}
	c, err := Open(context.Background(), Config{URL: url, Prefix: "t" + testenv.Random(), WaitReplicas: n}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	returned := c.CheckReplicas(ctx)
	logged := logs.warnings()
	if len(returned) != len(logged) {
		t.Errorf("CheckReplicas returned %q, logged %q", returned, logged)
	}
	return logged
}

// TestCheckReplicas: at start, the conditions of docs/guarantees.md under
// which an admission answered 200 survives a failover are checked where
// they can be read, and each that does not hold is a warning in the log.
func TestCheckReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		masterArgs []string
		priorities []int
		n          int
		want       map[string]int // part of a warning → how many
	}{
		{"below every replica, priorities differ, no min-replicas", nil, []int{100, 50}, 1,
			map[string]int{warnBelow: 1, warnPriority: 1, warnMinRepl: 1}},
		{"below every replica, priorities equal", []string{"--min-replicas-to-write", "1"}, []int{100, 100}, 1,
			map[string]int{warnBelow: 1}},
		// Every replica acknowledged: whichever is promoted has it.
		{"every replica, priorities differ", []string{"--min-replicas-to-write", "1"}, []int{100, 50}, 2, nil},
		{"more than the replicas", []string{"--min-replicas-to-write", "1"}, []int{100}, 2, map[string]int{warnFewer: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			master := replicaSet(t, tc.masterArgs, tc.priorities...)
			got := checkReplicas(t, "redis://"+master.Addr, tc.n)
			total := 0
			for part, n := range tc.want {
				total += n
				if c := count(got, part); c != n {
					t.Errorf("%d warnings say %q, want %d; warnings:\n%s", c, part, n, strings.Join(got, "\n"))
				}
			}
			if len(got) != total {
				t.Errorf("%d warnings, want %d:\n%s", len(got), total, strings.Join(got, "\n"))
			}
			for _, w := range got {
				if !strings.HasPrefix(w, master.Addr+": ") {
					t.Errorf("warning %q does not name the master %s", w, master.Addr)
				}
			}
		})
	}
}

// TestCheckReplicasNotWaiting: without WaitReplicas nothing is promised,
// and nothing is checked.
func TestCheckReplicasNotWaiting(t *testing.T) {
	t.Parallel()
	master := replicaSet(t, nil, 100, 50)
	if got := checkReplicas(t, "redis://"+master.Addr, 0); len(got) != 0 {
		t.Errorf("warnings with WaitReplicas 0: %q", got)
	}
}

// TestCheckReplicasSentinel reads Sentinel's view: the one replica of the
// shared deployment, equal to WaitReplicas, and its priority from
// SENTINEL REPLICAS; its master has no min-replicas-to-write.
func TestCheckReplicasSentinel(t *testing.T) {
	t.Parallel()
	s := faults.SharedSentinel(t)
	got := checkReplicas(t, s.URL, 1)
	if len(got) != 1 || count(got, warnMinRepl) != 1 {
		t.Errorf("warnings %q, want only %q", got, warnMinRepl)
	}
	c, err := Open(context.Background(), Config{URL: s.URL, WaitReplicas: 1}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	priorities, err := c.sentinelPriorities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	replica := s.Replica.Addr
	if s.CurrentMaster(t) == replica {
		replica = s.Master.Addr
	}
	if len(priorities) != 1 || priorities[replica] != "100" {
		t.Errorf("Sentinel's replica priorities %v, want %s: 100", priorities, replica)
	}
}

// TestCheckReplicasCluster: on a Cluster every master is checked: one
// replica each, equal to WaitReplicas; no min-replicas-to-write.
func TestCheckReplicasCluster(t *testing.T) {
	t.Parallel()
	cl := faults.SharedCluster(t)
	masters := cl.Masters(t)
	got := checkReplicas(t, cl.URL, 1)
	if len(got) != len(masters) || count(got, warnMinRepl) != len(masters) {
		t.Errorf("warnings %q, want %q for each of the %d masters", got, warnMinRepl, len(masters))
	}
}
