package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// replicatedPair starts a master with one replica in sync and opens a
// client that waits for one replica with the given timeout, in at most
// batches batches per master (0: the default).
func replicatedPair(t *testing.T, timeout time.Duration, batches int) (c *Client, master, replica *faults.RedisProc) {
	t.Helper()
	// No delay before the full sync (5 s by default): the replica syncs at once.
	master = faults.StartRedisProc(t, "--repl-diskless-sync-delay", "0")
	replica = faults.StartRedisProc(t, "--replicaof", "127.0.0.1", itoa(master.Port))
	testenv.WaitFor(t, defaultWait, "the replica to sync", func() bool {
		return replica.Role() == "slave" && testenvField(replica.Info("replication"), "master_link_status") == "up"
	})
	c, err := Open(context.Background(), Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: timeout, WaitBatches: batches},
		testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	return c, master, replica
}

// calls reads how many times the master ran a command (INFO
// commandstats), e.g. "wait" or "evalsha".
func calls(t *testing.T, p *faults.RedisProc, cmd string) int64 {
	t.Helper()
	stat := testenvField(p.Info("commandstats"), "cmdstat_"+cmd) // calls=N,usec=…
	for _, f := range strings.Split(stat, ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// TestGroupCommitOneWaitCoversABatch: admissions that arrive together are
// confirmed by far fewer WAITs than there are admissions (one per batch),
// every one of them is admitted and on the replica when it is answered,
// and the sold-out answers among them are answered too, without a WAIT of
// their own.
func TestGroupCommitOneWaitCoversABatch(t *testing.T) {
	t.Parallel()
	c, master, replica := replicatedPair(t, 5*time.Second, 1)
	ctx := context.Background()
	const buyers, soldOut = 400, 100
	mustLoad(t, c, onSale(1, buyers))
	mustLoad(t, c, onSale(2, 0))
	master.Do(ctx, "CONFIG", "RESETSTAT")

	start := make(chan struct{})
	errs := make([]error, buyers+soldOut)
	var wg sync.WaitGroup
	for i := range buyers + soldOut {
		wg.Go(func() {
			<-start
			voucher := int64(1)
			if i >= buyers {
				voucher = 2
			}
			errs[i] = c.Admit(ctx, seckill.Admission{VoucherID: voucher, UserID: int64(i + 1), OrderID: int64(1000 + i)})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if i < buyers && err != nil {
			t.Fatalf("buyer %d: Admit = %v, want admitted", i+1, err)
		}
		if i >= buyers && !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("buyer %d of the sold-out voucher: Admit = %v, want ErrSoldOut", i+1, err)
		}
	}
	waits, scripts := calls(t, master, "wait"), calls(t, master, "evalsha")
	t.Logf("%d admissions and %d sold-out answers: %d scripts, %d WAITs", buyers, soldOut, scripts, waits)
	if scripts != buyers+soldOut {
		t.Errorf("the master ran %d admission scripts, want %d (one each)", scripts, buyers+soldOut)
	}
	if waits == 0 || waits > buyers/4 {
		t.Errorf("%d WAITs for %d admissions that arrived together: want at least one and at most %d (a WAIT per batch)", waits, buyers, buyers/4)
	}
	st := c.GroupCommitStats()
	if st.Admissions != buyers+soldOut || st.Waits != waits || st.Unconfirmed != 0 || st.Batches < st.Waits {
		t.Errorf("GroupCommitStats = %+v; want %d admissions, %d waits (the master's count), none unconfirmed, batches ≥ waits",
			st, buyers+soldOut, waits)
	}
	// Confirmed means on the replica: it has every buyer already.
	n, err := replica.Do(ctx, "HLEN", c.keys.voucher(1).Buyers)
	if err != nil || n != int64(buyers) {
		t.Errorf("the replica holds %v buyers (%v), want %d", n, err, buyers)
	}
}

// TestGroupCommitFailures: admissions run in batches, 64 buyers at a time,
// while the master is killed mid-batch, or the replica is stopped first
// and then the master killed; the replica is then promoted. Every
// admission answered 200 must be on it, with its order id: nothing is
// answered 200 that a replica may lack. Those that were not confirmed are
// answered 503, final (a *seckill.Error), never anything else.
func TestGroupCommitFailures(t *testing.T) {
	t.Parallel()
	for _, stopReplica := range []bool{false, true} {
		name := "master killed"
		if stopReplica {
			name = "replica stopped, then master killed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, master, replica := replicatedPair(t, 300*time.Millisecond, 0)
			mustLoad(t, c, onSale(1, 1_000_000))

			var (
				next        atomic.Int64
				ok, unavail atomic.Int64
				mu          sync.Mutex
				answered    = map[int64]int64{} // user → order answered 200
				bad         []error
			)
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for ctx.Err() == nil {
						user := next.Add(1)
						// Not ctx: the kill, not the test's stop, ends the
						// admissions in flight.
						err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: user, OrderID: 1_000_000 + user})
						var e *seckill.Error
						switch {
						case err == nil:
							ok.Add(1)
							mu.Lock()
							answered[user] = 1_000_000 + user
							mu.Unlock()
						case errors.As(err, &e) && e.Kind == seckill.ErrUnavailable:
							unavail.Add(1)
						default:
							mu.Lock()
							bad = append(bad, err)
							mu.Unlock()
						}
					}
				})
			}
			testenv.WaitFor(t, defaultWait, "2,000 admissions confirmed", func() bool { return ok.Load() >= 2000 })
			if stopReplica {
				replica.Pause()
				before := unavail.Load()
				testenv.WaitFor(t, defaultWait, "admissions answered unavailable with the replica stopped",
					func() bool { return unavail.Load() >= before+64 })
			}
			inFlight := unavail.Load()
			master.Kill()
			testenv.WaitFor(t, defaultWait, "the admissions in flight at the kill to be answered", func() bool { return unavail.Load() >= inFlight+64 })
			stop()
			wg.Wait()
			if stopReplica {
				replica.Resume()
			}
			for _, err := range bad {
				t.Errorf("an admission answered %v: want admitted or a final ErrUnavailable", err)
			}
			if _, err := replica.Do(context.Background(), "REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatalf("promote the replica: %v", err)
			}
			raw, err := replica.Do(context.Background(), "HGETALL", c.keys.voucher(1).Buyers)
			if err != nil {
				t.Fatalf("read the promoted replica's buyers: %v", err)
			}
			pairs, _ := raw.([]any)
			held := make(map[int64]int64, len(pairs)/2)
			for i := 0; i+1 < len(pairs); i += 2 {
				u, _ := strconv.ParseInt(pairs[i].(string), 10, 64)
				o, _ := strconv.ParseInt(pairs[i+1].(string), 10, 64)
				held[u] = o
			}
			missing := 0
			for user, order := range answered {
				if held[user] != order {
					missing++
					if missing <= 5 {
						t.Errorf("buyer %d was answered 200 with order %d; the promoted replica holds %d", user, order, held[user])
					}
				}
			}
			t.Logf("%d admissions answered 200, %d answered 503; the promoted replica holds %d buyers; %d answered 200 are missing",
				len(answered), unavail.Load(), len(held), missing)
		})
	}
}

// TestGroupCommitClusterBatchPerMaster: on a Cluster, admissions to
// vouchers on different masters are batched by master: each master runs
// its own admissions' scripts and confirms them with its own WAITs, far
// fewer than its admissions, and every admission is on that master's
// replica when it is answered.
func TestGroupCommitClusterBatchPerMaster(t *testing.T) {
	t.Parallel()
	cl := faults.SharedCluster(t)
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: 5 * time.Second, WaitBatches: 1},
		testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)

	// One voucher on each master.
	masters := cl.Masters(t)
	vouchers := map[string]int64{}
	for id := int64(1); len(vouchers) < len(masters) && id < 1000; id++ {
		if m := cl.MasterOf(t, c.keys.voucher(id).Stock); vouchers[m.Addr] == 0 {
			vouchers[m.Addr] = id
		}
	}
	const buyers = 200 // per voucher
	before := map[string]int64{}
	for _, m := range masters {
		mustLoad(t, c, onSale(vouchers[m.Addr], buyers))
		// Other tests share the cluster, but none waits for replicas on
		// it: the WAITs counted are this test's.
		before[m.Addr] = calls(t, m, "wait")
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, buyers*len(masters))
	for _, m := range masters {
		for i := range buyers {
			wg.Go(func() {
				<-start
				v := vouchers[m.Addr]
				if err := c.Admit(ctx, seckill.Admission{VoucherID: v, UserID: int64(i + 1), OrderID: v*1000 + int64(i)}); err != nil {
					errs <- err
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Admit = %v, want every buyer admitted", err)
	}
	for _, m := range masters {
		waits := calls(t, m, "wait") - before[m.Addr]
		t.Logf("master %s: %d admissions, %d WAITs", m.Addr, buyers, waits)
		if waits == 0 || waits > buyers/4 {
			t.Errorf("master %s: %d WAITs for its %d admissions: want at least one and at most %d (a WAIT per batch, batches per master)",
				m.Addr, waits, buyers, buyers/4)
		}
		// A Cluster replica answers reads after READONLY, on that connection.
		res, err := cl.ReplicaOf(t, m).DoMulti(ctx, []string{"READONLY"}, []string{"HLEN", c.keys.voucher(vouchers[m.Addr]).Buyers})
		if err != nil || len(res) != 2 || res[1] != int64(buyers) {
			t.Errorf("the replica of %s holds %v buyers (%v), want %d", m.Addr, res, err, buyers)
		}
	}
}

// TestGroupCommitAbandoned: an admission whose request ends while it is
// queued behind a batch (every lane out, waiting for a stopped replica) is
// answered unavailable at once, as final, and never runs: its buyer holds
// nothing, and the stock is only the first admission's less.
func TestGroupCommitAbandoned(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, 2*time.Second, 1)
	mustLoad(t, c, onSale(1, 10))
	replica.Pause()
	defer replica.Resume()

	first := make(chan error, 1)
	go func() {
		first <- c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101})
	}()
	// The one lane is out once the first admission's script has run: it
	// waits in WAIT for the stopped replica.
	testenv.WaitFor(t, defaultWait, "the first admission's script to run", func() bool { return stock(t, c, 1) == 9 })
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() { queued <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102}) }()
	testenv.WaitFor(t, defaultWait, "the second admission to queue", func() bool {
		q := c.commits.queue("")
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.waiting) == 1
	})
	cancel()
	select {
	case err := <-queued:
		var e *seckill.Error
		if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
			t.Fatalf("the abandoned admission = %v, want a final ErrUnavailable", err)
		}
	case <-first:
		t.Fatal("the first admission was answered before the abandoned one: the abandoned one waited for the batch")
	}
	if err := <-first; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("the first admission, with the replica stopped = %v, want ErrUnavailable", err)
	}
	// The lane is free again: the next batch skips the abandoned one.
	replica.Resume()
	mustAdmit(t, c, 1, 3, 103)
	if got := stock(t, c, 1); got != 8 {
		t.Errorf("stock = %d, want 8: the abandoned admission must never run", got)
	}
	if id, err := c.BuyerOrder(context.Background(), 2, 1); err != nil || id != 0 {
		t.Errorf("the abandoned buyer holds order %d (%v), want none", id, err)
	}
}
