package redisledger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

// TestGroupCommitClusterTopologyComesBack: on a Cluster that serves with
// a shard down (cluster-require-full-coverage no: the other masters go on
// selling), one failed batch of the dead shard forgets the whole topology
// (forgetTopology), and it never comes back: parseShards fails the whole
// read for one shard without a master, so batchMaster finds none and every
// admission of every healthy master runs alone (no group commit) for as
// long as the shard is down. And each of those admissions starts a read of
// the topology (CLUSTER SHARDS on a random node) the moment the last one
// failed: as many reads as admissions, at the sale's rate.
func TestGroupCommitClusterTopologyComesBack(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t, "--cluster-require-full-coverage", "no")
	ctx := context.Background()
	c := openReplicatedCluster(t, cl, time.Second, 0)

	// A voucher on a master that will die, one on a master that lives.
	dead := cl.Masters(t)[0]
	var onDead, onLive int64
	for id := int64(1); (onDead == 0 || onLive == 0) && id < 1000; id++ {
		switch onMaster := cl.MasterOf(t, c.key(id, "stock")).Addr == dead.Addr; {
		case onMaster && onDead == 0:
			onDead = id
		case !onMaster && onLive == 0:
			onLive = id
		}
	}
	mustLoad(t, c, onSale(onDead, 100))
	mustLoad(t, c, onSale(onLive, 1_000_000))
	mustAdmit(t, c, onLive, 1, 1)
	live := cl.MasterOf(t, c.key(onLive, "stock"))

	// The shard dies whole: master and replica.
	cl.ReplicaOf(t, dead).Kill()
	dead.Kill()
	testenv.WaitFor(t, defaultWait, "the dead shard to be failed", func() bool {
		nodes, err := live.Do(ctx, "CLUSTER", "NODES")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(nodes.(string), "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], dead.Addr+"@") {
				return strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?")
			}
		}
		return false
	})
	// One admission of the dead shard: its batch fails, the topology is
	// forgotten.
	if err := c.Admit(ctx, seckill.Admission{VoucherID: onDead, UserID: 1, OrderID: 2}); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("an admission of the dead shard = %v, want ErrUnavailable", err)
	}

	var nodes []*faults.RedisProc
	for _, n := range cl.Nodes {
		if _, err := n.Do(ctx, "CONFIG", "RESETSTAT"); err == nil {
			nodes = append(nodes, n)
		}
	}
	before := c.GroupCommitStats().Batches
	// A hundred admissions, over a second at least: a read of the
	// topology may go to a dead node and fail.
	admissions := int64(0)
	for start := time.Now(); admissions < 100 || time.Since(start) < time.Second; admissions++ {
		mustAdmit(t, c, onLive, 2+admissions, 2+admissions)
	}
	batched := c.GroupCommitStats().Batches - before
	var reads int64
	for _, n := range nodes {
		reads += calls(t, n, "cluster|shards") + calls(t, n, "cluster|slots")
	}
	t.Logf("%d admissions to the healthy master %s: %d batches, %d reads of the topology", admissions, live.Addr, batched, reads)
	if batched == 0 {
		t.Errorf("none of %d admissions to the healthy master %s went in a batch: the topology, forgotten for the dead shard, never came back",
			admissions, live.Addr)
	}
	if reads > admissions/10 {
		t.Errorf("%d admissions read the topology %d times: want a read now and then, not one per admission", admissions, reads)
	}
}

// TestGroupCommitClusterFailoverFollowsNewMaster: after a master dies and
// its replica takes over, the batches must find the new master as soon as
// the client can (rueidis' own routing, which admissions used before group
// commit, refreshes its slots on the first failed command). runBatch
// forgets the topology it batches by only on a MOVED or ASK, and only
// after it answered: a connection refused (or EOF) by the dead master is
// neither, so the admissions of its slots keep going to it, answered 503,
// until the topology cache (topologyFor, 5 s) expires; and the node
// clients' failures do not refresh the cluster client's slots either.
func TestGroupCommitClusterFailoverFollowsNewMaster(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	c := open(t, redis.Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond}, nil)
	mustLoad(t, c, onSale(1, 1000))
	master := cl.MasterOf(t, c.key(1, "stock"))
	replica := cl.ReplicaOf(t, master)
	c.ForgetTopology()
	mustAdmit(t, c, 1, 1, 101) // reads the topology afresh: the batches go to master
	testenv.WaitFor(t, defaultWait, "the topology read afresh", func() bool {
		held, _, _ := c.HeldTopology()
		return held != nil
	})
	held, _, _ := c.HeldTopology()
	before := *held

	master.Kill()
	if _, err := replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER: %v", err)
	}
	testenv.WaitFor(t, defaultWait, "the takeover", func() bool { return replica.Role() == "master" })
	cl.WaitHealthy(t, defaultWait)
	testenv.WaitFor(t, defaultWait, "admission armed on the new master", func() bool {
		c.BuyerOrder(ctx, 1, 1) // the client follows the MOVED
		id, err := c.Identity(ctx)
		return err == nil && c.ArmAdmission(ctx, id) == nil
	})

	// The topology was last read just before the master died (as it may
	// have been: it is read every topologyFor).
	_, _, gen := c.HeldTopology()
	c.KeepTopology(&before, gen)

	// The first admission is sent to the dead master, and refused. The
	// next must not be batched for it again from the same topology.
	err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Fatalf("the admission sent to the dead master = %v, want a final ErrUnavailable", err)
	}
	if got := c.node(ctx, 1); got == master.Addr {
		t.Errorf("after its connection was refused, the admissions are still batched for the dead master %s (until the topology read before the failover expires, topologyFor)", got)
	}

	// The new master has no replica (its old master is dead): its
	// admissions answer 503 "not on enough replicas", but they run there.
	// Before group commit (7850c60) the first got there in 0.4 s; with
	// group commit in 1.1 to 5.7 s (6 runs).
	start := time.Now()
	var last error
	for user := int64(3); calls(t, replica, "evalsha") == 0; user++ {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no admission reached the new master in 10 s; last answer %v", last)
		}
		last = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: user, OrderID: 100 + user})
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the admissions reached the new master in %s", time.Since(start))
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the admissions reached the new master %s after the failover was done; until then they were sent to the dead master", took.Round(time.Millisecond))
	}
}

// TestGroupCommitClusterTopologyReadDoesNotStallAdmissions: on a Cluster
// every admission now asks keyNode for its master, and keyNode reads the
// topology (CLUSTER SHARDS, on whichever node rueidis picks for a keyless
// command, replicas included) every topologyFor while holding c.topoMu, a
// mutex no caller's deadline can leave. With one node hung (here two
// replicas of other masters, stopped: a node blackholed, stuck in a fork
// or a slow command is the same to a client), an admission due to refresh
// the topology waits for that node up to its own deadline (or rueidis'
// ConnWriteTimeout, 10 s, without one), and every other admission of every
// master waits behind it on the mutex. Before group commit admissions did
// not read the topology; a healthy master's admissions must not fail for
// a hung replica of another master.
func TestGroupCommitClusterTopologyReadDoesNotStallAdmissions(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	// The group commit's clock reads every topology as due for its
	// refresh (as one is every redis.TopologyFor).
	due := func() time.Time { return time.Now().Add(redis.TopologyFor + time.Second) }
	c := open(t, redis.Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: time.Second}, due)
	mustLoad(t, c, onSale(1, 1000))
	mustAdmit(t, c, 1, 1, 101)
	master := cl.MasterOf(t, c.key(1, "stock"))
	for _, m := range cl.Masters(t) {
		if m.Addr != master.Addr {
			r := cl.ReplicaOf(t, m)
			r.Pause()
			defer r.Resume()
		}
	}
	// Ten admissions, each when the topology is due for its refresh (as
	// one is every topologyFor), each given a second: a keyless command
	// goes to one of the six nodes at random, two of them stopped.
	for user := int64(2); user < 12; user++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		start := time.Now()
		err := c.Admit(actx, seckill.Admission{VoucherID: 1, UserID: user, OrderID: 100 + user})
		cancel()
		if err != nil {
			t.Fatalf("admission %d to the healthy master %s, with two replicas of the other masters stopped: %v after %s",
				user, master.Addr, err, time.Since(start).Round(time.Millisecond))
		}
	}
}
