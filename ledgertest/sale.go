package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// testLoad: a voucher created is loaded with its stock; loading it again
// keeps what the ledger holds; a voucher never loaded is absent from the
// Redis ledger (the SQL ledger reads its row), and its first buyer is
// admitted all the same (rebuilt from the database).
func (s suite) testLoad(t *testing.T) {
	h := s.newHarness(t)
	ctx := t.Context()
	v := onSale(t, h, 7, 1)
	checkRemaining(t, h, v, 7)

	first := order(nextID(), v.ID)
	if _, err := admit(ctx, h.Ledger, first); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	checkRemaining(t, h, v, 6)
	if err := h.Ledger.Load(ctx, v); err != nil {
		t.Fatalf("Load again: %v", err)
	}
	checkRemaining(t, h, v, 6)

	// Only in the database: as made by another instance whose load
	// failed, or lost since.
	now := first.CreatedAt
	unloaded := &seckill.Voucher{Title: "never loaded", Stock: 5, InitialStock: 5,
		BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
	if err := h.Store.CreateVoucher(ctx, unloaded); err != nil {
		t.Fatalf("CreateVoucher: %v", err)
	}
	n, held := remaining(t, h, unloaded)
	switch {
	case h.InDatabase && (!held || n != 5):
		t.Errorf("Remaining of a voucher only in the database = %d (held: %v); want its row's stock, 5", n, held)
	case !h.InDatabase && held:
		t.Errorf("Remaining of a voucher never loaded = %d; want it absent", n)
	}
	second := order(nextID(), unloaded.ID)
	if _, err := admit(ctx, h.Ledger, second); err != nil {
		t.Fatalf("Admit to a voucher never loaded: %v", err)
	}
	checkRemaining(t, h, unloaded, 4)

	persisted(t, h, []*seckill.Order{first, second})
	checkAgree(t, h, v)
	checkAgree(t, h, unloaded)
}

// testExactStock: many more buyers than units, all at once: exactly the
// stock is admitted, every other buyer is told sold out, and once written
// the database holds exactly those orders and no stock.
func (s suite) testExactStock(t *testing.T, shards int) {
	const stock, buyers, workers = 500, 2000, 64
	h := s.newHarness(t)
	v := onSale(t, h, stock, shards)
	orders := make([]*seckill.Order, buyers)
	for i := range orders {
		orders[i] = order(nextID(), v.ID)
	}
	sold := buyAll(t, h.Ledger, orders, workers, nil)
	t.Logf("%d buyers of %d units from %d goroutines: %v, %d retries", buyers, stock, workers, sold.elapsed, sold.retries.Load())

	admitted := sold.admitted()
	if len(admitted) != stock {
		t.Errorf("%d buyers admitted to a stock of %d; want exactly %d", len(admitted), stock, stock)
	}
	for _, o := range admitted {
		checkStatus(t, h, o)
	}
	checkRefusedSoldOut(t, sold)
	checkRemaining(t, h, v, 0)

	persisted(t, h, admitted)
	r := checkAgree(t, h, v)
	if r.Stock != 0 {
		t.Errorf("stock in the database = %d; want 0", r.Stock)
	}
	checkOnlyAdmitted(t, h, sold)
	checkBuyersOnce(t, h, v, admitted)
}

// testOneOrderPerBuyer: one buyer asking many times at once, with as many
// order ids, is admitted once; every other ask is told of that order. The
// Redis ledger names it as the buyer's (HeldOrder, HeldOrders); the SQL
// ledger names none, its buyers being the database's. Once written, the
// buyer asking again is told of the same order.
func (s suite) testOneOrderPerBuyer(t *testing.T, shards int) {
	const stock, asks, buyers = 10, 50, 3
	h := s.newHarness(t)
	ctx := t.Context()
	v := onSale(t, h, stock, shards)
	var won []*seckill.Order
	var sales []*sale
	for range buyers {
		user := nextID()
		orders := make([]*seckill.Order, asks)
		for i := range orders {
			orders[i] = order(user, v.ID)
		}
		sold := buyAll(t, h.Ledger, orders, asks, nil)
		admitted := sold.admitted()
		if len(admitted) != 1 {
			t.Fatalf("buyer %d asking %d times at once: %d asks admitted; want 1", user, asks, len(admitted))
		}
		winner := admitted[0]
		checkStatus(t, h, winner)
		won = append(won, winner)
		for _, a := range sold.answers {
			if a.err == nil {
				continue
			}
			if got := heldBy(a.err); got != winner.ID {
				t.Errorf("buyer %d's ask with order %d: Admit = %v (order %d); want ErrDuplicateOrder naming order %d",
					user, a.o.ID, a.err, got, winner.ID)
			}
		}

		held, err := h.Ledger.HeldOrder(ctx, user, v.ID)
		if err != nil {
			t.Fatalf("HeldOrder: %v", err)
		}
		all, err := h.Ledger.HeldOrders(ctx, user, v.ID)
		if err != nil {
			t.Fatalf("HeldOrders: %v", err)
		}
		want := winner.ID
		if h.InDatabase {
			want = 0
		}
		if held.OrderID != want || held.Unconfirmed {
			t.Errorf("HeldOrder(%d, %d) = %+v; want order %d, confirmed", user, v.ID, held, want)
		}
		if all[v.ID] != want || (want == 0 && len(all) != 0) {
			t.Errorf("HeldOrders(%d, %d) = %v; want %d", user, v.ID, all, want)
		}
		sales = append(sales, sold)
	}
	checkRemaining(t, h, v, stock-buyers)

	persisted(t, h, won)
	for _, sold := range sales {
		checkOnlyAdmitted(t, h, sold)
	}
	checkBuyersOnce(t, h, v, won)
	for _, w := range won {
		again := order(w.UserID, v.ID)
		if _, err := admit(ctx, h.Ledger, again); heldBy(err) != w.ID {
			t.Errorf("buyer %d asking again once written: Admit = %v; want ErrDuplicateOrder naming order %d", w.UserID, err, w.ID)
		}
	}
	r := checkAgree(t, h, v)
	if r.Stock != stock-buyers {
		t.Errorf("stock in the database = %d; want %d", r.Stock, stock-buyers)
	}
}

// checkStatus fails t unless an admitted order says where it is: written
// (the SQL ledger) or on its way (the Redis ledger).
func checkStatus(t *testing.T, h *Harness, o *seckill.Order) {
	t.Helper()
	want := seckill.OrderPending
	if h.InDatabase {
		want = seckill.OrderCreated
	}
	if o.Status != want {
		t.Errorf("order %d admitted with status %q; want %q", o.ID, o.Status, want)
	}
}

// checkOnlyAdmitted fails t if the database holds an order the ledger
// refused: called once the admitted ones are written.
func checkOnlyAdmitted(t *testing.T, h *Harness, sold *sale) {
	t.Helper()
	var refused []int64
	for _, a := range sold.answers {
		if a.err != nil {
			refused = append(refused, a.o.ID)
		}
	}
	if len(refused) == 0 {
		return
	}
	st, err := h.Store.OrderStatuses(t.Context(), refused)
	if err != nil {
		t.Fatalf("OrderStatuses: %v", err)
	}
	if len(st) != 0 {
		t.Errorf("%d refused orders are in the database: %v", len(st), st)
	}
}

// checkRefusedSoldOut fails t unless every buyer not admitted was told
// sold out, naming the first few who were not.
func checkRefusedSoldOut(t *testing.T, sold *sale) {
	t.Helper()
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
}
