package seckill_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
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
	url, _ := testenv.StartRedis(t) // its scripts are flushed: a server of the test's own
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
	raw := rawClient(t, url)
	key := func(name string) string { return "seckill:{v" + itoa(v.ID) + "}:" + name }
	for _, cmd := range [][]string{
		{"HDEL", key("buyers"), "1"}, {"INCR", key("stock")}, // the admission lost, its unit with it
		{"HSET", "seckill:{fence}:identity", "identity", "a server that is gone"},
		{"SCRIPT", "FLUSH"},
	} {
		if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	before := len(logs.String())
	// Another instance: its own memory, the same Redis and database.
	other := &seckill.VoucherService{Store: vs.Store, Cache: vs.Cache, Logger: vs.Logger, Now: vs.Now}
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
	if got, err := vs.Cache.Remaining(ctx, v.ID); err != nil || got[v.ID] != 4 {
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

func rawClient(t *testing.T, url string) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRecoverQueueMode: in the queue mode, orders admitted wait in the
// instances' memory, where no rebuild sees them: a recovery after the
// server changed keeps the buyers Redis came back with, so that the units
// of the orders still queued stay taken.
func TestRecoverQueueMode(t *testing.T) {
	t.Parallel()
	url, _ := testenv.StartRedis(t)
	vs, store, _ := services(t, url)
	vs.InMemoryQueue = true
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("queued", 5))
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{}
	orders := orderService(vs, store, 100)
	orders.Mode, orders.Queue = seckill.ModeQueue, q
	queued, err := orders.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, url)
	for _, cmd := range [][]string{
		{"HSET", "seckill:{fence}:identity", "identity", "a server that is gone"},
		{"SCRIPT", "FLUSH"},
	} {
		if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = orders.Buy(ctx, 1, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != queued.ID {
		t.Errorf("the queued order's buyer asking again after the recovery = %v, want duplicate_order with %d", err, queued.ID)
	}
	if got, err := vs.Cache.Remaining(ctx, v.ID); err != nil || got[v.ID] != 4 {
		t.Errorf("remaining after the recovery = %v, %v; want 4: the queued order's unit stays taken", got, err)
	}
}

// TestRecoverLongerThanLease: rebuilding the open vouchers after the server
// changed may take longer than the check's lease (a voucher of millions of
// orders): the instance doing it renews its hold all along, so that nobody
// takes it over and it records the server as checked at the end.
func TestRecoverLongerThanLease(t *testing.T) {
	t.Parallel()
	url, _ := testenv.StartRedis(t)
	vs, store, logs := services(t, url)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("slow to rebuild", 5))
	if err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, url)
	if err := raw.Do(ctx, raw.B().Arbitrary("HSET", "seckill:{fence}:identity", "identity", "a server that is gone").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	gate := &gatedStore{Store: store, reading: make(chan struct{}), release: make(chan struct{})}
	vs.Store = gate
	// A renewal comes every third of it: a lease of 1 s outlasts a loaded
	// machine's stalls (300 ms did not always).
	vs.CheckLease = time.Second
	done := make(chan error, 1)
	go func() { done <- vs.Recover(ctx) }()
	<-gate.reading
	// Three leases pass while the voucher's orders are read.
	time.Sleep(3 * vs.CheckLease)
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatalf("Recover that took three leases = %v, want success:\n%s", err, logs.String())
	}
	if got, err := vs.Cache.Remaining(ctx, v.ID); err != nil || got[v.ID] != 5 {
		t.Errorf("remaining after the recovery = %v, %v; want 5", got, err)
	}
	fence, err := raw.Do(ctx, raw.B().Hget().Key("seckill:{fence}:identity").Field("identity").Build()).ToString()
	if err != nil || fence == "a server that is gone" {
		t.Errorf("the fence after the recovery = %q, %v; want the server's identity", fence, err)
	}
}
