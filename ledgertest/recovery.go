package ledgertest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// testRecovery: the ledger loses the voucher's sale twice while buyers
// keep buying (Harness.Lose), and rebuilds it from the database and the
// orders on their way there: exactly the stock is sold all the same, and
// no buyer holds two orders.
func (s suite) testRecovery(t *testing.T, shards int) {
	const stock, buyers, workers = 300, 1200, 32
	h := s.newHarness(t)
	v := onSale(t, h, stock, shards)

	// Lost after the 100th and the 200th admission, from the goroutine
	// that made it, while the others go on buying.
	var count atomic.Int64
	var lostMu sync.Mutex
	var lost []error
	during := func(a answer) {
		if a.err != nil {
			return
		}
		if n := count.Add(1); n == stock/3 || n == 2*stock/3 {
			err := h.Lose(t.Context(), v)
			lostMu.Lock()
			lost = append(lost, err)
			lostMu.Unlock()
		}
	}
	sold := buyAll(t, h.Ledger, newOrders(buyers, v.ID), workers, during)
	t.Logf("%d buyers of %d units from %d goroutines, the sale lost twice: %v, %d retries", buyers, stock, workers, sold.elapsed, sold.retries.Load())
	if len(lost) != 2 {
		t.Fatalf("the sale was lost %d times; want 2 (the stock was never two-thirds sold)", len(lost))
	}
	if err := errors.Join(lost...); err != nil {
		t.Fatalf("Lose: %v", err)
	}

	admitted := sold.admitted()
	if len(admitted) != stock {
		t.Errorf("%d buyers admitted to a stock of %d across two losses; want exactly %d", len(admitted), stock, stock)
	}
	checkRefusedSoldOut(t, sold)

	persisted(t, h, admitted)
	if r := checkAgree(t, h, v); r.Stock != 0 {
		t.Errorf("stock in the database = %d; want 0", r.Stock)
	}
	checkOnlyAdmitted(t, h, sold)
	checkBuyersOnce(t, h, v, admitted)
	if n, err := h.Store.CountOrders(t.Context(), v.ID); err != nil || n != stock {
		t.Errorf("CountOrders = %d, %v; want %d", n, err, stock)
	}
}

// testFlush: the ledger loses everything mid-sale, the orders on their
// way to the database too (Harness.Flush), while buyers keep buying. The
// orders lost are lost (the buyers told they were admitted are not in
// the database: the stream mode without replicas loses them, as
// documented), but the sale sells exactly its stock all the same, every
// order in the database was admitted, and no buyer holds two.
func (s suite) testFlush(t *testing.T, shards int) {
	const stock, buyers, workers = 300, 1200, 32
	h := s.newHarness(t)
	if h.Flush == nil {
		t.Fatal("RunFlush needs Harness.Flush")
	}
	if most, _ := h.Ledger.MaxShards(); shards > most {
		t.Skipf("the ledger takes at most %d shards", most)
	}
	v := onSale(t, h, stock, shards)
	var count atomic.Int64
	var flushed error
	flushedOnce := make(chan struct{})
	during := func(a answer) {
		if a.err == nil && count.Add(1) == stock/3 {
			flushed = h.Flush(t.Context())
			close(flushedOnce)
		}
	}
	sold := buyAll(t, h.Ledger, newOrders(buyers, v.ID), workers, during)
	t.Logf("%d buyers of %d units from %d goroutines, everything lost once: %v, %d retries", buyers, stock, workers, sold.elapsed, sold.retries.Load())
	select {
	case <-flushedOnce:
	default:
		t.Fatal("never flushed: the stock was never a third sold")
	}
	if flushed != nil {
		t.Fatalf("Flush: %v", flushed)
	}
	admitted := sold.admitted()
	checkRefusedSoldOut(t, sold)
	if len(admitted) < stock {
		t.Errorf("%d buyers admitted to a stock of %d; want at least the stock", len(admitted), stock)
	}

	// The database can hold no more than the stock: wait for all of it.
	testenv.WaitFor(t, 60*time.Second, "the whole stock sold in the database", func() bool {
		n, err := h.Store.CountOrders(t.Context(), v.ID)
		if err != nil {
			t.Logf("CountOrders: %v", err)
		}
		return n == stock
	})
	failed, err := h.Store.CountFailedOrders(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("CountFailedOrders: %v", err)
	}
	t.Logf("%d buyers admitted, %d orders in the database, %d failed, %d neither (lost with Redis, or still on their way)",
		len(admitted), stock, failed, int64(len(admitted))-stock-failed)
	if r := checkAgree(t, h, v); r.Stock != 0 {
		t.Errorf("stock in the database = %d; want 0", r.Stock)
	}
	checkOnlyAdmitted(t, h, sold)
	checkBuyersOnce(t, h, v, admitted)
}

// checkBuyersOnce fails t unless every order of v in the database is one
// of admitted, and no buyer holds two.
func checkBuyersOnce(t *testing.T, h *Harness, v *seckill.Voucher, admitted []*seckill.Order) {
	t.Helper()
	want := make(map[int64]bool, len(admitted))
	for _, o := range admitted {
		want[o.ID] = true
	}
	users := map[int64]int64{}
	var after int64
	for {
		page, err := h.Store.VoucherOrders(t.Context(), v.ID, after, 500)
		if err != nil {
			t.Fatalf("VoucherOrders: %v", err)
		}
		if len(page) == 0 {
			return
		}
		for _, o := range page {
			if !o.Status.HoldsUnit() {
				continue
			}
			if had, ok := users[o.UserID]; ok {
				t.Errorf("buyer %d holds orders %d and %d", o.UserID, had, o.ID)
			}
			users[o.UserID] = o.ID
			if !want[o.ID] {
				t.Errorf("order %d of buyer %d is in the database, not admitted", o.ID, o.UserID)
			}
		}
		after = page[len(page)-1].ID
	}
}
