package seckill_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/sqlledger"
)

// unlockHook is a Redis ledger cache whose UnlockControl, once armed,
// runs after (once) when the lock is given back.
type unlockHook struct {
	redisledger.Cache
	after atomic.Pointer[func()]
}

func (u *unlockHook) UnlockControl(ctx context.Context, id int64, token string) error {
	err := u.Cache.UnlockControl(ctx, id, token)
	if f := u.after.Swap(nil); f != nil {
		(*f)()
	}
	return err
}

// TestAddStockAnswersTheStockItLeft: an addition answers the stock as it
// left it, read under the control lock. Read after the lock was given
// back, another instance's addition had unloaded it (and was rebuilding
// it), and the answer was 200 with no remaining stock.
func TestAddStockAnswersTheStockItLeft(t *testing.T) {
	t.Parallel()
	store := apptest.Store(t)
	logger := slog.New(slog.NewTextHandler(&logBuffer{}, nil))
	cache, _, _ := apptest.Redis(t, logger)
	hooked := &unlockHook{Cache: cache}
	hb := &hookedStore{Store: store}
	a := newVouchers(store, hooked, logger, time.Now)
	b := newVouchers(hb, cache, logger, time.Now)
	ctx := context.Background()
	for _, s := range []*seckill.VoucherService{a, b} {
		if err := ledgerOf(s).Restore(ctx); err != nil {
			t.Fatal(err)
		}
	}
	view, err := a.Create(ctx, onSale("answer after the lock", 10))
	if err != nil {
		t.Fatal(err)
	}
	bUnloaded, aDone, bDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	// B's reads of the row: whether the sale is over, then its restock's
	// (after its UnloadStock): there B waits for A's answer.
	fb2 := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		close(bUnloaded)
		<-aDone
		return call()
	}
	fb1 := func(call func() (*seckill.Voucher, error)) (*seckill.Voucher, error) {
		hb.voucher.Store(&fb2)
		return call()
	}
	after := func() {
		hb.voucher.Store(&fb1)
		go func() {
			_, err := b.AddStock(ctx, view.ID, "b", 5)
			bDone <- err
		}()
		select {
		case <-bUnloaded:
		case <-time.After(5 * time.Second):
			t.Error("B's addition did not unload")
		}
	}
	hooked.after.Store(&after)
	got, err := a.AddStock(ctx, view.ID, "a", 3)
	close(aDone)
	if err != nil {
		t.Fatalf("A's AddStock = %v", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("B's AddStock = %v", err)
	}
	if got.Remaining == nil {
		t.Errorf("A's AddStock answered 200 with remaining null: \"the answer's Remaining includes the units\" ")
	}
}

// rowCounting counts the reads of one voucher's row.
type rowCounting struct {
	seckill.Store
	reads atomic.Int64
}

func (c *rowCounting) Voucher(ctx context.Context, id int64) (*seckill.Voucher, error) {
	c.reads.Add(1)
	return c.Store.Voucher(ctx, id)
}

// TestListSyncTwoInstances: in the sync mode the rows are the sale, and
// a list at one instance shows another's order and pause at once, with
// one read of the rows, not one per voucher.
func TestListSyncTwoInstances(t *testing.T) {
	t.Parallel()
	store := apptest.Store(t)
	logger := slog.New(slog.NewTextHandler(&logBuffer{}, nil))
	counted := &rowCounting{Store: store}
	a := &seckill.VoucherService{Ledger: &sqlledger.Ledger{Store: counted}, Store: counted, Logger: logger, Clock: time.Now}
	b := &seckill.VoucherService{Ledger: &sqlledger.Ledger{Store: store}, Store: store, Logger: logger, Clock: time.Now}
	ctx := context.Background()
	var last *seckill.VoucherView
	for range 20 {
		v, err := b.Create(ctx, onSale("sync list", 10))
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	if _, err := a.List(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := store.PlaceOrder(ctx, &seckill.Order{ID: 77, UserID: 7, VoucherID: last.ID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pause(ctx, last.ID, true); err != nil {
		t.Fatal(err)
	}
	before := counted.reads.Load()
	list, err := a.List(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n := counted.reads.Load() - before; n > 1 {
		t.Errorf("one List of %d vouchers read a voucher's row %d times; want one query of the list", len(list), n)
	}
	for _, v := range list {
		if v.ID != last.ID {
			continue
		}
		if !v.Paused {
			t.Errorf("sync mode: A's list after B's pause shows the voucher not paused")
		}
		if v.Stock != *v.Remaining {
			t.Errorf("sync mode: A's list shows stock %d and remaining %d for one row", v.Stock, *v.Remaining)
		}
	}
}
