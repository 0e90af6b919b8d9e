package main

// Failover tests: two serve processes sell a voucher on a Redis Cluster or
// a Sentinel-managed master of the test's own, and the voucher's master is
// killed with SIGKILL in the middle of the sale; its replica takes over,
// with all it had received or, when it lagged, without the last second.
// The sale goes on to the end and drains, and the tests check what
// docs/guarantees.md promises with --redis-wait-replicas (an admission
// answered 200 only once a replica has it) and measure what is lost
// without it.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/orderid"
)

// The sale of every failover test: a stock of 2,000 for 6,000 buyers, 600
// of whom press "buy" a second time; the master dies once 500 were
// answered 200, so that most of the stock is sold after the failover. A
// lag lasts a second, or less if the stock runs low: at least 500 units
// are left to sell after the failover (without a wait, and with the
// workers behind, 2,000 admissions can take a second). The seven sales
// (six on a Cluster, one on Sentinel), two at a time on two cores, take
// about a minute and a quarter with the race detector; each starts its own
// deployment, since it kills a node.
const (
	failoverStock   = 2_000
	failoverBuyers  = 6_000
	failoverRepeats = 600
	failoverKillAt  = 500
	failoverLeft    = 500
	// failoverLag is how long admissions go on while the replica receives
	// nothing, in the lagging cases: the deliberate length of the lag.
	failoverLag = time.Second
)

// failoverCase is one failover sale.
type failoverCase struct {
	// wait is --redis-wait-replicas.
	wait int
	// lagging: the replica receives nothing for failoverLag before the
	// master dies.
	lagging bool
	// workersBehind: the database stops answering before the lag, so that
	// the workers fall behind and the orders of the lag are in no
	// instance's hands when the master dies (the database comes back just
	// after). With lagging only.
	workersBehind bool
}

// failoverDeployment is what a failover test does to its Redis deployment,
// a Cluster or Sentinel.
type failoverDeployment struct {
	kind string // "cluster", "sentinel"
	url  string // serve's SECKILL_REDIS_URL
	// nodes returns the master that holds the voucher's keys and its
	// replica.
	nodes func(t *testing.T, stockKey string) (master, replica *faults.RedisProc)
	// promoted waits until the deployment has failed over from old, killed,
	// and returns the node that now holds the voucher's keys.
	promoted func(t *testing.T, old *faults.RedisProc, stockKey string) *faults.RedisProc
}

func clusterDeployment(cl *faults.Cluster) failoverDeployment {
	return failoverDeployment{
		kind: "cluster",
		url:  cl.URL,
		nodes: func(t *testing.T, key string) (*faults.RedisProc, *faults.RedisProc) {
			m := cl.MasterOf(t, key)
			return m, cl.ReplicaOf(t, m)
		},
		promoted: func(t *testing.T, _ *faults.RedisProc, key string) *faults.RedisProc {
			cl.WaitHealthy(t, 30*time.Second)
			return cl.MasterOf(t, key)
		},
	}
}

func sentinelDeployment(s *faults.Sentinel) failoverDeployment {
	return failoverDeployment{
		kind: "sentinel",
		url:  s.URL,
		nodes: func(t *testing.T, _ string) (*faults.RedisProc, *faults.RedisProc) {
			m := s.Proc(s.CurrentMaster(t))
			if m == s.Master {
				return m, s.Replica
			}
			return m, s.Master
		},
		promoted: func(t *testing.T, old *faults.RedisProc, _ string) *faults.RedisProc {
			return s.Proc(s.WaitFailover(t, old.Addr, 30*time.Second))
		},
	}
}

// TestClusterMasterFailover kills the master of a voucher's slot with
// SIGKILL during a sale on a Redis Cluster, with a replica that has every
// write (in-sync) or one that received nothing for the last second
// (lagging: paused, its replication link cut), and with and without
// --redis-wait-replicas=1. The Cluster promotes the replica; the killed
// node comes back empty as the new master's replica; the sale goes on to
// the end on both instances.
//
// It proves, in every case: the failover is detected (the fence) and the
// open voucher rebuilt from the database before admitting again; no more
// than the stock is sold and the database's stock balances; no buyer has
// two orders in the database; `seckill reconcile` agrees. With wait=1 it
// proves what the setting promises: every order answered 200 ends created
// (none lost, none failed), no more buyers are answered 200 than the stock,
// and an order a buyer is told of by duplicate_order is as safe as one
// answered 200, even when the promoted replica lagged and the workers had
// not taken the lag's orders when the master died (workers-behind: the
// database paused from just before the lag to the kill). With wait=0 it
// measures (and only logs) the orders answered 200 and lost, those failed,
// and the buyers answered 200 beyond the stock: few while the workers keep
// up (the rebuild finds the lag's orders in the database), most of the
// lag's when they are behind.
func TestClusterMasterFailover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		failoverCase
	}{
		{"in-sync_wait=1", failoverCase{wait: 1}},
		{"in-sync_wait=0", failoverCase{wait: 0}},
		{"lagging_wait=1", failoverCase{wait: 1, lagging: true}},
		{"lagging_wait=0", failoverCase{wait: 0, lagging: true}},
		{"lagging_workers-behind_wait=1", failoverCase{wait: 1, lagging: true, workersBehind: true}},
		{"lagging_workers-behind_wait=0", failoverCase{wait: 0, lagging: true, workersBehind: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runFailover(t, clusterDeployment(faults.StartCluster(t)), c.failoverCase)
		})
	}
}

// TestSentinelMasterFailover is TestClusterMasterFailover's in-sync case
// with --redis-wait-replicas=1 on a master and replica that Redis Sentinel
// fails over: the master is killed with SIGKILL mid-sale, Sentinel
// promotes the replica, the killed node comes back and Sentinel makes it
// the new master's replica. It proves the same: the failover is detected
// and the voucher rebuilt; every order answered 200 ends created; no more
// buyers answered 200 than the stock; no oversell, one order per buyer in
// the database; reconcile agrees.
func TestSentinelMasterFailover(t *testing.T) {
	t.Parallel()
	runFailover(t, sentinelDeployment(faults.StartSentinel(t)), failoverCase{wait: 1})
}

// runFailover runs one failover sale and its checks.
func runFailover(t *testing.T, dep failoverDeployment, c failoverCase) {
	prefix := "t" + testenv.Random()
	dbURL := testenv.MySQLURL(t)
	env := serveEnv(dep.url, prefix, dbURL)
	env["SECKILL_RATE_USER"] = "0" // buyers retry 503s at once
	env["SECKILL_REDIS_WAIT_REPLICAS"] = strconv.Itoa(c.wait)
	var proxy *faults.Proxy
	if c.workersBehind {
		// The serves reach the database through a proxy the test pauses;
		// two slots each, so that the workers soon hold all they can.
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy = faults.StartProxy(t, u.Host)
		u.Host = proxy.Addr()
		env["SECKILL_DB_URL"] = u.String()
		env["SECKILL_WORKERS"], env["SECKILL_WORKERS_MAX"] = "2", "2"
	}
	db := openDatabase(t, dbURL)
	rv := openRedisView(t, dep.url, prefix)
	client := newClient(t)
	ctx := context.Background()

	s1 := startServe(t, "serve 1", env)
	voucher := createVoucher(t, client, s1.url, failoverStock)
	s2 := startServe(t, "serve 2", env)
	stockKey := rv.key(voucher, "stock")
	master, replica := dep.nodes(t, stockKey)
	t.Logf("%s, %+v: voucher %d on master %s, replica %s", dep.kind, c, voucher, master.Addr, replica.Addr)

	users := buyers(failoverBuyers)
	l := newLoad(t, client, voucher, users)
	l.setTargets(s1.url, s2.url)
	start := time.Now()
	l.start(t, shuffledAttempts(users, failoverRepeats), 16, 2*time.Millisecond, 3*time.Minute)
	l.waitCount(t, "200", failoverKillAt, time.Minute)
	rebuiltBefore := s1.count(rebuildAll) + s2.count(rebuildAll)

	if c.workersBehind {
		proxy.Pause()
		// The workers' slots fill with batches the paused database does
		// not take, and new orders wait in the stream, read by no one.
		waitFor(t, 30*time.Second, func() (bool, string) {
			st, err := rv.stream(ctx, voucher)
			return err == nil && st.undelivered >= 100,
				fmt.Sprintf("the stream: %d pending, %d undelivered (%v); answers %v", st.pending, st.undelivered, err, l.stats())
		})
	}
	var masterOffset int64
	var lagDups map[int64]int64 // order → buyer, told by duplicate_order during the lag
	if c.lagging {
		// The replica stops, and its link is cut, so that it receives
		// nothing more: a paused replica alone would apply on resuming
		// what the kernel kept for it in its socket.
		replica.Pause()
		if _, err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
			t.Fatalf("cut the replica's link: %v", err)
		}
		before := l.stats()
		_, dupsBefore := l.orders()
		lagged := lag(l, failoverLag, failoverStock-failoverLeft)
		_, dupsAfter := l.orders()
		lagDups = map[int64]int64{}
		for id, u := range dupsAfter {
			if _, ok := dupsBefore[id]; !ok {
				lagDups[id] = u
			}
		}
		t.Logf("answers while the replica lagged (%v): %v", lagged.Round(time.Millisecond), diff(before, l.stats()))
		masterOffset = replOffset(t, master, "master_repl_offset")
	}
	atKill := l.stats()
	if atKill["200"] >= failoverStock {
		t.Fatalf("the sale sold out before the master was killed (answers %v): nothing would be admitted after the failover; make the stock larger", atKill)
	}
	master.Kill()
	killedAt := time.Now()
	if c.lagging {
		replica.Resume()
	}
	if c.workersBehind {
		proxy.Resume()
	}
	recovery := watchRecovery(t, l, killedAt, 2*time.Minute)

	promoted := dep.promoted(t, master, stockKey)
	failedOver := time.Since(killedAt)
	if promoted != replica {
		t.Fatalf("%s took over the voucher's keys, not its master's replica %s", promoted.Addr, replica.Addr)
	}
	if c.lagging {
		// A promoted replica's second_repl_offset is one past the offset
		// it had of the old master's history.
		had := replOffset(t, promoted, "second_repl_offset") - 1
		t.Logf("the promoted replica lacks %d bytes of the master's replication stream (had %d of %d)", masterOffset-had, had, masterOffset)
		if had >= masterOffset {
			t.Errorf("the replica did not lag: it had %d bytes of the master's %d", had, masterOffset)
		}
	}
	// The killed node comes back, empty, as the new master's replica: with
	// wait=1 no admission is answered 200 before.
	master.Restart(t)
	if dep.kind == "sentinel" {
		// Sentinel turns a former master that comes back into a replica
		// itself, but only after seconds (about 10 here, once over a
		// minute): do what an operator would, and the sale goes on.
		if _, err := master.Do(context.Background(), "REPLICAOF", "127.0.0.1", strconv.Itoa(promoted.Port)); err != nil {
			t.Fatalf("make the restarted node a replica of %s: %v", promoted.Addr, err)
		}
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		info := master.Info("replication")
		ok := infoValue(info, "role") == "slave" && infoValue(info, "master_port") == strconv.Itoa(promoted.Port) &&
			infoValue(info, "master_link_status") == "up"
		return ok, fmt.Sprintf("the restarted node: role %s of port %s, link %s", infoValue(info, "role"),
			infoValue(info, "master_port"), infoValue(info, "master_link_status"))
	})
	replicated := time.Since(killedAt)

	r := <-recovery
	if r.took == 0 {
		t.Fatalf("no order made after the kill was answered 200 within %v: answers %v", 2*time.Minute, l.stats())
	}
	t.Logf("the replica was promoted %v after the kill, the killed node replicated it %v after; the first 200 came %v after the kill (time to recover); answers meanwhile: %v",
		failedOver.Round(time.Millisecond), replicated.Round(time.Millisecond), r.took.Round(time.Millisecond), diff(atKill, r.stats))
	l.wait()
	took := waitDrained(t, db, rv, voucher, nil, time.Minute)
	t.Logf("the sale took %v; drained %v after the load ended", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
	if n := s1.count(rebuildAll) + s2.count(rebuildAll) - rebuiltBefore; n == 0 {
		t.Errorf("no serve logged a line matching %s after the failover: it was not detected", rebuildAll)
	}
	for _, s := range []*server{s1, s2} {
		t.Logf("%s logged: %d checks that rebuilt every voucher, %d voucher rebuilds, %d lost streams, %d batches lost with their stream, %d dead letters",
			s.name, s.count(rebuildAll), s.count(`"msg":"voucher rebuilt in Redis`), s.count(`"msg":"order stream lost`),
			s.count(`"msg":"order messages lost with their stream`), s.count(`"msg":"order message dead-lettered`))
	}

	checkFailover(t, l, db, rv, env, voucher, c.wait, lagDups)
}

// checkFailover checks and reports the sale after the drain. lagDups are
// the orders buyers were told of by duplicate_order while the replica
// lagged.
func checkFailover(t *testing.T, l *load, db *database, rv *redisView, env environ, voucher int64, wait int, lagDups map[int64]int64) {
	t.Helper()
	l.checkAnswers(t)
	sale := readSale(t, db, rv, voucher)
	checkDatabase(t, db, sale, voucher)
	checkAgreement(t, env, sale)

	// Orders not created after the drain: failed, or lost (not in the
	// database at all).
	notCreated := func(orders map[int64]int64) (lost, failed []int64) {
		for id := range orders {
			if _, ok := sale.created[id]; ok {
				continue
			}
			if _, ok := sale.failed[id]; ok {
				failed = append(failed, id)
			} else {
				lost = append(lost, id)
			}
		}
		slices.Sort(lost)
		slices.Sort(failed)
		return lost, failed
	}
	accepted, dups := l.orders()
	lost, failed := notCreated(accepted)
	dupsLost, dupsFailed := notCreated(dups)
	lagLost, _ := notCreated(lagDups)
	l.mu.Lock()
	buyers200, twice := len(l.byUser), 0
	for _, ids := range l.byUser {
		if len(ids) > 1 {
			twice++
		}
	}
	l.mu.Unlock()
	beyond := max(0, buyers200-int(sale.initial))
	t.Logf("FIGURES wait=%d: answers %v; %d orders answered 200 to %d buyers (%d beyond the stock of %d, %d buyers answered 200 twice): "+
		"%d lost (not in the database), %d failed; of %d orders named by duplicate_order, %d lost and %d failed (of the %d named during the lag, %d lost); "+
		"database: %d orders, %d failed, stock %d/%d; Redis remaining %d, %d dead letters",
		wait, l.stats(), len(accepted), buyers200, beyond, sale.initial, twice, len(lost), len(failed),
		len(dups), len(dupsLost), len(dupsFailed), len(lagDups), len(lagLost),
		len(sale.created), len(sale.failed), sale.stock, sale.initial, sale.remaining, sale.deadLetters)
	for _, id := range failed {
		t.Logf("order %d of buyer %d, answered 200, is %s", id, accepted[id], failedReason(t, db, id))
	}
	if wait == 0 {
		return
	}
	// With a replica's acknowledgement before every 200, the failover
	// loses nothing the buyers were answered 200 with.
	if len(lost) > 0 || len(failed) > 0 {
		t.Errorf("wait=%d: of %d orders answered 200, %d are lost (not in the database: %v) and %d failed (%v); want every one created",
			wait, len(accepted), len(lost), lost[:min(10, len(lost))], len(failed), failed[:min(10, len(failed))])
	}
	if buyers200 > int(sale.initial) {
		t.Errorf("wait=%d: %d buyers were answered 200 for a stock of %d", wait, buyers200, sale.initial)
	}
	// duplicate_order tells the buyer they hold the order (G5): it must be
	// as safe as a 200.
	if len(dupsLost) > 0 || len(dupsFailed) > 0 {
		t.Errorf("wait=%d: of %d orders buyers were told of by duplicate_order, %d are lost (%d of them told during the lag: %v) and %d failed (%v); want every one created",
			wait, len(dups), len(dupsLost), len(lagLost), lagLost[:min(10, len(lagLost))], len(dupsFailed), dupsFailed[:min(10, len(dupsFailed))])
	}
	l.checkOnePerBuyer(t)
}

// lag lets the sale go on for d, the deliberate length of a lag, or less
// if the load's 200s reach most first, and returns how long it went on.
func lag(l *load, d time.Duration, most int) time.Duration {
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for l.stats()["200"] < most {
		select {
		case <-l.progress:
		case <-timer.C:
			return time.Since(start)
		}
	}
	return time.Since(start)
}

// recovery is when the first 200 after a kill came, and the answers until
// then.
type recovery struct {
	took  time.Duration // 0: none came in time
	stats map[string]int
}

// watchRecovery waits, on a goroutine of its own (it takes the load's
// progress signals), for the first 200 to an order made after since, so
// admitted after it, and sends how long after since it came. It gives up
// after timeout, or when the test ends.
func watchRecovery(t *testing.T, l *load, since time.Time, timeout time.Duration) <-chan recovery {
	ch := make(chan recovery, 1)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		seen := -1
		for {
			if n := l.stats()["200"]; n != seen {
				seen = n
				accepted, _ := l.orders()
				for id := range accepted {
					if orderid.Time(id).After(since) {
						ch <- recovery{took: time.Since(since), stats: l.stats()}
						return
					}
				}
			}
			select {
			case <-l.progress:
			case <-ctx.Done():
				ch <- recovery{stats: l.stats()}
				return
			}
		}
	}()
	return ch
}

// replOffset reads a replication offset of INFO replication.
func replOffset(t *testing.T, p *faults.RedisProc, field string) int64 {
	t.Helper()
	info := p.Info("replication")
	n, err := strconv.ParseInt(infoValue(info, field), 10, 64)
	if err != nil {
		t.Fatalf("%s: INFO replication %s: %v\n%s", p.Addr, field, err, info)
	}
	return n
}

// infoValue returns the value of one "name:value" line of INFO output.
func infoValue(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
