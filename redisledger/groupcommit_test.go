package redisledger

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

const defaultWait = 30 * time.Second

// ledgerClient is a client whose admissions that wait for replicas go
// through a GroupCommit of its own, started, as app.New wires them.
type ledgerClient struct {
	*redis.Client
	prefix  string
	commits *GroupCommit
}

// open opens a client of cfg, armed, whose group commit reads the time
// by clock (nil: time.Now); both end with the test.
func open(t *testing.T, cfg redis.Config, clock seckill.Clock) *ledgerClient {
	t.Helper()
	c, err := redis.Open(context.Background(), cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	g := NewGroupCommit(c, testenv.Logger(t), clock)
	g.Start(context.Background())
	c.SetBatcher(g)
	t.Cleanup(g.Stop)
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = redis.DefaultPrefix
	}
	return &ledgerClient{Client: c, prefix: prefix, commits: g}
}

// key is the Redis key of one of a voucher's values ("stock", "buyers").
func (c *ledgerClient) key(voucherID int64, name string) string {
	return testenv.VoucherKey(c.prefix, voucherID, name)
}

// stock returns the voucher's stock in Redis, or -1 if it is not loaded.
func (c *ledgerClient) stock(t *testing.T, voucherID int64) int64 {
	t.Helper()
	st, err := c.State(context.Background(), voucherID)
	if err != nil {
		t.Fatalf("State(%d): %v", voucherID, err)
	}
	if !st.Loaded {
		return -1
	}
	return st.Remaining
}

// node returns the master that the client names for the voucher's keys
// from the topology it holds (reading it afresh when it is forgotten or
// old); "" when it cannot tell.
func (c *ledgerClient) node(ctx context.Context, voucherID int64) string {
	st, err := c.State(ctx, voucherID)
	if err != nil {
		return ""
	}
	return st.Node
}

// arm lets admissions run, as an instance does once it checked the server
// (seckill.VoucherService.Recover).
func arm(t testing.TB, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	id, err := c.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if err := c.ArmAdmission(ctx, id); err != nil {
		t.Fatalf("ArmAdmission: %v", err)
	}
}

// cache is what the helpers below use of a client.
type cache interface {
	LoadVoucher(ctx context.Context, v *seckill.Voucher) (bool, error)
	Admit(ctx context.Context, a seckill.Admission) error
}

// onSale returns a voucher whose sale began a minute ago and ends in an hour.
func onSale(id, stock int64) *seckill.Voucher {
	now := time.Now()
	return &seckill.Voucher{ID: id, Stock: stock, InitialStock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
}

// mustLoad loads v, a voucher new to Redis.
func mustLoad(t *testing.T, c cache, v *seckill.Voucher) {
	t.Helper()
	replaced, err := c.LoadVoucher(context.Background(), v)
	if err != nil || replaced {
		t.Fatalf("LoadVoucher(%d) = %v, %v; want false (nothing stale), nil", v.ID, replaced, err)
	}
}

// mustAdmit admits user with order and fails the test otherwise.
func mustAdmit(t *testing.T, c cache, voucherID, userID, orderID int64) {
	t.Helper()
	if err := c.Admit(context.Background(), seckill.Admission{VoucherID: voucherID, UserID: userID, OrderID: orderID}); err != nil {
		t.Fatalf("Admit(voucher %d, user %d, order %d): %v", voucherID, userID, orderID, err)
	}
}

// errKind returns the *seckill.Error in err, or fails the test.
func errKind(t *testing.T, err error, kind error) *seckill.Error {
	t.Helper()
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, kind) {
		t.Fatalf("got error %v, want a *seckill.Error of kind %v", err, kind)
	}
	return e
}

func itoa(n int) string { return strconv.Itoa(n) }

// testenvField reads a field of an INFO section.
func testenvField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// replicatedPair starts a master with one replica in sync and opens a
// client that waits for one replica with the given timeout, in at most
// batches batches per master (0: the default).
func replicatedPair(t *testing.T, timeout time.Duration, batches int) (c *ledgerClient, master, replica *faults.RedisProc) {
	t.Helper()
	// No delay before the full sync (5 s by default): the replica syncs at once.
	master = faults.StartRedisProc(t, "--repl-diskless-sync-delay", "0")
	replica = faults.StartRedisProc(t, "--replicaof", "127.0.0.1", itoa(master.Port))
	testenv.WaitFor(t, defaultWait, "the replica to sync", func() bool {
		return replica.Role() == "slave" && testenvField(replica.Info("replication"), "master_link_status") == "up"
	})
	c = open(t, redis.Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: timeout, WaitBatches: batches}, nil)
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
	n, err := replica.Do(ctx, "HLEN", c.key(1, "buyers"))
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
			raw, err := replica.Do(context.Background(), "HGETALL", c.key(1, "buyers"))
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
	c := open(t, redis.Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: 5 * time.Second, WaitBatches: 1}, nil)

	// One voucher on each master.
	masters := cl.Masters(t)
	vouchers := map[string]int64{}
	for id := int64(1); len(vouchers) < len(masters) && id < 1000; id++ {
		if m := cl.MasterOf(t, c.key(id, "stock")); vouchers[m.Addr] == 0 {
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
		res, err := cl.ReplicaOf(t, m).DoMulti(ctx, []string{"READONLY"}, []string{"HLEN", c.key(vouchers[m.Addr], "buyers")})
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
	testenv.WaitFor(t, defaultWait, "the first admission's script to run", func() bool { return c.stock(t, 1) == 9 })
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
	if got := c.stock(t, 1); got != 8 {
		t.Errorf("stock = %d, want 8: the abandoned admission must never run", got)
	}
	if id, err := c.BuyerOrder(context.Background(), 2, 1); err != nil || id != 0 {
		t.Errorf("the abandoned buyer holds order %d (%v), want none", id, err)
	}
}

// openReplicatedCluster opens a client on cl that waits for one replica
// with the given timeout, in at most batches batches per master, armed.
func openReplicatedCluster(t *testing.T, cl *faults.Cluster, timeout time.Duration, batches int) *ledgerClient {
	t.Helper()
	return open(t, redis.Config{URL: cl.URL, Prefix: "t" + testenv.Random(), WaitReplicas: 1, WaitTimeout: timeout, WaitBatches: batches}, nil)
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
	key := c.key(1, "stock")
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
	_, _, gen := c.HeldTopology()
	c.KeepTopology(&topo, gen)
	if got := c.commits.topo.master(key); got != unknown {
		t.Fatalf("the batches' master = %q, want %q", got, unknown)
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
	q.wake <- struct{}{} // the lane runs the queue's batches
	wg.Wait()
	for i, err := range errs {
		var e *seckill.Error
		if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
			t.Fatalf("buyer %d, with the replica stopped = %v, want a final ErrUnavailable", i+1, err)
		}
	}
	buyersAt := func() int64 {
		n, err := master.Do(ctx, "HLEN", c.key(1, "buyers"))
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

// TestGroupCommitSoldOutWaitsForNoReplica is what a sold_out promises
// with admissions that wait for replicas (docs/guarantees.md): the
// master's stock was 0 when the script ran, and nothing more. It waits
// for no WAIT: buyer 1 takes the last unit while the replica is stopped
// and is still waiting for the WAIT that would confirm it when buyer 2 is
// answered sold out. The master then dies and that replica, which never
// got the unit taken, is promoted: the unit is back, buyer 1 is answered
// 503 (not confirmed), and buyer 2, told sold out, buys it on a retry.
// Should sold-out answers come to wait for a WAIT, this test fails, and
// the documented promise is to be changed with it.
func TestGroupCommitSoldOutWaitsForNoReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The replica follows the master through a proxy that can hold its
	// stream: a replica that lags, its link up. A process stopped with
	// SIGSTOP would not do: what the master sent before it died waits in
	// the stopped replica's socket, and it reads it once resumed.
	master := faults.StartRedisProc(t, "--repl-diskless-sync-delay", "0")
	link := faults.StartProxy(t, master.Addr)
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica := faults.StartRedisProc(t, "--replicaof", host, port)
	testenv.WaitFor(t, defaultWait, "the replica to sync", func() bool {
		return replica.Role() == "slave" && testenvField(replica.Info("replication"), "master_link_status") == "up"
	})
	// A WAIT far longer than the test: buyer 1 is answered by the kill.
	c := open(t, redis.Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: 10 * time.Minute}, nil)
	mustLoad(t, c, onSale(1, 1))
	stockKey := c.key(1, "stock")
	testenv.WaitFor(t, defaultWait, "the replica to have the voucher", func() bool {
		v, err := replica.Do(ctx, "GET", stockKey)
		return err == nil && v == "1"
	})
	link.Pause()

	first := make(chan error, 1)
	go func() { first <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101}) }()
	testenv.WaitFor(t, defaultWait, "buyer 1 to take the last unit on the master", func() bool {
		v, err := master.Do(ctx, "GET", stockKey)
		return err == nil && v == "0"
	})
	// Bounded: a sold out that waited for buyer 1's WAIT would wait for
	// the kill.
	askCtx, cancel := context.WithTimeout(ctx, defaultWait)
	soldOut := c.Admit(askCtx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	cancel()
	select {
	case err := <-first:
		t.Errorf("buyer 1 was answered (%v) before buyer 2's sold out: no WAIT could confirm it with the replica stopped", err)
	default:
	}
	errKind(t, soldOut, seckill.ErrSoldOut)

	master.Kill()
	link.Down() // what it held is dropped
	if err := <-first; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("buyer 1, whose unit no replica had when the master died: %v, want ErrUnavailable (not confirmed)", err)
	}
	if _, err := replica.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	if v, err := replica.Do(ctx, "GET", stockKey); err != nil || v != "1" {
		t.Fatalf("the promoted replica's stock = %v (%v), want 1: the unit buyer 1 took never reached it", v, err)
	}
	promoted, err := redis.Open(ctx, redis.Config{URL: "redis://" + replica.Addr}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(promoted.Close)
	arm(t, promoted)
	if err := promoted.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 103}); err != nil {
		t.Errorf("buyer 2, answered sold out before the failover, asks again on the promoted replica: %v, want admitted", err)
	}
}

// TestGroupCommitStopRunsTheRestAlone: Stop waits for the batch in
// flight, and the admission still queued behind it is not lost in a queue
// no lane takes any more: it runs alone, in its caller, and so does every
// admission after Stop. No batch is sent after Stop.
func TestGroupCommitStopRunsTheRestAlone(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, time.Second, 1)
	mustLoad(t, c, onSale(1, 10))
	replica.Pause()
	defer replica.Resume()

	first := make(chan error, 1)
	go func() {
		first <- c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101})
	}()
	testenv.WaitFor(t, defaultWait, "the first admission's script to run", func() bool { return c.stock(t, 1) == 9 })
	// Bounded: a queue that no lane takes any more answers it only when
	// its request ends.
	ctx, cancel := context.WithTimeout(context.Background(), defaultWait)
	defer cancel()
	queued := make(chan error, 1)
	go func() { queued <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102}) }()
	q := c.commits.queue("")
	testenv.WaitFor(t, defaultWait, "the second admission to queue", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.waiting) == 1
	})
	c.commits.Stop()
	c.commits.Stop()
	batches := c.GroupCommitStats().Batches
	replica.Resume()
	if err := <-first; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("the admission in flight at Stop, with the replica stopped = %v, want ErrUnavailable", err)
	}
	if err := <-queued; err != nil {
		t.Errorf("the admission queued at Stop = %v, want admitted (alone, once the replica is back)", err)
	}
	mustAdmit(t, c, 1, 3, 103)
	if got := c.GroupCommitStats().Batches; got != batches {
		t.Errorf("%d batches after Stop, want none", got-batches)
	}
}

// TestGroupCommitWaitReplicas is redis' TestWaitReplicas through the
// batches (there, admissions run alone): an admission the replica has is
// admitted; one it cannot acknowledge (paused) is answered unavailable as
// a final *seckill.Error, never admitted; a duplicate waits too; a
// sold-out answer does not; and the buyer's retry once the replica is
// back gets the same order back as a duplicate.
func TestGroupCommitWaitReplicas(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, time.Second, 0)
	ctx := context.Background()
	mustLoad(t, c, onSale(1, 10))
	mustAdmit(t, c, 1, 1, 101)

	replica.Pause()
	err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("Admit with the replica paused = %v; want a final *seckill.Error of ErrUnavailable with RetryAfter", err)
	}
	if !strings.Contains(e.Message, "GET /api/orders") {
		t.Errorf("the answer's message is %q: want it to send the buyer to GET /api/orders", e.Message)
	}
	err = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 103})
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Errorf("Admit(buyer 2 again) with the replica paused = %v; want ErrUnavailable, not the unconfirmed order", err)
	}
	mustLoad(t, c, onSale(2, 0))
	if err := c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: 1, OrderID: 105}); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("Admit(sold out) with the replica paused = %v, want ErrSoldOut", err)
	}
	replica.Resume()

	testenv.WaitFor(t, 10*time.Second, "the retry confirmed by the replica", func() bool {
		err = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 104})
		return !errors.Is(err, seckill.ErrUnavailable)
	})
	e = errKind(t, err, seckill.ErrDuplicateOrder)
	if e.OrderID != 102 {
		t.Errorf("the retry's order = %d, want 102 (the unconfirmed admission survived)", e.OrderID)
	}
	if got := c.stock(t, 1); got != 8 {
		t.Errorf("stock = %d, want 8", got)
	}
	if st := c.GroupCommitStats(); st.Unconfirmed < 2 {
		t.Errorf("GroupCommitStats = %+v: want the two unconfirmed admissions counted, they went in batches", st)
	}
}

// TestGroupCommitDoesNotStall is redis' TestWaitDoesNotStall through the
// batches: a batch blocked in WAIT holds only its own lane; admissions
// beside it are answered meanwhile, in the master's other lanes.
func TestGroupCommitDoesNotStall(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, 3*time.Second, 0)
	ctx := context.Background()
	mustLoad(t, c, onSale(1, 10))
	mustLoad(t, c, onSale(2, 0))
	replica.Pause()
	defer replica.Resume()

	blocked := make(chan error, 1)
	go func() { blocked <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101}) }()
	testenv.WaitFor(t, defaultWait, "the first admission to run and wait", func() bool { return c.stock(t, 1) == 9 })
	for i := range 20 {
		err := c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: int64(10 + i), OrderID: int64(200 + i)})
		if !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("Admit(sold out) = %v, want ErrSoldOut", err)
		}
		select {
		case err := <-blocked:
			t.Fatalf("the waiting admission returned (%v) before the sold-out answer %d: something stalled behind it", err, i)
		default:
		}
	}
	if err := <-blocked; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("the waiting admission = %v, want ErrUnavailable", err)
	}
	if st := c.GroupCommitStats(); st.Admissions != 21 {
		t.Errorf("GroupCommitStats = %+v: want the 21 admissions in batches", st)
	}
}
