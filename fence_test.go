package seckill_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
)

// TestRecover: Redis came back with older data (here: a buyer's admission
// and its unit lost together, as a restart from an older file loses them,
// while the database holds the order), and the server changed (here: the
// fence names another server, and the script cache is empty, as after a
// restart). Two instances buy at once: nothing is admitted before one of
// them rebuilt the voucher from the database, so the buyer who lost their
// admission gets their order back instead of a second one, and the stock
// counts it.
func TestRecover(t *testing.T) {
	t.Parallel()
	od := cameBackOlderWithAnOrder(t)
	vs, store, logs, orders, v, first := od.vs, od.store, od.logs, od.orders, od.v, od.first
	ctx := context.Background()
	before := len(logs.String())
	// Another instance: its own memory, the same Redis and database.
	other := newVouchers(vs.Store.(seckill.Store), ledgerOf(vs).Cache, vs.Logger, vs.Clock.Now)
	instances := []*seckill.OrderService{orders, orderService(other, store, 200)}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = instances[i%2].Buy(ctx, 1, v.ID) })
	}
	wg.Wait()
	for i, err := range errs {
		var e *seckill.Error
		if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != first.ID {
			t.Errorf("buy %d of the buyer Redis forgot = %v, want duplicate_order with %d", i, err, first.ID)
		}
	}
	if got, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID); err != nil || got[v.ID] != 4 {
		t.Errorf("remaining after the recovery = %v, %v; want 4", got, err)
	}
	if n := strings.Count(logs.String()[before:], "rebuilding every voucher on sale"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once (one instance recovers, the other waits):\n%s", n, logs.String())
	}
	// And admission goes on.
	if _, err := instances[1].Buy(ctx, 2, v.ID); err != nil {
		t.Errorf("a new buyer after the recovery = %v, want admitted", err)
	}
}

// TestRecoverQueueMode: in the queue mode, orders admitted wait in the
// instances' memory, where no rebuild sees them: a recovery after the
// server changed keeps the buyers Redis came back with, so that the units
// of the orders still queued stay taken.
func TestRecoverQueueMode(t *testing.T) {
	t.Parallel()
	url, _ := faults.StartRedis(t)
	vs, store, _ := services(t, url)
	ledgerOf(vs).Queued = true
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("queued", 5))
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{}
	orders := orderService(vs, store, 100)
	redisLedger(orders).Queue = q
	queued, err := orders.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	cameBackOlder(t, url, 0, 0)
	_, err = orders.Buy(ctx, 1, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != queued.ID {
		t.Errorf("the queued order's buyer asking again after the recovery = %v, want duplicate_order with %d", err, queued.ID)
	}
	if got, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID); err != nil || got[v.ID] != 4 {
		t.Errorf("remaining after the recovery = %v, %v; want 4: the queued order's unit stays taken", got, err)
	}
}

// countingStore counts the reads of vouchers' orders: the rebuilds.
type countingStore struct {
	seckill.Store
	reads atomic.Int64
}

func (c *countingStore) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	c.reads.Add(1)
	return c.Store.VoucherOrders(ctx, voucherID, afterID, limit)
}

// TestRebuildsLongerThanLease: rebuilding the vouchers a recovery unloaded
// may take longer than its lease (a voucher of millions of orders): the
// instance doing it renews its hold all along, so that no other instance
// rebuilds them too, and it ends its hold when done.
func TestRebuildsLongerThanLease(t *testing.T) {
	t.Parallel()
	url, _ := faults.StartRedis(t)
	vs, store, logs := services(t, url)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("slow to rebuild", 5))
	if err != nil {
		t.Fatal(err)
	}
	raw := testenv.RawRedis(t, url)
	if err := raw.Do(ctx, raw.B().Arbitrary("HSET", "seckill:{fence}:identity", "identity", "a server that is gone").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// A renewal comes every third of it: a lease of 1 s outlasts a loaded
	// machine's stalls (300 ms did not always).
	ledgerOf(vs).Fence.CheckLease = time.Second
	if err := ledgerOf(vs).Fence.Check(ctx); err != nil {
		t.Fatalf("Recover = %v:\n%s", err, logs.String())
	}
	if got, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID); err != nil || len(got) != 0 {
		t.Fatalf("remaining after the recovery = %v, %v; want the voucher unloaded", got, err)
	}
	gate := &gatedStore{Store: store, reading: make(chan struct{}), release: make(chan struct{})}
	vs.Store = gate
	start := func(s *seckill.VoucherService) {
		w := &redisledger.Watch{Fence: ledgerOf(s).Fence, Every: 50 * time.Millisecond, RebuildEvery: 50 * time.Millisecond, Logger: s.Logger}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	start(vs)
	<-gate.reading
	// Another instance looks for vouchers to rebuild all along.
	other := &countingStore{Store: store}
	second := newVouchers(other, ledgerOf(vs).Cache, vs.Logger, vs.Clock.Now)
	ledgerOf(second).Fence.CheckLease = ledgerOf(vs).Fence.CheckLease
	start(second)
	// Three leases pass while the voucher's orders are read.
	time.Sleep(3 * ledgerOf(vs).Fence.CheckLease)
	if n := other.reads.Load(); n != 0 {
		t.Errorf("another instance read orders %d times while the first rebuilt, want none", n)
	}
	close(gate.release)
	testenv.WaitFor(t, 30*time.Second, "the voucher rebuilt", func() bool {
		got, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID)
		return err == nil && got[v.ID] == 5
	})
	if n := other.reads.Load(); n != 0 {
		t.Errorf("another instance read orders %d times, want none", n)
	}
	// The hold is ended, not left to expire.
	testenv.WaitFor(t, 10*time.Second, "the rebuilds' hold ended", func() bool {
		n, err := raw.Do(ctx, raw.B().Exists().Key("seckill:{fence}:rebuilds").Build()).AsInt64()
		return err == nil && n == 0
	})
}

// heldVoucher holds the reads of one voucher's orders (a rebuild of it)
// until released.
type heldVoucher struct {
	seckill.Store
	id               int64
	once             sync.Once
	reading, release chan struct{}
}

func (h *heldVoucher) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	if voucherID == h.id {
		h.once.Do(func() { close(h.reading) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.VoucherOrders(ctx, voucherID, afterID, limit)
}

// TestRecoverArmsOnSaleFirst: after the server changed, admission to a
// voucher on sale resumes without waiting for the rebuild of the vouchers
// whose sale ended (within the retention), which may be long: the
// recovery unloads the open vouchers, arms admission, and a voucher on
// sale is rebuilt by its first buy; the ended ones are rebuilt in the
// background, after those on sale.
func TestRecoverArmsOnSaleFirst(t *testing.T) {
	t.Parallel()
	url, _ := faults.StartRedis(t)
	vs, store, logs := services(t, url)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	ended := &seckill.Voucher{Title: "ended an hour ago", Stock: 3, InitialStock: 3, BeginTime: now.Add(-2 * time.Hour),
		EndTime: now.Add(-time.Hour), Generation: 11}
	if err := store.CreateVoucher(ctx, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := ledgerOf(vs).Cache.LoadVoucher(ctx, ended); err != nil {
		t.Fatal(err)
	}
	v, err := vs.Create(ctx, onSale("on sale", 5))
	if err != nil {
		t.Fatal(err)
	}
	orders := orderService(vs, store, 100)
	first, err := orders.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	cameBackOlder(t, url, 0, 0)
	held := &heldVoucher{Store: store, id: ended.ID, reading: make(chan struct{}), release: make(chan struct{})}
	vs.Store = held
	watch := &redisledger.Watch{Fence: ledgerOf(vs).Fence, Every: 20 * time.Millisecond, RebuildEvery: 20 * time.Millisecond, Logger: vs.Logger}
	if err := watch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Stop)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held.release) }) }
	defer release() // before the watch stops
	select {
	case <-held.reading:
	case <-time.After(30 * time.Second):
		t.Fatalf("the ended voucher's rebuild did not start:\n%s", logs.String())
	}

	// The ended voucher's rebuild is held: the one on sale sells.
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := orders.Buy(bctx, 2, v.ID); err != nil {
		t.Fatalf("a buy of the voucher on sale while an ended one is rebuilt = %v, want admitted:\n%s", err, logs.String())
	}
	_, err = orders.Buy(bctx, 1, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != first.ID {
		t.Errorf("the first buyer asking again = %v, want duplicate_order with %d (the rebuild counted their queued order)", err, first.ID)
	}
	if got, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID, ended.ID); err != nil || got[v.ID] != 3 {
		t.Errorf("remaining of the voucher on sale = %v, %v; want 3", got, err)
	} else if _, ok := got[ended.ID]; ok {
		t.Errorf("the ended voucher is loaded while its rebuild is held: remaining %v", got)
	}
	release()
	testenv.WaitFor(t, 30*time.Second, "the ended voucher rebuilt in the background", func() bool {
		got, err := ledgerOf(vs).Cache.Remaining(ctx, ended.ID)
		return err == nil && got[ended.ID] == 3
	})
}

// TestRecoverClusterReloadsWhatChanged: on a Cluster, a slot moved from
// one master to another (a reshard: its keys migrate, data and all)
// changes the identity but reloads nothing, and admission goes on; a
// failover of one master reloads only the vouchers of its slots.
func TestRecoverClusterReloadsWhatChanged(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	vs, store, logs := services(t, cl.URL)
	ctx := context.Background()
	key := func(id int64, name string) string { return testenv.VoucherKey(redis.DefaultPrefix, id, name) }
	// A voucher on each master.
	masters := cl.Masters(t)
	on := map[*faults.RedisProc]int64{}
	for len(on) < len(masters) {
		v, err := vs.Create(ctx, onSale("somewhere", 5))
		if err != nil {
			t.Fatal(err)
		}
		if m := cl.MasterOf(t, key(v.ID, "stock")); on[m] == 0 {
			on[m] = v.ID
		}
	}
	a, b, c := on[masters[0]], on[masters[1]], on[masters[2]]
	orders := orderService(vs, store, 100)
	for _, id := range []int64{a, b, c} {
		if _, err := orders.Buy(ctx, 1, id); err != nil {
			t.Fatal(err)
		}
	}
	raw := testenv.RawRedis(t, cl.URL)
	epochs := func() map[int64]string {
		out := map[int64]string{}
		for _, id := range []int64{a, b, c} {
			e, err := raw.Do(ctx, raw.B().Hget().Key(key(id, "meta")).Field("epoch").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			out[id] = e
		}
		return out
	}
	before := epochs()
	checked, err := ledgerOf(vs).Cache.Fence(ctx)
	if err != nil || checked == "" {
		t.Fatalf("fence = %q, %v", checked, err)
	}

	// a's slot moves to the master of b.
	cl.MoveSlot(t, faults.KeySlot(key(a, "stock")), masters[1])
	testenv.WaitFor(t, 30*time.Second, "a check of the resharded Cluster", func() bool {
		if err := ledgerOf(vs).Fence.Check(ctx); err != nil {
			return false
		}
		fence, err := ledgerOf(vs).Cache.Fence(ctx)
		return err == nil && fence != checked
	})
	if got := epochs(); !maps.Equal(got, before) {
		t.Errorf("epochs after a reshard = %v, want %v: a voucher was unloaded", got, before)
	}
	if strings.Contains(logs.String(), "unloaded") {
		t.Errorf("a reshard unloaded vouchers:\n%s", logs.String())
	}
	for _, id := range []int64{a, b, c} {
		if _, err := orders.Buy(ctx, 2, id); err != nil {
			t.Errorf("a buy of voucher %d after the reshard = %v, want admitted", id, err)
		}
	}

	// c's master fails over.
	masters[2].Kill()
	cl.WaitHealthy(t, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "a check of the Cluster after the failover", func() bool {
		return ledgerOf(vs).Fence.Check(ctx) == nil
	})
	got := epochs()
	if got[a] != before[a] || got[b] != before[b] {
		t.Errorf("epochs after a failover of c's master = %v, was %v: a or b was unloaded", got, before)
	}
	if got[c] == before[c] {
		t.Errorf("c's epoch after the failover of its master = %v, was %v: not unloaded", got[c], before[c])
	}
	for _, id := range []int64{a, b, c} {
		if _, err := orders.Buy(ctx, 3, id); err != nil {
			t.Errorf("a buy of voucher %d after the failover = %v, want admitted", id, err)
		}
	}
	if got, err := ledgerOf(vs).Cache.Remaining(ctx, a, b, c); err != nil || got[a] != 2 || got[b] != 2 || got[c] != 2 {
		t.Errorf("remaining after the failover = %v, %v; want 2 of each", got, err)
	}
}

// cameBackOlder makes the Redis at url look restarted from an older file:
// the fence names a server that is gone and the script cache is empty;
// with lostBuyer, that buyer's admission to the voucher is lost too, and
// its unit with it.
func cameBackOlder(t *testing.T, url string, voucherID, lostBuyer int64) {
	t.Helper()
	ctx := context.Background()
	raw := testenv.RawRedis(t, url)
	var cmds [][]string
	if lostBuyer != 0 {
		cmds = append(cmds,
			[]string{"HDEL", testenv.VoucherKey(redis.DefaultPrefix, voucherID, "buyers"), strconv.FormatInt(lostBuyer, 10)},
			[]string{"INCR", testenv.VoucherKey(redis.DefaultPrefix, voucherID, "stock")})
	}
	cmds = append(cmds,
		[]string{"HSET", redis.DefaultPrefix + ":{fence}:identity", "identity", "a server that is gone"},
		[]string{"SCRIPT", "FLUSH"})
	for _, cmd := range cmds {
		if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// lockAfter is a redisledger.Cache whose first LockCheck runs first() before it
// takes the lock: another instance's whole check, between this one's read
// of the fence and its lock.
type lockAfter struct {
	redisledger.Cache
	once  sync.Once
	first func()
}

func (c *lockAfter) LockCheck(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	c.once.Do(c.first)
	return c.Cache.LockCheck(ctx, token, ttl)
}

// TestCheckAfterAnotherInstanceCheckedRecoversOnce: an instance that read
// the fence before another instance checked the server, and took the lock
// after that check ended, arms on the server checked: it does not stop
// admissions and unload every voucher a second time (seen in a loaded
// run of TestRecover: the recovery logged twice).
func TestCheckAfterAnotherInstanceCheckedRecoversOnce(t *testing.T) {
	t.Parallel()
	od := cameBackOlderWithAnOrder(t)
	vs, logs, orders, v, first := od.vs, od.logs, od.orders, od.v, od.first
	ctx := context.Background()
	before := len(logs.String())

	var firstErr error
	other := newVouchers(vs.Store.(seckill.Store), &lockAfter{Cache: ledgerOf(vs).Cache, first: func() {
		firstErr = ledgerOf(vs).Fence.Check(ctx)
	}}, vs.Logger, vs.Clock.Now)
	if err := ledgerOf(other).Fence.Check(ctx); err != nil {
		t.Fatalf("the second instance's check = %v", err)
	}
	if firstErr != nil {
		t.Fatalf("the first instance's check = %v", firstErr)
	}
	if n := strings.Count(logs.String()[before:], "rebuilding every voucher on sale"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once:\n%s", n, logs.String()[before:])
	}
	o, err := orders.Buy(ctx, 1, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != first.ID {
		t.Errorf("the buyer Redis forgot, after the checks = %v, %v; want duplicate_order with %d", o, err, first.ID)
	}
}

// olderData is a Redis of the test's own that came back with older data:
// buyer 1's admission of v and its unit lost, while the database holds
// their order first.
type olderData struct {
	vs     *seckill.VoucherService
	store  seckill.Store
	logs   *logBuffer
	orders *seckill.OrderService
	v      *seckill.VoucherView
	first  *seckill.Order
}

// cameBackOlderWithAnOrder starts a Redis of its own (its scripts are
// flushed: a server of the test's own), sells buyer 1 a unit of a new
// voucher, writes the order, and loses the admission in Redis.
func cameBackOlderWithAnOrder(t *testing.T) olderData {
	t.Helper()
	url, _ := faults.StartRedis(t)
	vs, store, logs := services(t, url)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("older data", 5))
	if err != nil {
		t.Fatal(err)
	}
	orders := orderService(vs, store, 100)
	first, err := orders.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SaveOrders(ctx, []*seckill.Order{first}); err != nil {
		t.Fatal(err)
	}
	cameBackOlder(t, url, v.ID, 1)
	return olderData{vs: vs, store: store, logs: logs, orders: orders, v: v, first: first}
}
