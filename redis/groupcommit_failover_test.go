package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestGroupCommitSubMillisecondWaitTimeout: a WaitTimeout under a
// millisecond (Config and --redis-wait-timeout accept 500µs) must not
// become WAIT n 0, which Redis reads as "block until n replicas ack, for
// ever". With the replica stopped, the admission is to be answered 503
// about its timeout; a WAIT 0 holds the batch's lane until the batch's own
// context (WaitTimeout + batchSlack, 2 s) kills the connection, and on the
// paths without that context (admitReplicated on a Cluster whose master
// rueidis does not know, runBatch's fallback with context.Background(),
// transfers' takeReplicated) it never returns while the replica lags.
func TestGroupCommitSubMillisecondWaitTimeout(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, 500*time.Microsecond, 1)
	mustLoad(t, c, onSale(1, 10))
	replica.Pause()
	defer replica.Resume()

	start := time.Now()
	err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101})
	took := time.Since(start)
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Fatalf("Admit with the replica stopped = %v, want a final ErrUnavailable", err)
	}
	if took > time.Second {
		t.Errorf("Admit with a 500µs WaitTimeout and the replica stopped took %s: the WAIT was sent with timeout 0 (for ever) and only the batch's context ended it", took.Round(time.Millisecond))
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
	c, err := Open(ctx, Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond},
		testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	mustLoad(t, c, onSale(1, 1000))
	master := cl.MasterOf(t, c.keys.voucher(1).Stock)
	replica := cl.ReplicaOf(t, master)
	c.forgetTopology()
	mustAdmit(t, c, 1, 1, 101) // reads the topology afresh: the batches go to master
	c.topoMu.Lock()
	before := *c.topo
	c.topoMu.Unlock()

	master.Kill()
	if _, err := replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER: %v", err)
	}
	testenv.WaitFor(t, defaultWait, "the takeover", func() bool { return replica.Role() == "master" })
	cl.WaitHealthy(t, defaultWait)
	testenv.WaitFor(t, defaultWait, "admission armed on the new master", func() bool {
		c.rdb.Do(ctx, c.rdb.B().Get().Key(c.keys.voucher(1).Stock).Build()) // rdb follows the MOVED
		id, err := c.Identity(ctx)
		return err == nil && c.ArmAdmission(ctx, id) == nil
	})

	// The topology was last read just before the master died (as it may
	// have been: it is read every topologyFor).
	c.topoMu.Lock()
	c.topo, c.topoAt = &before, time.Now()
	c.topoMu.Unlock()

	// The first admission is sent to the dead master, and refused. The
	// next must not be batched for it again from the same topology.
	err = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Fatalf("the admission sent to the dead master = %v, want a final ErrUnavailable", err)
	}
	if got := c.keyNode(ctx, c.keys.voucher(1).Stock); got == master.Addr {
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
	c, err := Open(ctx, Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: time.Second},
		testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	mustLoad(t, c, onSale(1, 1000))
	mustAdmit(t, c, 1, 1, 101)
	master := cl.MasterOf(t, c.keys.voucher(1).Stock)
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
		c.topoMu.Lock()
		c.topoAt = time.Time{}
		c.topoMu.Unlock()
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
