package ledgertest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill"
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
	others := 0
	for _, a := range sold.answers {
		if a.err != nil && !errors.Is(a.err, seckill.ErrSoldOut) {
			if others++; others <= 5 {
				t.Errorf("buyer %d: Admit = %v; want nil or ErrSoldOut", a.o.UserID, a.err)
			}
		}
	}
	if others > 5 {
		t.Errorf("... and %d more answers neither admitted nor sold out", others-5)
	}

	persisted(t, h, admitted)
	if r := checkAgree(t, h, v); r.Stock != 0 {
		t.Errorf("stock in the database = %d; want 0", r.Stock)
	}
	checkOnlyAdmitted(t, h, sold)
	// Every order in the database is one admitted, and each buyer's only.
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
			break
		}
		for _, o := range page {
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
	if len(users) != stock {
		t.Errorf("the database holds orders of %d buyers; want %d", len(users), stock)
	}
}
