package redis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// openReplicatedCluster opens a client on cl that waits for one replica
// with the given timeout, in at most batches batches per master, armed.
func openReplicatedCluster(t *testing.T, cl *faults.Cluster, timeout time.Duration, batches int) *Client {
	t.Helper()
	c, err := Open(context.Background(), Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: timeout, WaitBatches: batches},
		testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	return c
}

// TestGroupCommitClusterUnknownMasterRunsNothingAbandoned: when a batch's
// master is one rueidis does not know (Nodes()[addr] is nil: a master
// added, or promoted, since the cluster client last read the slots),
// runBatch runs the batch's admissions one after another, each script and
// WAIT in turn, under one deadline for them all (WaitTimeout+batchSlack)
// and none of their callers' contexts. With WAITs that take their timeout
// (a replica that lags), the k-th admission starts k WAITs late: its
// request has long been answered 503 when its script runs and takes the
// unit, and the buyer is admitted after being told the request ended.
// Each must run under its own caller's context (or not at all once its
// caller left), as an admission alone does.
func TestGroupCommitClusterUnknownMasterRunsNothingAbandoned(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	const wait = 300 * time.Millisecond
	c := openReplicatedCluster(t, cl, wait, 1)
	mustLoad(t, c, onSale(1, 100))
	key := c.keys.voucher(1).Stock
	master := cl.MasterOf(t, key)
	replica := cl.ReplicaOf(t, master)

	// The topology at hand names, for the voucher's slot, a master the
	// cluster client has no connection to.
	topo, err := c.Topology(ctx)
	if err != nil {
		t.Fatalf("Topology: %v", err)
	}
	const unknown = "127.0.0.1:1"
	for i, m := range topo.Masters {
		if m.Addr == master.Addr {
			topo.Masters[i].Addr = unknown
		}
	}
	c.setTopology(&topo, 0)
	if got := c.batchMaster(key); got != unknown {
		t.Fatalf("batchMaster = %q, want %q", got, unknown)
	}

	// Every lane out, so that the admissions queue and go in one batch.
	q := c.commits.queue(unknown)
	q.mu.Lock()
	q.inflight = 1
	q.mu.Unlock()
	replica.Pause() // each WAIT takes its whole timeout
	defer replica.Resume()

	const buyers = 8
	var wg sync.WaitGroup
	errs := make([]error, buyers)
	for i := range buyers {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			errs[i] = c.Admit(actx, seckill.Admission{VoucherID: 1, UserID: int64(i + 1), OrderID: int64(101 + i)})
		})
	}
	testenv.WaitFor(t, defaultWait, "the admissions to queue", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.waiting) == buyers
	})
	go c.runBatches(q)
	wg.Wait()
	for i, err := range errs {
		var e *seckill.Error
		if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
			t.Fatalf("buyer %d, with the replica stopped = %v, want a final ErrUnavailable", i+1, err)
		}
	}
	buyersAt := func() int64 {
		n, err := master.Do(ctx, "HLEN", c.keys.voucher(1).Buyers)
		if err != nil {
			t.Fatalf("HLEN: %v", err)
		}
		return n.(int64)
	}
	answered := buyersAt()
	testenv.WaitFor(t, 10*time.Second, "the batch to end", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inflight == 0
	})
	if after := buyersAt(); after != answered {
		t.Errorf("%d buyers were admitted when every request had been answered 503, %d once the batch ended: %d admissions ran after their callers left",
			answered, after, after-answered)
	}
}

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
		switch onMaster := cl.MasterOf(t, c.keys.voucher(id).Stock).Addr == dead.Addr; {
		case onMaster && onDead == 0:
			onDead = id
		case !onMaster && onLive == 0:
			onLive = id
		}
	}
	mustLoad(t, c, onSale(onDead, 100))
	mustLoad(t, c, onSale(onLive, 1_000_000))
	mustAdmit(t, c, onLive, 1, 1)
	live := cl.MasterOf(t, c.keys.voucher(onLive).Stock)

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
