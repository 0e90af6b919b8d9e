package main

// A network partition: one serve of three is cut off from Redis and the
// database while it holds orders it read and did not persist, and the test
// still reaches it over HTTP.

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/orderid"
	"github.com/seckill/seckill/redis"
)

// The partition test's sale: a stock of 2,000 for 8,000 buyers, 2,000 of
// whom press "buy" a second time; a claim lease of 3s.
const (
	partStock   = 2000
	partBuyers  = 8000
	partRepeats = 2000
	partLease   = 3 * time.Second
	// nodeValid is how long an instance goes on making order ids after
	// its node lease was last confirmed (orderid.Lease's Valid;
	// docs/design/orderids.md, Order ids): an instance cut off from Redis makes
	// none later than this after the cut.
	nodeValid = 5 * time.Second
)

// TestPartitionedInstance runs three serve processes on one Redis Cluster
// and database, one of them in a network namespace of its own, and during
// a sale cuts that one off from Redis and the database (not from its
// buyers) while its workers hold orders they read and did not persist,
// for longer than the claim lease; then heals the partition.
//
// While cut off the instance never answers 200 and makes no order id
// once its node lease can no longer be confirmed; the two others take over
// the orders it held and write them before the partition heals; healed,
// it answers and persists again; and at the end every order answered is
// created, once, within the stock, and `seckill reconcile` agrees.
func TestPartitionedInstance(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ns := faults.NewNetns(t)
	if !testing.Short() {
		// Build the binary while the services start (seckillBinary then
		// waits for it); a test that ends first, skipped say, waits too,
		// so that the build does not outlive it.
		building := make(chan struct{})
		go func() {
			defer close(building)
			built.once.Do(func() { built.path, built.err = buildBinary() })
		}()
		t.Cleanup(func() { <-building })
	}
	// The nodes listen and announce on the host's end of the services
	// link, which the namespace reaches and the host does too, cut or not;
	// and on loopback, where StartCluster asks them. Without a password,
	// only protected mode off lets a node answer on a non-loopback
	// address: to its replica and to the namespace.
	cluster := faults.StartCluster(t, "--bind", "127.0.0.1 "+ns.HostServices,
		"--cluster-announce-ip", ns.HostServices, "--protected-mode", "no")
	redisURL := strings.ReplaceAll(cluster.URL, "127.0.0.1:", ns.HostServices+":")
	prefix := "t" + testenv.Random()
	mysqlURL := testenv.MySQLURL(t)
	u, err := url.Parse(mysqlURL)
	if err != nil {
		t.Fatal(err)
	}
	viaLink := *u
	viaLink.Host = ns.StartProxy(t, u.Host).Addr()

	env := serveEnv(redisURL, prefix, mysqlURL)
	env["SECKILL_CLAIM_LEASE"] = partLease.String()
	cutEnv := maps.Clone(env)
	cutEnv["SECKILL_DB_URL"] = viaLink.String()
	cutEnv["SECKILL_ADDR"] = ns.NsClients + ":0"
	cutName := "partitioned-" + testenv.Random()
	cutEnv["SECKILL_CONSUMER"] = cutName
	db := openDatabase(t, mysqlURL)
	rv := openRedisView(t, redisURL, prefix)
	client := newClient(t)

	bin := seckillBinary(t)
	inNs := ns.Command(bin, "serve")
	procs := []*proc{
		startProc(t, "serve (host 1)", childEnv(env), bin, "serve"),
		startProc(t, "serve (host 2)", childEnv(env), bin, "serve"),
		startProc(t, "serve (partitioned)", childEnv(cutEnv), inNs.Path, inNs.Args[1:]...),
	}
	servers := make([]*server, len(procs))
	for i, p := range procs {
		m := p.waitOutput(t, `"msg":"seckill listening","url":"(http://[^"]+)"`, 30*time.Second)
		servers[i] = &server{proc: p, url: m[1]}
	}
	h1, h2, cut := servers[0], servers[1], servers[2]
	voucher := createVoucher(t, client, h1.url, partStock)
	waitFor(t, 15*time.Second, func() (bool, string) {
		names, err := rv.consumerNames(context.Background(), voucher)
		ok := err == nil && h1.consumer(names) != "" && h2.consumer(names) != "" && slices.Contains(names, cutName)
		return ok, fmt.Sprintf("consumers %v, %v", names, err)
	})
	t.Logf("three serves up, the sale open, %v after the start", time.Since(began).Round(time.Millisecond))

	users := buyers(partBuyers)
	l := &spreadLoad{load: newLoad(t, client, voucher, users), answers: map[string][]answer{}}
	// Briskly until the cut, so that the partitioned serve's workers are
	// busy; slowly while it is cut off, so that stock is left to sell when
	// it heals; at full speed after.
	l.pace.Store(int64(20 * time.Millisecond))
	// Two thirds of the buyers go to the host's serves, a third to the
	// partitioned one; each pool retries on its own targets, so buyers
	// waiting on the partitioned one do not hold up the others.
	l.start(t, shuffledAttempts(users, partRepeats), 90*time.Second,
		pool{workers: 8, targets: []string{h1.url, h2.url}},
		pool{workers: 4, targets: []string{cut.url}})
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := l.count(cut.url, "200", time.Time{}, time.Time{})
		return n >= 50, fmt.Sprintf("the partitioned serve answered 200 %d times", n)
	})

	// Cut when its workers hold orders; a batch may be acknowledged
	// between the look and the cut, then heal and try again.
	var (
		cuts []window // every cut, to judge the answers given meanwhile
		held []int64
	)
	for try := 1; len(held) == 0; try++ {
		if try > 10 {
			t.Fatalf("the partitioned serve held no order when cut off, %d times", try-1)
		}
		waitHolding(t, rv, voucher, cutName, 15*time.Second)
		ns.Cut(t)
		w := window{cut: time.Now()}
		l.pace.Store(int64(100 * time.Millisecond))
		if held, err = rv.pendingOf(context.Background(), voucher, cutName); err != nil {
			t.Fatalf("orders the partitioned serve holds: %v", err)
		}
		if len(held) == 0 {
			w.healing = time.Now()
			ns.Heal(t)
			l.pace.Store(int64(20 * time.Millisecond))
			t.Logf("cut %d: the partitioned serve had acknowledged its orders just before; healed", try)
		}
		cuts = append(cuts, w)
	}
	cutAt := cuts[len(cuts)-1].cut
	cutPersisted, err := metricValue(client, cut.url, "seckill_orders_persisted_total")
	if err != nil {
		t.Fatalf("the partitioned serve's metrics, cut off: %v", err)
	}
	atCut := l.stats()

	// The others take its orders over after the lease, and write them.
	// The takeover waits for the database to end the cut-off session
	// (wait_timeout, mysql/store.go) and for the reclaimers' transactions,
	// queued on the voucher's row lock meanwhile, to pass one by one.
	reclaimedAt := waitReclaimed(t, db, rv, voucher, cutName, held, 60*time.Second)
	// Buyers go on asking it while it is cut off: its answers then are
	// what the test checks.
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := l.count(cut.url, "", cutAt, time.Now())
		return n >= 4, fmt.Sprintf("the partitioned serve answered %d requests sent while it is cut off", n)
	})
	if d := time.Since(cutAt); d <= partLease {
		t.Fatalf("the cut lasted %v, not longer than the lease %v", d, partLease)
	}
	w := &cuts[len(cuts)-1]
	w.healing = time.Now()
	ns.Heal(t)
	healed := time.Now()
	duringCut := diff(atCut, l.stats())
	remainingAtHeal, _, err := rv.remaining(context.Background(), voucher)
	if err != nil {
		t.Fatal(err)
	}
	// Slowly still, until it is seen to rejoin: its readers come back a
	// few seconds after the heal (a new connection, a read's backoff), and
	// at full speed the host's serves could sell what is left before then.
	// Its consumer only shows in the group when it reads new messages, so
	// with none left its return could not be seen (1 run in 10 failed so).
	l.pace.Store(int64(250 * time.Millisecond))

	// It rejoins: it answers buyers again, its workers read the stream
	// again and, while there is stock to sell, persist.
	var rejoined time.Time
	waitFor(t, 30*time.Second, func() (bool, string) {
		first, ok := l.first(cut.url, healed, "200", "sold_out", "duplicate_order")
		rejoined = first
		return ok, fmt.Sprintf("the partitioned serve answered, since the heal: %v", l.codes(cut.url, healed, time.Now()))
	})
	// A reader only touches the group when the stream has new messages:
	// with none left to sell, its return is not to be seen.
	if remainingAtHeal > 100 {
		waitFor(t, 30*time.Second, func() (bool, string) {
			idle, ok, err := consumerIdle(context.Background(), rv, voucher, cutName)
			return err == nil && ok && idle < time.Since(healed), fmt.Sprintf("its consumer: idle %v, in the group %v (%v)", idle, ok, err)
		})
		waitFor(t, 30*time.Second, func() (bool, string) {
			n, err := metricValue(client, cut.url, "seckill_orders_persisted_total")
			return err == nil && n > cutPersisted, fmt.Sprintf("it has persisted %v orders, %v when cut off (%v)", n, cutPersisted, err)
		})
	} else {
		t.Logf("only %d units were left when the partition healed: its workers' return is not checked", remainingAtHeal)
	}
	l.pace.Store(0)
	l.waitDone(t, 90*time.Second)

	accepted, dups := l.orders()
	drain := waitDrained(t, db, rv, voucher, merge(accepted, dups), 40*time.Second)
	s := checkNothingLost(t, l.load, h1.url, db, rv, env)
	for _, id := range held {
		if _, ok := s.created[id]; !ok {
			t.Errorf("order %d, held by the partitioned serve, is not in the database", id)
		}
	}
	if n := h1.count(`"msg":"reclaimed order messages`) + h2.count(`"msg":"reclaimed order messages`); n == 0 {
		t.Errorf("the host's serves logged no reclaimed order messages")
	}

	// Its answers: never 200 to a request sent while it was cut off and
	// answered before the heal; order ids only while its lease held.
	nodes := map[int]bool{}
	for _, a := range l.of(cut.url) {
		if a.what == "200" {
			nodes[orderid.NodeOf(a.order)] = true
		}
		for _, c := range cuts {
			if a.what == "200" && a.sent.After(c.cut) && a.got.Before(c.healing) {
				t.Errorf("cut off from %v to %v, the partitioned serve answered 200 (order %d) to a request sent at %v, at %v",
					c.cut.Format(time.StampMilli), c.healing.Format(time.StampMilli), a.order, a.sent.Format(time.StampMilli), a.got.Format(time.StampMilli))
			}
		}
	}
	every := merge(merge(accepted, dups), merge(s.created, s.failed))
	for id := range every {
		if !nodes[orderid.NodeOf(id)] {
			continue
		}
		made := orderid.Time(id)
		for _, c := range cuts {
			// An id's time is truncated to the millisecond.
			if !made.Before(c.cut.Add(nodeValid)) && made.Before(c.healing.Truncate(time.Millisecond)) {
				t.Errorf("order %d was made by the partitioned serve (node %d) at %v, %v into a cut that lasted %v: after its node lease could be confirmed",
					id, orderid.NodeOf(id), made.Format(time.StampMilli), made.Sub(c.cut).Round(time.Millisecond), c.healing.Sub(c.cut).Round(time.Millisecond))
			}
		}
	}

	for _, s := range []*server{h1, h2, cut} {
		t.Logf("%s answered %v", s.name, l.codes(s.url, time.Time{}, time.Time{}))
	}
	t.Logf("cut off %v (%d cuts) holding %d orders; they were written by the others %v after the cut; while cut off it answered %v, all serves %v",
		w.healing.Sub(cutAt).Round(time.Millisecond), len(cuts), len(held), reclaimedAt.Sub(cutAt).Round(time.Millisecond),
		l.codes(cut.url, cutAt, w.healing), duringCut)
	first200 := "none (sold out)"
	if at, ok := l.first(cut.url, healed, "200"); ok {
		first200 = at.Sub(healed).Round(time.Millisecond).String()
	}
	t.Logf("healed with %d units left: it answered again after %v, its first 200 after %v, and since the heal %v; the host's serves reclaimed %d batches; drained %v after the load; the test took %v",
		remainingAtHeal, rejoined.Sub(healed).Round(time.Millisecond), first200, l.codes(cut.url, healed, time.Time{}),
		h1.count(`"msg":"reclaimed order messages`)+h2.count(`"msg":"reclaimed order messages`),
		drain.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// window is one cut: cut is when the link was down, healing when the test
// began to bring it up.
type window struct{ cut, healing time.Time }

// answer is one answer a target gave, with when it was asked and
// answered.
type answer struct {
	sent, got time.Time
	what      string // as load counts: "200", "sold_out", "503", "conn_error", …
	order     int64  // of a 200 or a duplicate_order
}

// pool is a group of a load's workers with its own targets: a request that
// is to be sent again goes to the pool's next target.
type pool struct {
	workers int
	targets []string
}

// spreadLoad is a load whose workers are split into pools, each with its
// targets, and which keeps every answer per target with its times. It
// counts in the load it wraps, so that the load's checks apply.
type spreadLoad struct {
	*load
	pace atomic.Int64 // a worker's pause between buyers, in nanoseconds
	done chan struct{}

	amu     sync.Mutex
	answers map[string][]answer // target → its answers
}

// start sends the attempts with the pools' workers and returns at once;
// the load gives up after timeout and stops when the test ends.
func (l *spreadLoad) start(t *testing.T, attempts []int64, timeout time.Duration, pools ...pool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(func() {
		cancel()
		l.wg.Wait()
	})
	for _, p := range pools {
		for w := range p.workers {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				next := w
				for {
					i := l.next.Add(1) - 1
					if int(i) >= len(attempts) {
						return
					}
					next = l.buy(ctx, attempts[i], p.targets, next)
					if pace := time.Duration(l.pace.Load()); pace > 0 && !sleep(ctx, pace) {
						return
					}
				}
			}()
		}
	}
	l.done = make(chan struct{})
	go func() {
		l.wg.Wait()
		close(l.done)
	}()
}

// waitDone waits for every attempt to be answered.
func (l *spreadLoad) waitDone(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(timeout):
		t.Fatalf("the load did not end within %v: %v", timeout, l.stats())
	}
}

// buy asks for the buyer, starting with targets[next], until an answer
// that is final, as load.buy does; it returns the index of the target to
// start the next buyer with.
func (l *spreadLoad) buy(ctx context.Context, user int64, targets []string, next int) int {
	path := fmt.Sprintf("/api/vouchers/%d/seckill", l.voucher)
	for {
		target := targets[next%len(targets)]
		next++
		a := answer{sent: time.Now()}
		status, body, err := do(ctx, l.client, "POST", target+path, l.tokens[user], "")
		a.got = time.Now()
		code, _ := body["code"].(string)
		var f func()
		final := true
		switch {
		case err != nil && status == 0:
			if ctx.Err() != nil {
				a.what = "gave_up"
			} else {
				a.what, final = "conn_error", false
			}
		case err != nil:
			a.what = "unexpected"
			f = func() { l.unexpected = append(l.unexpected, err.Error()) }
		case status == 200:
			id, perr := strconv.ParseInt(fmt.Sprint(body["orderId"]), 10, 64)
			if perr != nil || body["status"] != "pending" {
				a.what = "unexpected"
				f = func() { l.unexpected = append(l.unexpected, fmt.Sprintf("200 %v", body)) }
				break
			}
			a.what, a.order = "200", id
			f = func() {
				l.accepted[id] = user
				l.byUser[user] = append(l.byUser[user], id)
			}
		case status == 409 && code == "sold_out":
			a.what = code
		case status == 409 && code == "duplicate_order":
			id, perr := strconv.ParseInt(fmt.Sprint(body["orderId"]), 10, 64)
			if perr != nil {
				a.what = "unexpected"
				f = func() { l.unexpected = append(l.unexpected, fmt.Sprintf("409 %v", body)) }
				break
			}
			a.what, a.order = code, id
			f = func() { l.dups[id] = user }
		case status == 503 || status == 429:
			a.what, final = strconv.Itoa(status), false
		default:
			a.what = "unexpected"
			f = func() { l.unexpected = append(l.unexpected, fmt.Sprintf("%d %v", status, body)) }
		}
		l.amu.Lock()
		l.answers[target] = append(l.answers[target], a)
		l.amu.Unlock()
		l.record(a.what, f)
		if final || a.what == "gave_up" {
			return next
		}
		// No answer, or "try again": the buyer presses again shortly.
		if !sleep(ctx, 20*time.Millisecond) {
			l.record("gave_up", nil)
			return next
		}
	}
}

// of returns a copy of the target's answers.
func (l *spreadLoad) of(target string) []answer {
	l.amu.Lock()
	defer l.amu.Unlock()
	return slices.Clone(l.answers[target])
}

// codes counts the target's answers by kind, of the requests sent after
// from and answered before to (either zero: no bound).
func (l *spreadLoad) codes(target string, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, a := range l.of(target) {
		if (from.IsZero() || a.sent.After(from)) && (to.IsZero() || a.got.Before(to)) {
			out[a.what]++
		}
	}
	return out
}

// count is how many answers of the kind ("" for any) the target gave to
// requests sent after from and answered before to (either zero: no bound).
func (l *spreadLoad) count(target, what string, from, to time.Time) int {
	n := 0
	for k, v := range l.codes(target, from, to) {
		if what == "" || k == what {
			n += v
		}
	}
	return n
}

// first returns when the target first answered one of whats to a request
// sent after from.
func (l *spreadLoad) first(target string, from time.Time, whats ...string) (time.Time, bool) {
	var at time.Time
	for _, a := range l.of(target) {
		if a.sent.After(from) && slices.Contains(whats, a.what) && (at.IsZero() || a.got.Before(at)) {
			at = a.got
		}
	}
	return at, !at.IsZero()
}

// waitReclaimed waits until the consumer holds nothing of the voucher's
// stream and every order of held is created, and returns when. When they
// are not in time, it says which of the database's transactions hold them
// up.
func waitReclaimed(t *testing.T, db *database, rv *redisView, voucher int64, consumer string, held []int64, timeout time.Duration) time.Time {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		var why string
		created, _, err := db.orders(ctx, voucher)
		st, serr := rv.stream(ctx, voucher)
		switch {
		case err != nil:
			why = err.Error()
		case serr != nil:
			why = serr.Error()
		default:
			missing := 0
			for _, id := range held {
				if _, ok := created[id]; !ok {
					missing++
				}
			}
			if missing == 0 && st.consumers[consumer] == 0 {
				return time.Now()
			}
			why = fmt.Sprintf("%d of the %d orders it held are not created, it holds %d", missing, len(held), st.consumers[consumer])
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orders the partitioned serve held were not taken over and written within %v: %s; in the database, %s",
				timeout, why, lockHolders(db))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHolding waits until the consumer holds messages of the voucher's
// stream unacknowledged. It looks every few milliseconds: a worker that
// keeps up holds a batch only while it writes it.
func waitHolding(t *testing.T, rv *redisView, voucher int64, consumer string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := pendingCount(context.Background(), rv, voucher, consumer)
		if err != nil {
			t.Fatalf("orders %s holds: %v", consumer, err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s held no order of voucher %d within %v", consumer, voucher, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pendingCount returns how many messages of the voucher's stream the
// consumer holds unacknowledged.
func pendingCount(ctx context.Context, rv *redisView, voucher int64, consumer string) (int, error) {
	res, err := rv.c.Do(ctx, rv.c.B().Xpending().Key(rv.key(voucher, "orders")).Group(redis.Group).
		Start("-").End("+").Count(1000).Consumer(consumer).Build()).ToArray()
	return len(res), err
}

// consumerIdle returns how long ago the consumer last read the voucher's
// stream or claimed from it, and whether it is in the group.
func consumerIdle(ctx context.Context, rv *redisView, voucher int64, consumer string) (time.Duration, bool, error) {
	cs, err := rv.c.Do(ctx, rv.c.B().XinfoConsumers().Key(rv.key(voucher, "orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		return 0, false, err
	}
	for _, c := range cs {
		m, err := c.AsMap()
		if err != nil {
			return 0, false, err
		}
		nameMsg, idleMsg := m["name"], m["idle"]
		if name, _ := nameMsg.ToString(); name != consumer {
			continue
		}
		idle, err := idleMsg.AsInt64()
		return time.Duration(idle) * time.Millisecond, true, err
	}
	return 0, false, nil
}

// metricValue reads one unlabelled metric from a serve's /metrics.
func metricValue(c *http.Client, base, name string) (float64, error) {
	res, err := c.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s/metrics has no %s (status %d)", base, name, res.StatusCode)
}

// lockHolders describes the transactions open on the test's database, for
// a wait that failed: how many wait for a row lock, and the sessions idle
// in a transaction, which hold their locks until they end. A transaction
// of the partitioned serve's, cut off between two statements, is one such:
// the database keeps it open until it drops the session.
func lockHolders(db *database) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := db.query(ctx, `SELECT t.trx_mysql_thread_id, p.host, t.trx_state, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()),
  p.time, t.trx_query IS NULL, t.trx_rows_locked
FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
WHERE p.db = DATABASE() ORDER BY t.trx_started`)
	if err != nil {
		return "transactions: " + err.Error()
	}
	defer rows.Close()
	waiting := 0
	var idle []string
	for rows.Next() {
		var (
			id, age, quiet, locked int64
			host, state            string
			noQuery                bool
		)
		if err := rows.Scan(&id, &host, &state, &age, &quiet, &noQuery, &locked); err != nil {
			return "transactions: " + err.Error()
		}
		if state == "LOCK WAIT" {
			waiting++
		}
		if noQuery && quiet >= 1 {
			idle = append(idle, fmt.Sprintf("session %d from %s: open %ds, idle %ds, %d rows locked", id, host, age, quiet, locked))
		}
	}
	return fmt.Sprintf("%d transactions wait for a lock; idle in a transaction: %v", waiting, idle)
}
