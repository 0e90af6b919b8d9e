package orderid

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

// The tests of the lease on Redis: its scripts, and Redis losing,
// restarting from older snapshots, or going away under it. The lease's
// own logic is tested on a fake store in lease_test.go.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

var _ LeaseStore = (*redis.Client)(nil)

// Short lease times keep the tests fast.
const (
	testTTL   = 2 * time.Second
	testRenew = 100 * time.Millisecond
	testValid = 300 * time.Millisecond
)

// store is a Redis the leases are kept in, with a raw connection to it
// under the same key prefix.
type store struct {
	c        *redis.Client
	raw      rueidis.Client
	prefix   string
	embedded bool
}

// nodes is the key of the leases' hash, as package redis names it.
func (s store) nodes() string { return s.prefix + ":{nodes}:leases" }

// do runs a raw command and fails the test on an error other than nil.
func (s store) do(t testing.TB, cmd ...string) rueidis.RedisResult {
	t.Helper()
	res := s.raw.Do(context.Background(), s.raw.B().Arbitrary(cmd...).Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", cmd, err)
	}
	return res
}

// openStore opens a Client and a raw connection on url under prefix
// ("" for the default), both closed when the test ends.
func openStore(t *testing.T, url, prefix string) store {
	t.Helper()
	c, err := redis.Open(context.Background(), redis.Config{URL: url, Prefix: prefix}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	if prefix == "" {
		prefix = redis.DefaultPrefix
	}
	return store{c: c, raw: testenv.RawRedis(t, url), prefix: prefix}
}

// rawClient connects to url, and closes the connection when the test ends.

// each runs test on a Redis server, a Redis Cluster and the embedded
// server, each with a key prefix of its own.
func each(t *testing.T, test func(t *testing.T, s store)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		test(t, openStore(t, testenv.RedisURL(t), testenv.RedisPrefix(t)))
	})
	t.Run("cluster", func(t *testing.T) {
		// The script's keys must be in one slot; a Cluster refuses the
		// ones that are not (CROSSSLOT).
		t.Parallel()
		test(t, openStore(t, faults.SharedCluster(t).URL, "t"+testenv.Random()))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		c, err := redis.OpenEmbedded("", testenv.Logger(t))
		if err != nil {
			t.Fatalf("OpenEmbedded: %v", err)
		}
		t.Cleanup(c.Close)
		test(t, store{c: c, raw: testenv.RawRedis(t, "redis://"+c.Addr()), prefix: redis.DefaultPrefix, embedded: true})
	})
}

// newLease returns a lease in s for gen with the short test times, stopped
// when the test ends; on the embedded server with its times otherwise, as
// the service takes it there.
func newLease(t *testing.T, s store, gen *Generator) *Lease {
	t.Helper()
	l := NewLease(s.c, gen, testenv.Logger(t))
	if s.embedded {
		l.LeaseTimes = EmbeddedLeaseTimes
	}
	l.TTL, l.Renew, l.Valid = testTTL, testRenew, testValid
	if l.FreshWait > 0 { // the embedded server needs no wait
		l.FreshWait = testValid
	}
	t.Cleanup(l.Stop)
	return l
}

func startLease(t *testing.T, s store, gen *Generator) *Lease {
	t.Helper()
	l := newLease(t, s, gen)
	if err := l.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return l
}

func next(t *testing.T, g *Generator) int64 {
	t.Helper()
	id, err := g.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return id
}

// lastID makes ids with g until it refuses with ErrNoLease, and returns
// the time just before the last id it made, when the lease was valid; or
// since, if it made none (not the time of the call, which a stalled test
// may reach late).
func lastID(t *testing.T, g *Generator, since time.Time) time.Time {
	t.Helper()
	last := since
	testenv.WaitFor(t, 5*time.Second, "the generator stops making ids", func() bool {
		before := time.Now()
		_, err := g.Next()
		if err == nil {
			last = before
			return false
		}
		if !errors.Is(err, ErrNoLease) {
			t.Fatalf("Next: %v", err)
		}
		return true
	})
	return last
}

// ownRedis starts a redis-server of the test's own and connects to it.
func ownRedis(t *testing.T) (store, func()) {
	t.Helper()
	url, kill := faults.StartRedis(t)
	return openStore(t, url, ""), kill
}

func TestNodeLeaseDistinct(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c store) {
		ga, gb := New(), New()
		a, b := startLease(t, c, ga), startLease(t, c, gb)
		if a.Node() < 0 || b.Node() < 0 || a.Node() == b.Node() {
			t.Fatalf("nodes %d and %d, want two distinct node ids", a.Node(), b.Node())
		}
		if n := NodeOf(next(t, ga)); n != a.Node() {
			t.Errorf("a's id has node %d, want %d", n, a.Node())
		}
		if n := NodeOf(next(t, gb)); n != b.Node() {
			t.Errorf("b's id has node %d, want %d", n, b.Node())
		}
	})
}

// TestNodeLeaseRelease leaves one node id free, so that each lease must
// take that one.
func TestNodeLeaseRelease(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c store) {
		ctx := context.Background()
		const free = 7
		held := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		args := []string{"HSET", c.nodes(), "epoch", "1"} // leases written long ago: no wait
		for n := range Nodes {
			if n != free {
				args = append(args, strconv.Itoa(n), "other "+held+" 0")
			}
		}
		c.do(t, args...)

		ga := New()
		a := startLease(t, c, ga)
		if a.Node() != free {
			t.Fatalf("lease took node %d, want the free one, %d", a.Node(), free)
		}
		var last int64
		for range 3 {
			last = max(last, next(t, ga))
		}
		err := newLease(t, c, New()).Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "every node id is leased") {
			t.Fatalf("Start with every node id held: got %v, want an error saying so", err)
		}

		a.Stop()
		a.Stop() // safe twice
		if _, err := ga.Next(); !errors.Is(err, ErrNoLease) {
			t.Errorf("Next after Stop: got %v, want ErrNoLease", err)
		}
		want := a.token + " 0 " + strconv.FormatInt(ga.LastUnixMilli(), 10)
		if got, _ := c.do(t, "HGET", c.nodes(), strconv.Itoa(free)).ToString(); got != want {
			t.Errorf("released lease %q, want %q", got, want)
		}

		// The next holder's clock is an hour behind: its ids still come
		// after the ones made with the node before.
		gb := New()
		gb.Clock = func() time.Time { return time.Now().Add(-time.Hour) }
		b := startLease(t, c, gb)
		if b.Node() != free {
			t.Fatalf("second lease took node %d, want the released one, %d", b.Node(), free)
		}
		if id := next(t, gb); id <= last || NodeOf(id) != free {
			t.Errorf("new holder's id %d (node %d), want above the old holder's last id %d, node %d",
				id, NodeOf(id), last, free)
		}
		newLease(t, c, New()).Stop() // never started: safe
	})
}

// TestNodeLeaseRedisLosesLeases: Redis loses every lease while a holder
// makes ids. The holder must stop at its next renewal; a newcomer must
// wait until the holder is surely stopped; both then use distinct nodes.
func TestNodeLeaseRedisLosesLeases(t *testing.T) {
	t.Parallel()
	c, _ := ownRedis(t)
	ctx := context.Background()
	ga := New()
	startLease(t, c, ga)
	before := next(t, ga)

	c.do(t, "FLUSHALL")
	flushed := time.Now()
	gb := New()
	b := newLease(t, c, gb)
	type started struct {
		at  time.Time
		err error
	}
	bStarted := make(chan started, 1)
	go func() {
		err := b.Start(ctx)
		bStarted <- started{time.Now(), err}
	}()

	aLast := lastID(t, ga, flushed)
	aStopped := aLast.Sub(flushed)
	if aStopped > 3*testRenew {
		t.Errorf("the old holder made ids until %v after the loss, want it stopped within about 2 renewals (%v)", aStopped, 2*testRenew)
	}
	var s started
	select {
	case s = <-bStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("the new lease did not start within 5s")
	}
	if s.err != nil {
		t.Fatalf("new lease Start: %v", s.err)
	}
	bWaited := s.at.Sub(flushed)
	if bWaited < testValid-10*time.Millisecond || bWaited > testValid+3*time.Second {
		t.Errorf("the new lease started %v after the loss, want about FreshWait (%v)", bWaited, testValid)
	}
	if aStopped >= bWaited {
		t.Errorf("the old holder made ids until %v after the loss, the new one started at %v: they overlapped", aStopped, bWaited)
	}

	testenv.WaitFor(t, 5*time.Second, "the old holder makes ids again", func() bool {
		_, err := ga.Next()
		return err == nil
	})
	idA, idB := next(t, ga), next(t, gb)
	if NodeOf(idA) == NodeOf(idB) {
		t.Errorf("both holders make ids with node %d", NodeOf(idA))
	}
	if idA <= before {
		t.Errorf("old holder's id %d after the loss, want above %d", idA, before)
	}
}

// TestNodeLeaseRedisDown: a holder that cannot reach Redis stops making
// ids within Valid, before its lease can end in Redis.
func TestNodeLeaseRedisDown(t *testing.T) {
	t.Parallel()
	c, kill := ownRedis(t)
	g := New()
	startLease(t, c, g)
	next(t, g)

	killed := time.Now()
	kill()
	if stopped := lastID(t, g, killed).Sub(killed); stopped >= testValid {
		t.Errorf("the holder made ids until %v after Redis went down, want it stopped within Valid (%v)", stopped, testValid)
	}
	time.Sleep(3 * testRenew)
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Errorf("Next with Redis still down: got %v, want ErrNoLease", err)
	}
}

// TestNodeLeaseNodeWhileRenewing reads Node while the lease is taken again
// in the background, as a status page or log line would.
func TestNodeLeaseNodeWhileRenewing(t *testing.T) {
	t.Parallel()
	c, _ := ownRedis(t)
	g := New()
	l := startLease(t, c, g)
	c.do(t, "FLUSHALL")
	testenv.WaitFor(t, 2*time.Second, "the lease is lost", func() bool {
		_ = l.Node()
		_, ok := g.Node()
		return !ok
	})
	testenv.WaitFor(t, 5*time.Second, "the lease is taken again", func() bool {
		_ = l.Node()
		_, ok := g.Node()
		return ok
	})
}

// idLog collects the ids a generator makes in the background, one about
// every 100 µs (slower than the clock, so the generator never runs ahead
// of it), until stop.
type idLog struct {
	ids  []int64
	stop chan struct{}
	done chan struct{}
}

func makeIDs(g *Generator) *idLog {
	l := &idLog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if id, err := g.Next(); err == nil {
				l.ids = append(l.ids, id)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return l
}

// end stops the generation and returns the ids made.
func (l *idLog) end() []int64 {
	close(l.stop)
	<-l.done
	return l.ids
}

// TestNodeLeaseRedisRollback: Redis restarts from a snapshot older than a
// lease, as after a restart from an old RDB or a failover to a lagging
// replica: the leases come back with the holder's node id free and the
// leases' epoch old. A newcomer must not make ids with that node id while
// the holder, which has not renewed since, still may: two generators
// never make the same id.
func TestNodeLeaseRedisRollback(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t, "--dbfilename", "dump.rdb")
	ctx := context.Background()
	open := func() store { return openStore(t, "redis://"+rp.Addr, "") }
	ca := open()
	// Every node id but one held for a day, the leases written long ago:
	// both leases must take the free one, and nothing new makes anyone wait.
	const free = 7
	held := strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMilli(), 10)
	args := []string{"HSET", ca.nodes(), "epoch", "1"}
	for n := range Nodes {
		if n != free {
			args = append(args, strconv.Itoa(n), "other "+held+" 0")
		}
	}
	ca.do(t, args...)
	ca.do(t, "SAVE") // the snapshot Redis comes back with: the node id free

	// The holder does not renew within the test: its lease stays valid
	// for Valid after it was taken, whatever Redis says meanwhile.
	const valid = 3 * time.Second
	lease := func(s store, g *Generator) *Lease {
		l := NewLease(s.c, g, testenv.Logger(t))
		l.TTL, l.Renew, l.Valid, l.FreshWait = 10*time.Second, time.Hour, valid, valid
		t.Cleanup(l.Stop)
		return l
	}
	ga := New()
	a := lease(ca, ga)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Node() != free {
		t.Fatalf("the holder took node %d, want %d", a.Node(), free)
	}
	aIDs := makeIDs(ga)

	rp.Kill()
	rp.Restart(t) // from the snapshot, which has no lease on the node id
	restarted := time.Now()
	gb := New()
	b := lease(open(), gb)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the newcomer took node %d %v after the restart", b.Node(), time.Since(restarted).Round(time.Millisecond))
	bIDs := makeIDs(gb)
	// Until the holder's lease has run out, and a little more.
	testenv.WaitFor(t, 2*valid, "the holder stops making ids", func() bool {
		_, ok := ga.Node()
		return !ok
	})
	time.Sleep(100 * time.Millisecond)
	fromA, fromB := aIDs.end(), bIDs.end()
	if len(fromA) == 0 || len(fromB) == 0 {
		t.Fatalf("the holder made %d ids, the newcomer %d: want both some", len(fromA), len(fromB))
	}
	seen := make(map[int64]bool, len(fromA))
	for _, id := range fromA {
		seen[id] = true
	}
	dups := 0
	for _, id := range fromB {
		if seen[id] {
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("%d of the newcomer's %d ids were also made by the holder (node %d, both)", dups, len(fromB), free)
	}
	if b.Node() == a.Node() && slices.Min(fromB) <= slices.Max(fromA) {
		t.Errorf("the newcomer made id %d with node %d, not after the holder's last, %d: they made ids at once",
			slices.Min(fromB), b.Node(), slices.Max(fromA))
	}
}

// TestNodeLeaseLapsedHolderAfterRollback: a holder is cut off from Redis
// for longer than its lease (its generator stops on its own), another
// instance takes its node id, and Redis comes back from a snapshot made
// before that, naming the holder again. The holder's renewal must not
// succeed on the lease it had: both would make ids with one node id until
// the other's next renewal failed (592 ids made by both, found by review).
// It must take a node id anew, and wait out the server's new epoch.
func TestNodeLeaseLapsedHolderAfterRollback(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t, "--dbfilename", "dump.rdb")
	ctx := context.Background()
	open := func() store { return openStore(t, "redis://"+rp.Addr, "") }
	ch, cx := open(), open()
	// Every node id but one held for a day: both leases take the free one.
	const free = 7
	held := strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMilli(), 10)
	args := []string{"HSET", ch.nodes(), "epoch", "1"}
	for n := range Nodes {
		if n != free {
			args = append(args, strconv.Itoa(n), "other "+held+" 0")
		}
	}
	ch.do(t, args...)
	// The wait of a newcomer (FreshWait) well within the lease it took.
	const ttl, valid = 4 * time.Second, 1500 * time.Millisecond
	lease := func(s store, g *Generator) *Lease {
		l := NewLease(s.c, g, testenv.Logger(t))
		l.TTL, l.Renew, l.Valid, l.FreshWait = ttl, time.Hour, valid, valid
		t.Cleanup(l.Stop)
		return l
	}
	gh := New()
	h := lease(ch, gh)
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ch.do(t, "SAVE") // the snapshot Redis comes back with: node 7 the holder's

	// Cut off (it renews nothing) for longer than its lease.
	testenv.WaitFor(t, 2*ttl, "the holder's lease runs out", func() bool {
		v, _ := ch.do(t, "HGET", ch.nodes(), strconv.Itoa(free)).ToString()
		f := strings.Fields(v)
		expiry, _ := strconv.ParseInt(f[1], 10, 64)
		return expiry < time.Now().Add(-50*time.Millisecond).UnixMilli()
	})
	gx := New()
	x := lease(cx, gx)
	if err := x.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if x.Node() != free {
		t.Fatalf("the other took node %d, want %d", x.Node(), free)
	}
	xIDs := makeIDs(gx)

	rp.Kill()
	rp.Restart(t) // node 7 the holder's again
	hIDs := makeIDs(gh)
	// The holder's renewal, once one reaches the restarted server (the
	// first may meet a connection the restart broke).
	var renewed bool
	testenv.WaitFor(t, 10*time.Second, "the holder's renewal reaches Redis", func() bool {
		ok, err := h.renew(ctx)
		renewed = ok
		return err == nil
	})
	t.Logf("the holder's renewal on the restarted server: %v", renewed)
	if !renewed {
		// As its loop would: take a node id anew.
		tctx, cancel := context.WithCancel(ctx)
		ticked := make(chan struct{})
		go func() {
			defer close(ticked)
			for tctx.Err() == nil {
				if _, ok := gh.Node(); ok {
					return
				}
				h.tick(tctx) // a tick that meets a connection the restart broke does nothing
				time.Sleep(50 * time.Millisecond)
			}
		}()
		t.Cleanup(func() { cancel(); <-ticked })
	}
	// Until the other has stopped and the holder makes ids again, and a
	// little more.
	testenv.WaitFor(t, 3*valid, "the other stops making ids", func() bool {
		_, ok := gx.Node()
		return !ok
	})
	testenv.WaitFor(t, 10*time.Second, "the holder makes ids again", func() bool {
		_, ok := gh.Node()
		return ok
	})
	time.Sleep(100 * time.Millisecond)
	fromH, fromX := hIDs.end(), xIDs.end()
	seen := make(map[int64]bool, len(fromX))
	for _, id := range fromX {
		seen[id] = true
	}
	dups := 0
	for _, id := range fromH {
		if seen[id] {
			dups++
		}
	}
	t.Logf("after the restart the holder made %d ids, the other %d in all", len(fromH), len(fromX))
	if dups > 0 {
		t.Errorf("%d ids made by both the holder and the other, with node %d", dups, free)
	}
}

// TestNodeLeaseRenewsThroughOlderRestart: a holder that renews all along
// goes on making ids through a restart of Redis from a snapshot older than
// its lease, where its lease comes back expired: it held the lease on the
// server before, so no one took it. Refused as expired, every instance
// stopped making ids for the wait of a new lease after every such restart
// (found by review).
func TestNodeLeaseRenewsThroughOlderRestart(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t, "--dbfilename", "dump.rdb")
	ctx := context.Background()
	c := openStore(t, "redis://"+rp.Addr, "")
	g := New()
	l := NewLease(c.c, g, testenv.Logger(t))
	l.TTL, l.Renew, l.Valid, l.FreshWait = 2*time.Second, 100*time.Millisecond, 1500*time.Millisecond, 1500*time.Millisecond
	t.Cleanup(l.Stop)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	node := l.Node()
	c.do(t, "SAVE")
	time.Sleep(2500 * time.Millisecond) // the snapshot grows older than the lease
	rp.Kill()
	rp.Restart(t) // the lease comes back expired
	restarted := time.Now()
	for time.Since(restarted) < 2*time.Second {
		if n, ok := g.Node(); !ok || n != node {
			t.Fatalf("%v after the restart the holder makes no ids with node %d (node %d, valid %v)", time.Since(restarted).Round(time.Millisecond), node, n, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
