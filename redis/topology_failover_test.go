package redis

import (
	"context"
	"errors"
	"slices"
	"testing"

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
