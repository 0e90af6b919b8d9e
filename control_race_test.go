package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/sqlledger"
)

// hookedStore is a store whose Voucher, PauseVoucher and Vouchers run a
// hook once when armed: the tests below hold one instance between its
// database's answer and its write to Redis.
type hookedStore struct {
	seckill.Store
	voucher  atomic.Pointer[func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error)]
	pause    atomic.Pointer[func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error)]
	vouchers atomic.Pointer[func(call func() ([]*seckill.Voucher, error)) ([]*seckill.Voucher, error)]
}

func (h *hookedStore) Voucher(ctx context.Context, id int64) (*seckill.Voucher, error) {
	call := func() (*seckill.Voucher, error) { return h.Store.Voucher(ctx, id) }
	if f := h.voucher.Swap(nil); f != nil {
		return (*f)(call)
	}
	return call()
}

func (h *hookedStore) PauseVoucher(ctx context.Context, id int64, paused bool) (*seckill.Voucher, error) {
	call := func() (*seckill.Voucher, error) { return h.Store.PauseVoucher(ctx, id, paused) }
	if f := h.pause.Swap(nil); f != nil {
		return (*f)(call)
	}
	return call()
}

func (h *hookedStore) Vouchers(ctx context.Context, limit int) ([]*seckill.Voucher, error) {
	call := func() ([]*seckill.Voucher, error) { return h.Store.Vouchers(ctx, limit) }
	if f := h.vouchers.Swap(nil); f != nil {
		return (*f)(call)
	}
	return call()
}

// twoInstances returns two VoucherServices over one database and one
// Redis, as two instances of the service are, each with its own hooks.
func twoInstances(t *testing.T) (a, b *seckill.VoucherService, ha, hb *hookedStore, store seckill.Store) {
	t.Helper()
	store = apptest.Store(t)
	logger := slog.New(slog.NewTextHandler(&logBuffer{}, nil))
	cache, _, _ := apptest.Redis(t, logger)
	ha, hb = &hookedStore{Store: store}, &hookedStore{Store: store}
	a = newVouchers(ha, cache, logger, time.Now)
	b = newVouchers(hb, cache, logger, time.Now)
	for _, s := range []*seckill.VoucherService{a, b} {
		if err := ledgerOf(s).Restore(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, ha, hb, store
}

// TestAddStockTwoInstances: two additions of stock with different keys on
// two instances, both answered 200, are both in Redis. Forced: A stalls
// in its restock between reading the row (its own units only) and
// rebuilding, while B commits, unloads and rebuilds. Without the
// voucher's control lock, A's rebuild finished with A's row and B's found
// that stock and set nothing: B's units in the database, not in Redis
// (found by review). Unsharded and on 4 shards.
func TestAddStockTwoInstances(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			t.Parallel()
			addStockTwoInstances(t, shards)
		})
	}
}

func addStockTwoInstances(t *testing.T, shards int) {
	a, b, ha, hb, store := twoInstances(t)
	ctx := context.Background()
	sv := onSale("two additions", 10)
	sv.Shards = shards
	view, err := a.Create(ctx, sv)
	if err != nil {
		t.Fatal(err)
	}
	aRead, bUnloaded, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	fa := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		v, err := call() // restock's read of the row: A's units, not B's
		close(aRead)
		// B commits and unloads meanwhile, unless it waits for A's
		// control lock: then A goes on after a second.
		select {
		case <-bUnloaded:
		case <-time.After(time.Second):
		}
		return v, err
	}
	// A's first read of the row is whether the sale is over; its second,
	// its restock's.
	fa0 := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		ha.voucher.Store(&fa)
		return call()
	}
	ha.voucher.Store(&fa0)
	// B's second read of the row is its restock's (its first, whether the
	// sale is over): B committed and unloaded.
	fb2 := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		close(bUnloaded)
		<-aDone
		return call()
	}
	fb := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		hb.voucher.Store(&fb2)
		return call()
	}
	type result struct {
		view *seckill.VoucherView
		err  error
	}
	ra, rb := make(chan result, 1), make(chan result, 1)
	go func() {
		v, err := a.AddStock(ctx, view.ID, "key-a", 10)
		close(aDone)
		ra <- result{v, err}
	}()
	<-aRead
	hb.voucher.Store(&fb)
	go func() {
		v, err := b.AddStock(ctx, view.ID, "key-b", 20)
		rb <- result{v, err}
	}()
	resA, resB := <-ra, <-rb
	if resA.err != nil || resB.err != nil {
		t.Fatalf("AddStock: A %v, B %v", resA.err, resB.err)
	}
	row, err := store.Voucher(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	left, err := ledgerOf(a).Cache.Remaining(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("database: stock %d initial %d; Redis remaining %d; A answered remaining %d, B answered stock %d remaining %d",
		row.Stock, row.InitialStock, left[view.ID], *resA.view.Remaining, resB.view.InitialStock, *resB.view.Remaining)
	if row.InitialStock != 40 {
		t.Fatalf("database initial stock %d, want 40", row.InitialStock)
	}
	if left[view.ID] != 40 {
		t.Errorf("Redis remaining %d after two additions answered 200 (10 + 10 + 20), want 40: an addition was lost", left[view.ID])
	}
	r := &redisledger.Reconciler{Vouchers: a, Repairer: ledgerOf(a), Store: store, Cache: ledgerOf(a).Cache}
	if rec, err := r.Reconcile(ctx, view.ID, false); err != nil || !rec.OK() {
		t.Errorf("reconcile after two additions answered 200: %+v, %v", rec, err)
	}
}

// TestPauseResumeTwoInstances: a resume on A and a pause on B at once
// apply in the same order in the database and in Redis. Forced: A stalls
// between its database write and its Redis write while B pauses. Without
// the voucher's control lock the database said paused (the admin page
// too) while Redis admitted (found by review).
func TestPauseResumeTwoInstances(t *testing.T) {
	t.Parallel()
	a, b, ha, _, store := twoInstances(t)
	ctx := context.Background()
	view, err := a.Create(ctx, onSale("paused race", 10))
	if err != nil {
		t.Fatal(err)
	}
	aRead, bDone := make(chan struct{}), make(chan struct{})
	fa := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		v, err := call() // the resume committed and read back
		close(aRead)
		// B pauses meanwhile, unless it waits for A's control lock: then
		// A goes on after a second.
		select {
		case <-bDone:
		case <-time.After(time.Second):
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
	p, err := b.Pause(ctx, view.ID, true)
	if err != nil || !p.Paused {
		t.Fatalf("pause = %+v, %v", p, err)
	}
	close(bDone)
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	pauseAgrees(t, a, store, view)
}

// TestListAfterPause: the instance that paused a voucher lists it paused
// at once, even when a List read was in flight across the pause (it is
// not kept).
func TestListAfterPause(t *testing.T) {
	t.Parallel()
	a, _, ha, _, _ := twoInstances(t)
	a.ListFor = time.Minute // as long as needed to see it; default 1 s
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
	done := make(chan struct{})
	go func() {
		a.List(ctx, 10)
		close(done)
	}()
	<-read
	if _, err := a.Pause(ctx, view.ID, true); err != nil {
		t.Fatal(err)
	}
	close(paused)
	<-done
	list, err := a.List(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Paused {
		t.Errorf("List after this instance's pause was answered: paused %v, want true", list[0].Paused)
	}
}

// TestAddStockPastRetention: stock added to a voucher past its retention
// (dropped from Redis) is refused as ended, and nothing is written; it
// was written, and answered 503 "ask again" for ever (found by review).
func TestAddStockPastRetention(t *testing.T) {
	t.Parallel()
	a, _, _, _, store := twoInstances(t)
	ctx := context.Background()
	view, err := a.Create(ctx, onSale("retired", 10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.End(ctx, view.ID); err != nil {
		t.Fatal(err)
	}
	// A day and more later: the voucher is dropped from Redis.
	a.Clock = func() time.Time { return time.Now().Add(seckill.DefaultRetention + time.Hour) }
	if dropped, err := ledgerOf(a).Cache.(interface {
		DropVoucher(context.Context, int64) (bool, error)
	}).DropVoucher(ctx, view.ID); err != nil || !dropped {
		t.Fatalf("DropVoucher = %v, %v", dropped, err)
	}
	for try := range 2 {
		_, err := a.AddStock(ctx, view.ID, "late", 5)
		t.Logf("AddStock try %d = %v", try, err)
		if errors.Is(err, seckill.ErrUnavailable) {
			t.Errorf("AddStock to a voucher past its retention = %v: 503, ask again (for ever)", err)
		}
	}
	if row, err := store.Voucher(ctx, view.ID); err == nil && row.InitialStock != 10 {
		t.Errorf("database initial stock %d of a voucher past its retention, refused: want 10", row.InitialStock)
	}
}

// TestListCallerGone: List's read is shared by the callers that join it;
// the first caller going away (a closed tab) fails none of the others (it
// failed them all with context.Canceled, a 500; found by review).
func TestListCallerGone(t *testing.T) {
	t.Parallel()
	a, _, ha, _, _ := twoInstances(t)
	ctx := context.Background()
	if _, err := a.Create(ctx, onSale("listed", 10)); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	f := func(call func() ([]*seckill.Voucher, error)) ([]*seckill.Voucher, error) {
		close(entered)
		<-release
		return call()
	}
	ha.vouchers.Store(&f)
	gone, cancel := context.WithCancel(ctx)
	go a.List(gone, 10) // the visitor who starts the read, then leaves
	<-entered
	joined := make(chan error, 1)
	go func() {
		_, err := a.List(ctx, 10)
		joined <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the second List join the read
	cancel()
	close(release)
	if err := <-joined; err != nil {
		t.Errorf("List of a visitor still there = %v (context.Canceled: %v; http answers it 500)", err, errors.Is(err, context.Canceled))
	}
}

// TestSpendClockSkew: a solution spent on one instance is refused on
// another whose clock is 30 s behind, after the mark would have gone with
// a TTL of a second past the expiry (found by review).
func TestSpendClockSkew(t *testing.T) {
	t.Parallel()
	a, vs, _, clkA := challenges(t, nil)
	v := challengeVoucher(t, vs, "skew", 10)
	sol := solve(t, a, 5, v.ID)
	claims, err := seckill.VerifySolution(a.Key, sol, clkA.Now())
	if err != nil {
		t.Fatal(err)
	}
	// B: the same service, on a clock 30 s behind A's.
	clkB := &clock{t: claims.Expires.Add(-30 * time.Second)}
	b := &seckill.ChallengeService{Key: a.Key, Vouchers: vs, Spent: a.Spent, Logger: a.Logger, Clock: clkB.Now, Config: a.Config}
	clkA.Set(claims.Expires.Add(-time.Millisecond)) // A spends it just before it expires, on A's clock
	if err := a.Check(t.Context(), 5, v.ID, sol.Header()); err != nil {
		t.Fatalf("first Check at A = %v", err)
	}
	time.Sleep(1100 * time.Millisecond) // the mark's TTL: 1 ms + 1 s
	if err := b.Check(t.Context(), 5, v.ID, sol.Header()); !errors.Is(err, seckill.ErrChallengeInvalid) {
		t.Errorf("second Check of one solution, at B (clock 30 s behind) = %v, want ErrChallengeInvalid", err)
	}
}

// TestListSyncRemaining: in the sync mode the remaining stock is the
// row's, so List reads the rows every time: an order placed shows at once.
func TestListSyncRemaining(t *testing.T) {
	t.Parallel()
	store := apptest.Store(t)
	logger := slog.New(slog.NewTextHandler(&logBuffer{}, nil))
	vs := &seckill.VoucherService{Ledger: &sqlledger.Ledger{Store: store}, Store: store, Logger: logger, Clock: time.Now, ListFor: time.Minute}
	ctx := context.Background()
	view, err := vs.Create(ctx, onSale("sync", 10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vs.List(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := store.PlaceOrder(ctx, &seckill.Order{ID: 77, UserID: 7, VoucherID: view.ID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	list, err := vs.List(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := *list[0].Remaining; got != 9 {
		t.Errorf("sync mode: List's remaining after one order = %d, want 9 (\"the stock as it is now\")", got)
	}
}

// pauseAgrees fails the test if the database says the voucher is paused
// (as the admin page shows it) while Redis admits a buy of it.
func pauseAgrees(t *testing.T, a *seckill.VoucherService, store seckill.Store, view *seckill.VoucherView) {
	t.Helper()
	ctx := context.Background()
	row, err := store.Voucher(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	err = ledgerOf(a).Cache.Admit(ctx, seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: 7, OrderID: 7007})
	t.Logf("database paused %v; Admit = %v", row.Paused, err)
	if row.Paused && !errors.Is(err, seckill.ErrPaused) {
		t.Errorf("the database says paused (and the admin page shows it), yet Admit = %v: admitted", err)
	}
}
