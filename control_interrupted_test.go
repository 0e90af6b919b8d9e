package seckill_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// ordersHooked runs a hook once, when armed, on the first VoucherOrders call
// (a rebuild's first page of orders).
type ordersHooked struct {
	*hookedStore
	orders atomic.Pointer[func()]
}

func (o *ordersHooked) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	if f := o.orders.Swap(nil); f != nil {
		(*f)()
	}
	return o.hookedStore.VoucherOrders(ctx, voucherID, afterID, limit)
}

// TestAddStockRebuildInFlight: an addition answered 200 is in Redis even
// when a rebuild that read the row before it finishes first (the rebuild
// that set the stock reads the row again). Found by review, as it was: a
// rebuild in flight (an admission's,
// on instance B: the voucher was not loaded) read the row before an
// addition of stock on A committed. A's restock unloads (a new epoch): B's
// rebuild is superseded and starts over, but with the row it read before
// (redis.Client.Rebuild retries once(ctx, v, ...) with the same v). It
// finishes first with the old initial stock; A's rebuild from the new row
// finds the stock set and sets nothing. A answers 200; the units are in the
// database only. The control lock does not help: an admission's rebuild
// does not take it.
func TestAddStockRebuildInFlight(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			t.Parallel()
			addStockRebuildInFlight(t, shards)
		})
	}
}

func addStockRebuildInFlight(t *testing.T, shards int) {
	a, b, ha, hb, store := twoInstances(t)
	ob := &ordersHooked{hookedStore: hb}
	b.Store = ob
	ctx := context.Background()
	sv := onSale("rebuild in flight", 10)
	sv.Shards = shards
	view, err := a.Create(ctx, sv)
	if err != nil {
		t.Fatal(err)
	}
	// Redis lost the voucher's stock (an unload, a restart): buyers on B
	// make B rebuild it.
	if err := ledgerOf(a).Cache.UnloadStock(ctx, view.ID); err != nil {
		t.Fatal(err)
	}
	bStaging, aUnloaded, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	fo := func() {
		close(bStaging) // B read the row (10) and began
		<-aUnloaded
	}
	ob.orders.Store(&fo)
	fa2 := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		close(aUnloaded) // A committed +10 and unloaded: restock reads the row
		select {
		case <-bDone:
		case <-time.After(5 * time.Second):
		}
		return call()
	}
	fa := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		ha.voucher.Store(&fa2)
		return call()
	}
	go func() {
		err := ledgerOf(b).Rebuild(ctx, view.ID)
		t.Logf("B's rebuild = %v", err)
		close(bDone)
	}()
	<-bStaging
	ha.voucher.Store(&fa)
	res, err := a.AddStock(ctx, view.ID, "in-flight", 10)
	if err != nil {
		t.Fatalf("AddStock = %v", err)
	}
	row, err := store.Voucher(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	left, err := ledgerOf(a).Cache.Remaining(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("database: stock %d initial %d; Redis remaining %d; AddStock answered remaining %v", row.Stock, row.InitialStock, left[view.ID], *res.Remaining)
	if left[view.ID] != row.Stock {
		t.Errorf("AddStock answered 200, yet Redis holds %d units and the database %d: the addition is in the database only", left[view.ID], row.Stock)
	}
}

// TestListJoinedAcrossPause: a List after this instance's Pause returned
// lists the voucher paused. Found by review, as it was: a List that starts after this
// instance's Pause returned joins (singleflight) a read begun before the
// pause, and answers the voucher unpaused. The read is not kept
// (listGen), but it is shared: forgetLists does not Forget the flight.
func TestListJoinedAcrossPause(t *testing.T) {
	t.Parallel()
	a, _, ha, _, _ := twoInstances(t)
	ctx := context.Background()
	view, err := a.Create(ctx, onSale("listed", 10))
	if err != nil {
		t.Fatal(err)
	}
	read, paused := make(chan struct{}), make(chan struct{})
	f := func(call func() ([]*seckill.Voucher, error)) ([]*seckill.Voucher, error) {
		vs, err := call()
		close(read)
		<-paused
		return vs, err
	}
	ha.vouchers.Store(&f)
	go a.List(ctx, 10) // a visitor's poll, begun before the pause
	<-read
	if _, err := a.Pause(ctx, view.ID, true); err != nil {
		t.Fatal(err)
	}
	// The operator's page lists the vouchers after the pause was answered.
	after := make(chan []*seckill.VoucherView, 1)
	go func() {
		list, err := a.List(ctx, 10)
		if err != nil {
			t.Error(err)
		}
		after <- list
	}()
	time.Sleep(100 * time.Millisecond)
	close(paused)
	list := <-after
	if len(list) != 1 || !list[0].Paused {
		t.Errorf("List begun after this instance's pause returned: paused %v, want true", len(list) == 1 && list[0].Paused)
	}
}

// TestPauseCallerGone: a pause the database took reaches Redis even if
// the caller has gone. Found by review, as it was: the operator's request goes away (a closed
// tab, a proxy's timeout) right after the database committed the pause:
// the Redis write runs on the cancelled context and fails, the lock is
// given back, and nobody is there to "ask again". The database (and the
// admin page) says paused; Redis admits.
func TestPauseCallerGone(t *testing.T) {
	t.Parallel()
	a, _, ha, _, store := twoInstances(t)
	ctx := context.Background()
	view, err := a.Create(ctx, onSale("paused, caller gone", 10))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	f := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		v, err := call()
		cancel() // the caller goes away once the database has it
		return v, err
	}
	ha.pause.Store(&f)
	_, err = a.Pause(cctx, view.ID, true)
	t.Logf("Pause = %v", err)
	pauseAgrees(t, a, store, view)
}

// TestControlLockRenewed: a control stalled past the lock's TTL still
// holds it (it is renewed), and another waits. Found by review, as it
// was: the control lock was never renewed. A resume
// on A stalls between its database write and its Redis write for longer
// than the lock's 30 s (a Redis failover its client waits out, a paused
// VM); B's pause takes the lapsed lock, writes both and is answered; A's
// resume then reaches Redis: the database (and the admin page) paused,
// Redis admitting. Takes 31 s.
func TestControlLockRenewed(t *testing.T) {
	if testing.Short() {
		t.Skip("31 s")
	}
	t.Parallel()
	a, b, ha, _, store := twoInstances(t)
	ctx := context.Background()
	view, err := a.Create(ctx, onSale("lock lapse", 10))
	if err != nil {
		t.Fatal(err)
	}
	aRead, bDone := make(chan struct{}), make(chan struct{})
	fa := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		v, err := call()
		close(aRead)
		select {
		case <-bDone:
		case <-time.After(40 * time.Second):
		}
		return v, err
	}
	ha.pause.Store(&fa)
	resumed := make(chan error, 1)
	go func() {
		_, err := a.Pause(ctx, view.ID, false)
		resumed <- err
	}()
	<-aRead
	bctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	defer cancel()
	p, err := b.Pause(bctx, view.ID, true)
	t.Logf("B's pause = %v", err)
	close(bDone)
	if err := <-resumed; err != nil {
		t.Logf("A's resume = %v", err)
	}
	if err != nil || !p.Paused {
		return // B waited and gave up: no interleaving
	}
	pauseAgrees(t, a, store, view)
}
