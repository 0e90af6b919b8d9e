package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestClusterTopologyAfterSeedMasterDies: the first seed's master is
// killed with SIGKILL and its replica promoted; a client opened, as the
// command line tools open one, with the original seed addresses must read
// the topology every time, in every call that reads it (Open's eviction
// check, Topology, Identity, masterNodes). CLUSTER SHARDS went to the one
// node rueidis picks for a keyless command, any it knows, the dead seed
// included: `seckill reconcile` exited 1 three times in four.
func TestClusterTopologyAfterSeedMasterDies(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	seed := cl.Nodes[0]
	if seed.Role() != "master" {
		t.Fatalf("the first seed %s is a %s, want the master of slots 0-5460", seed.Addr, seed.Role())
	}
	seed.Kill()
	cl.WaitHealthy(t, defaultWait)
	masters := cl.Masters(t)

	for try := range 8 {
		c, err := Open(ctx, Config{URL: cl.URL, Prefix: "t" + testenv.Random()}, testenv.Logger(t))
		if err != nil {
			t.Errorf("try %d: Open with the seed addresses: %v", try+1, err)
			continue
		}
		for range 3 {
			topo, err := c.Topology(ctx)
			if err != nil {
				t.Errorf("try %d: Topology: %v", try+1, err)
			} else if len(topo.Masters) != len(masters) || slices.ContainsFunc(topo.Masters, func(s Shard) bool { return s.Addr == seed.Addr }) {
				t.Errorf("try %d: Topology = %v, want the %d live masters", try+1, topo, len(masters))
			}
			if _, err := c.Identity(ctx); err != nil {
				t.Errorf("try %d: Identity: %v", try+1, err)
			}
			if ms, err := c.masterNodes(ctx); err != nil {
				t.Errorf("try %d: masterNodes: %v", try+1, err)
			} else if _, dead := ms[seed.Addr]; dead {
				t.Errorf("try %d: masterNodes names the dead seed %s", try+1, seed.Addr)
			}
		}
		c.Close()
	}
}

// TestWholeView: of the views the nodes answer, one is whole when every
// shard has a master that did not refuse the read; the widest of the
// others counts the slots served by such masters.
func TestWholeView(t *testing.T) {
	t.Parallel()
	shards := func(addrs ...string) []Shard {
		out := make([]Shard, len(addrs))
		for i, a := range addrs {
			out[i] = Shard{Addr: a, Slots: [][2]int{{i * 100, i*100 + 99}}}
		}
		return out
	}
	for name, c := range map[string]struct {
		shards  []Shard
		refused map[string]bool
		served  int
		whole   bool
	}{
		"every master up":             {shards("a", "b", "c"), nil, 300, true},
		"a master down, none yet":     {shards("a", "", "c"), nil, 200, false},
		"the dead master still named": {shards("a", "b", "c"), map[string]bool{"b": true}, 200, false},
		"a refused node no master":    {shards("a", "b"), map[string]bool{"z": true}, 200, true},
	} {
		served, why := wholeView(c.shards, c.refused)
		if served != c.served || (why == nil) != c.whole {
			t.Errorf("%s: wholeView = %d, %v; want %d, whole %v", name, served, why, c.served, c.whole)
		}
		if why != nil && !errors.Is(why, seckill.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, why)
		}
	}
}

// TestRefusedBy: a node that is not there (refused, closed) is told apart
// from a slow one and from a reply that cannot be read: only the first
// makes a view that names it as a master stale.
func TestRefusedBy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("CLUSTER SHARDS: %w", io.EOF), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{context.DeadlineExceeded, false},
		{errors.New("redis: CLUSTER SHARDS: no shard serves a slot"), false},
	} {
		if got := refusedBy(c.err); got != c.want {
			t.Errorf("refusedBy(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestClusterShardsPassOverStaleViews: a node whose view has a shard
// without a master (its master failed and, as far as the node knows, no
// replica took over) must not fail the read while another node answers
// with a whole view, whichever is asked first; with none whole, the read
// fails naming the slots without a master. The first seed's master of a
// Cluster of the test's own is killed and its replica stopped, so that
// its live nodes keep that view; a node of the shared Cluster has a whole
// one.
func TestClusterShardsPassOverStaleViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stale := faults.StartCluster(t)
	healthy := faults.SharedCluster(t)
	dead := stale.Nodes[0]
	stale.ReplicaOf(t, dead).Pause()
	dead.Kill()

	client := func(p *faults.RedisProc) rueidis.Client {
		t.Helper()
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatalf("connect to %s: %v", p.Addr, err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	staleNodes := map[string]rueidis.Client{}
	for _, p := range []*faults.RedisProc{stale.Nodes[1], stale.Nodes[2], stale.Nodes[4], stale.Nodes[5]} {
		rc := client(p)
		testenv.WaitFor(t, defaultWait, p.Addr+" to see slots 0-5460 without a master", func() bool {
			shards, err := readShards(ctx, rc, false)
			return err == nil && len(shards) == 3 && shards[0].Addr == ""
		})
		staleNodes[p.Addr] = rc
	}
	whole := healthy.Nodes[1]
	wantView, err := readShards(ctx, client(whole), false)
	if err != nil {
		t.Fatal(err)
	}

	c := &Client{}
	all := maps.Clone(staleNodes)
	all[whole.Addr] = client(whole)
	for try := range 10 { // the nodes are asked in random order
		got, err := c.shardsRound(ctx, all)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(wantView) {
			t.Errorf("try %d: shardsRound(four stale nodes and one whole) = %v, %v; want the whole view %v", try+1, got, err, wantView)
		}
	}
	got, err := c.shardsRound(ctx, staleNodes)
	if !errors.Is(err, seckill.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "slots 0-5460 is down") {
		t.Errorf("shardsRound(stale nodes only) = %v, want ErrUnavailable, slots 0-5460 down", err)
	}
	if len(got) != 3 || got[0].Addr != "" || got[1].Addr == "" || got[2].Addr == "" {
		t.Errorf("shardsRound(stale nodes only) = %v, want the stale view, to leave out its first shard on a partial read", got)
	}
}

// TestClusterShardsPassOverAViewNamingADeadMaster: a node that has not
// yet heard that a master died still names it, and its view looks whole
// until that master is asked. The nodes are asked in random order, so the
// view was taken whenever its node came first; a master a view names is
// asked before the view is taken.
func TestClusterShardsPassOverAViewNamingADeadMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	healthy := faults.SharedCluster(t)
	connect := func(addr string) rueidis.Client {
		t.Helper()
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatalf("connect to %s: %v", addr, err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	whole := healthy.Nodes[1]
	view, err := readShards(ctx, connect(whole.Addr), false)
	if err != nil {
		t.Fatal(err)
	}
	named := view[0].Addr
	if named == whole.Addr {
		named = view[1].Addr
	}
	// The master the view names, as a node that has died: its address
	// leads to a server that is gone.
	gone := faults.StartRedisProc(t)
	goneClient := connect(gone.Addr)
	gone.Kill()

	c := &Client{}
	nodes := map[string]rueidis.Client{whole.Addr: connect(whole.Addr), named: goneClient}
	for try := range 10 {
		got, err := c.shardsRound(ctx, nodes)
		if !errors.Is(err, seckill.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "does not answer") {
			t.Errorf("try %d: shardsRound(a view naming %s, which refuses) = %v, %v; want ErrUnavailable, the master does not answer", try+1, named, got, err)
		}
	}
}
