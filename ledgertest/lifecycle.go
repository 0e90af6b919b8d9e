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

// testReturnUnitOnce: the unit of a cancelled order goes back once,
// however many ask at once (the sweeper and the buyer's cancellation, on
// several instances): the stock the buyers can take grows by exactly one.
// The Redis ledger gives it back once (one ReturnUnit true); the SQL
// ledger took it back with the cancellation (every ReturnUnit false). The
// cancelled buyer may not buy again; one new buyer, and only one, then
// takes the unit.
func (s suite) testReturnUnitOnce(t *testing.T) {
	const stock, returners = 5, 20
	h := s.newHarness(t)
	ctx := t.Context()
	v := onSale(t, h, stock, 1)
	orders := make([]*seckill.Order, stock+1)
	for i := range orders {
		orders[i] = order(nextID(), v.ID)
	}
	sold := buyAll(t, h.Ledger, orders, 4, nil)
	admitted := sold.admitted()
	if len(admitted) != stock {
		t.Fatalf("%d of %d buyers admitted to a stock of %d; want %d", len(admitted), len(orders), stock, stock)
	}
	persisted(t, h, admitted)
	checkRemaining(t, h, v, 0)

	victim := admitted[0]
	if o, err := h.Store.CancelOrder(ctx, victim.ID, seckill.ReasonBuyerCancelled, time.Now()); err != nil || o.Status != seckill.OrderCancelled {
		t.Fatalf("CancelOrder(%d) = %v, %v; want it cancelled", victim.ID, o, err)
	}
	var gave atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range returners {
		wg.Go(func() {
			<-start
			ok, err := h.Ledger.ReturnUnit(ctx, v, victim.UserID, victim.ID)
			if err != nil {
				t.Errorf("ReturnUnit: %v", err)
			}
			if ok {
				gave.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	want := int64(1)
	if h.InDatabase {
		want = 0
	}
	if got := gave.Load(); got != want {
		t.Errorf("%d of %d concurrent ReturnUnit of one order gave the unit back; want %d", got, returners, want)
	}
	checkRemaining(t, h, v, 1)
	if r := row(t, h, v.ID); r.Stock != 1 {
		t.Errorf("stock in the database after the cancellation = %d; want 1", r.Stock)
	}

	// The cancelled buyer is told of the cancelled order, not sold the
	// unit back.
	if _, err := admit(ctx, h.Ledger, order(victim.UserID, v.ID)); heldBy(err) != victim.ID {
		t.Errorf("the cancelled buyer asking again: Admit = %v; want ErrDuplicateOrder naming order %d", err, victim.ID)
	}
	// A ledger that remembers a voucher sold out sells a unit given back
	// after a while (redisledger.Ledger.SoldOutFor): the new buyer asks
	// until admitted, and is told sold out meanwhile, nothing else.
	taker := order(nextID(), v.ID)
	testenv.WaitFor(t, 10*time.Second, "a new buyer admitted to the unit given back", func() bool {
		_, err := admit(ctx, h.Ledger, taker)
		if err != nil && !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("a new buyer of the unit given back: Admit = %v; want nil or, for a while, ErrSoldOut", err)
		}
		return err == nil
	})
	if _, err := admit(ctx, h.Ledger, order(nextID(), v.ID)); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("a second new buyer of the one unit given back: Admit = %v; want ErrSoldOut", err)
	}
	checkRemaining(t, h, v, 0)

	persisted(t, h, []*seckill.Order{taker})
	if r := checkAgree(t, h, v); r.Stock != 0 {
		t.Errorf("stock in the database = %d; want 0", r.Stock)
	}
	if n, err := h.Store.CountOrders(ctx, v.ID); err != nil || n != stock {
		t.Errorf("CountOrders = %d, %v; want %d (the cancelled one no more, its unit's new buyer)", n, err, stock)
	}
}
