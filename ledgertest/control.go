package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// testControls: the operator's controls, through the voucher service
// (Ledger.Control), hold once they return: paused, no buyer is admitted;
// resumed, buyers are; stock added is sold exactly, once per key; ended,
// no buyer is admitted.
func (s suite) testControls(t *testing.T) {
	const stock, added, crowd = 4, 5, 30
	h := s.newHarness(t)
	ctx := t.Context()
	v := onSale(t, h, stock, 1)

	view, err := h.Vouchers.Pause(ctx, v.ID, true)
	if err != nil || !view.Paused {
		t.Fatalf("Pause = %+v, %v; want paused", view, err)
	}
	checkPaused(t, h, v, true)
	sold := buyAll(t, h.Ledger, newOrders(20, v.ID), 8, nil)
	for _, a := range sold.answers {
		checkKind(t, "Admit while paused", a.err, seckill.ErrPaused)
	}
	checkRemaining(t, h, v, stock)
	checkAgree(t, h, v)

	if view, err = h.Vouchers.Pause(ctx, v.ID, false); err != nil || view.Paused {
		t.Fatalf("resume: Pause = %+v, %v; want resumed", view, err)
	}
	checkPaused(t, h, v, false)
	var all []*seckill.Order
	for range 2 {
		o := order(nextID(), v.ID)
		if _, err := admit(ctx, h.Ledger, o); err != nil {
			t.Fatalf("Admit once resumed: %v", err)
		}
		all = append(all, o)
	}
	checkRemaining(t, h, v, stock-2)

	const key = "ledgertest-add"
	for i := range 2 {
		view, err := h.Vouchers.AddStock(ctx, v.ID, key, added)
		if err != nil {
			t.Fatalf("AddStock #%d: %v", i+1, err)
		}
		if view.Remaining == nil || *view.Remaining != stock-2+added {
			t.Errorf("AddStock #%d with one key: Remaining = %v; want %d", i+1, deref(view.Remaining), stock-2+added)
		}
		checkRemaining(t, h, v, stock-2+added)
	}
	if _, err := h.Vouchers.AddStock(ctx, v.ID, key, added+1); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Errorf("AddStock with the key of another addition = %v; want ErrInvalidArgument", err)
	}
	checkRemaining(t, h, v, stock-2+added)

	sold = buyAll(t, h.Ledger, newOrders(crowd, v.ID), crowd, nil)
	admitted := sold.admitted()
	if len(admitted) != stock-2+added {
		t.Errorf("%d of %d buyers admitted to the %d units left with those added; want all %d", len(admitted), crowd, stock-2+added, stock-2+added)
	}
	for _, a := range sold.answers {
		if a.err != nil {
			checkKind(t, "Admit once the stock added is sold", a.err, seckill.ErrSoldOut)
		}
	}
	checkRemaining(t, h, v, 0)
	all = append(all, admitted...)
	persisted(t, h, all)
	if r := checkAgree(t, h, v); r.InitialStock != stock+added || r.Stock != 0 {
		t.Errorf("voucher after the addition: stock %d of %d; want 0 of %d", r.Stock, r.InitialStock, stock+added)
	}
	checkOnlyAdmitted(t, h, sold)

	// Ended with stock left: nobody is admitted, whatever remains.
	w := onSale(t, h, 3, 1)
	first := order(nextID(), w.ID)
	if _, err := admit(ctx, h.Ledger, first); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	view, err = h.Vouchers.End(ctx, w.ID)
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	if r := row(t, h, w.ID); !r.EndTime.Equal(view.EndTime) || r.EndTime.After(time.Now()) {
		t.Errorf("End answered the end %v, the database holds %v; want the same, not after now", view.EndTime, r.EndTime)
	}
	sold = buyAll(t, h.Ledger, newOrders(10, w.ID), 5, nil)
	for _, a := range sold.answers {
		checkKind(t, "Admit once ended", a.err, seckill.ErrEnded)
	}
	persisted(t, h, []*seckill.Order{first})
	if r := checkAgree(t, h, w); r.Stock != 2 {
		t.Errorf("stock of the ended voucher = %d; want 2", r.Stock)
	}
}

// checkPaused fails t unless the database and the voucher service say v
// is paused (or not) as want.
func checkPaused(t *testing.T, h *Harness, v *seckill.Voucher, want bool) {
	t.Helper()
	if r := row(t, h, v.ID); r.Paused != want {
		t.Errorf("voucher %d paused in the database: %v; want %v", v.ID, r.Paused, want)
	}
	view, err := h.Vouchers.Get(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("Get(%d): %v", v.ID, err)
	}
	if view.Paused != want {
		t.Errorf("Get(%d).Paused = %v; want %v", v.ID, view.Paused, want)
	}
}

// newOrders returns n orders of the voucher, each of a new buyer.
func newOrders(n int, voucherID int64) []*seckill.Order {
	os := make([]*seckill.Order, n)
	for i := range os {
		os[i] = order(nextID(), voucherID)
	}
	return os
}
