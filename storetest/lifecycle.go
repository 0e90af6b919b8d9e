package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

// payWithin is the pay-by deadline of the suite's vouchers that have one.
const payWithin = 15 * time.Minute

// deadlineVoucher creates a voucher with the stock, a pay-by deadline of
// payWithin and the rebuy rule.
func deadlineVoucher(tb testing.TB, st seckill.Store, stock int64, rebuy bool) *seckill.Voucher {
	tb.Helper()
	v := &seckill.Voucher{
		Title:            fmt.Sprintf("voucher of %d, pay within %v, rebuy %v", stock, payWithin, rebuy),
		Stock:            stock,
		InitialStock:     stock,
		BeginTime:        base,
		EndTime:          base.Add(time.Hour),
		PayWithin:        payWithin,
		RebuyAfterCancel: rebuy,
	}
	if err := st.CreateVoucher(tb.Context(), v); err != nil {
		tb.Fatalf("CreateVoucher: %v", err)
	}
	return v
}

// created is how the store gives back o, saved as an order of a voucher
// with the pay-by deadline payWithin.
func created(o *seckill.Order) *seckill.Order {
	want := stored(o)
	want.PayBy = want.CreatedAt.Add(payWithin)
	return want
}

// paidAs is want paid by p.
func paidAs(want *seckill.Order, p seckill.Payment) *seckill.Order {
	o := *want
	o.Status, o.PaidAt, o.PaymentRef = seckill.OrderPaid, micro(p.At), p.Ref
	return &o
}

// cancelledAs is want cancelled with the reason at the time.
func cancelledAs(want *seckill.Order, reason string, at time.Time) *seckill.Order {
	o := *want
	o.Status, o.Reason, o.CancelledAt = seckill.OrderCancelled, reason, micro(at)
	return &o
}

// checkGot fails tb unless a lifecycle step (what) returned want.
func checkGot(tb testing.TB, what string, got *seckill.Order, err error, want *seckill.Order) {
	tb.Helper()
	if err != nil {
		tb.Errorf("%s: %v", what, err)
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("%s (-want +got):\n%s", what, diff)
	}
	checkUTC(tb, what, got.CreatedAt, got.PayBy, got.PaidAt, got.CancelledAt)
}

// checkCounts fails tb unless the voucher's LifecycleCounts are want.
func checkCounts(tb testing.TB, st seckill.Store, voucherID int64, want seckill.LifecycleCounts) {
	tb.Helper()
	got, err := st.LifecycleCounts(tb.Context(), voucherID)
	if err != nil {
		tb.Errorf("LifecycleCounts(%d): %v", voucherID, err)
		return
	}
	if diff := cmp.Diff(want, *got); diff != "" {
		tb.Errorf("LifecycleCounts(%d) (-want +got):\n%s", voucherID, diff)
	}
}

// payment is a payment at a time after base, with a reference naming it.
func payment(ref string, after time.Duration) seckill.Payment {
	return seckill.Payment{Ref: ref, At: base.Add(after)}
}

// testPay: a created order becomes paid with the payment's time and
// reference; paid again, it is the same answer, its first reference kept;
// a cancel then leaves it paid, its unit held.
func (s suite) testLifecyclePay(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	a := order(1, v.ID)
	save(t, st, a)

	p := payment("pay_1", time.Minute)
	paid := paidAs(created(a), p)
	got, err := st.PayOrder(ctx, a.ID, p)
	checkGot(t, "PayOrder", got, err, paid)
	got, err = st.PayOrder(ctx, a.ID, payment("pay_2", 2*time.Minute))
	checkGot(t, "PayOrder again, another reference", got, err, paid)
	got, err = st.CancelOrder(ctx, a.ID, seckill.ReasonBuyerCancelled, base.Add(3*time.Minute))
	checkGot(t, "CancelOrder of a paid order", got, err, paid)
	got, err = st.RefundOrder(ctx, a.ID, base.Add(4*time.Minute))
	checkGot(t, "RefundOrder of a paid order", got, err, paid)
	checkOrder(t, st, paid)
	checkStock(t, st, v.ID, 9, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Paid: 1})
}

// testCancel: a created order becomes cancelled, and its unit goes back to
// the stock once, however often it is cancelled; paid after, it becomes
// refunding (the payment kept, its unit not taken again), then refunded.
func (s suite) testLifecycleCancel(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	a, b := order(1, v.ID), order(2, v.ID)
	save(t, st, a, b)
	checkStock(t, st, v.ID, 8, 2)

	at := base.Add(time.Minute)
	cancelled := cancelledAs(created(a), seckill.ReasonBuyerCancelled, at)
	got, err := st.CancelOrder(ctx, a.ID, seckill.ReasonBuyerCancelled, at)
	checkGot(t, "CancelOrder", got, err, cancelled)
	checkStock(t, st, v.ID, 9, 1)
	got, err = st.CancelOrder(ctx, a.ID, seckill.ReasonNotPaid, at.Add(time.Minute))
	checkGot(t, "CancelOrder again", got, err, cancelled)
	checkStock(t, st, v.ID, 9, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Cancelled: 1, Unreturned: 1})

	p := payment("late", 5*time.Minute)
	refunding := paidAs(cancelled, p)
	refunding.Status = seckill.OrderRefunding
	got, err = st.PayOrder(ctx, a.ID, p)
	checkGot(t, "PayOrder of a cancelled order", got, err, refunding)
	got, err = st.PayOrder(ctx, a.ID, payment("later", 6*time.Minute))
	checkGot(t, "PayOrder of a refunding order", got, err, refunding)
	got, err = st.CancelOrder(ctx, a.ID, seckill.ReasonBuyerCancelled, at.Add(7*time.Minute))
	checkGot(t, "CancelOrder of a refunding order", got, err, refunding)
	checkStock(t, st, v.ID, 9, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Cancelled: 1, Unreturned: 1, Refunding: 1})

	refunded := *refunding
	refunded.Status = seckill.OrderRefunded
	got, err = st.RefundOrder(ctx, a.ID, base.Add(8*time.Minute))
	checkGot(t, "RefundOrder", got, err, &refunded)
	got, err = st.RefundOrder(ctx, a.ID, base.Add(9*time.Minute))
	checkGot(t, "RefundOrder again", got, err, &refunded)
	got, err = st.PayOrder(ctx, a.ID, payment("latest", 10*time.Minute))
	checkGot(t, "PayOrder of a refunded order", got, err, &refunded)
	got, err = st.RefundOrder(ctx, b.ID, base.Add(8*time.Minute))
	checkGot(t, "RefundOrder of a created order", got, err, created(b))
	checkOrder(t, st, &refunded)
	checkStock(t, st, v.ID, 9, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Cancelled: 1, Unreturned: 1, Refunded: 1})
}

// testNotFound: an order not in the database, or failed, cannot be paid,
// cancelled or refunded: ErrOrderNotFound, and nothing changes.
func (s suite) testLifecycleNotFound(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	f := order(1, v.ID)
	fail(t, st, f, "dead-lettered")
	for _, id := range []int64{f.ID, nextID()} {
		if got, err := st.PayOrder(ctx, id, payment("p", 0)); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("PayOrder(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
		}
		if got, err := st.CancelOrder(ctx, id, seckill.ReasonBuyerCancelled, base); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("CancelOrder(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
		}
		if got, err := st.RefundOrder(ctx, id, base); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("RefundOrder(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
		}
		if got, err := st.StartPayment(ctx, id, base); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("StartPayment(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
		}
		if got, err := st.CancelUnpaid(ctx, id, base, base); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("CancelUnpaid(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
		}
	}
	checkOrder(t, st, failedAs(f, "dead-lettered"))
	checkStock(t, st, v.ID, 10, 0)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{})
}

// testPayBy: an order of a voucher with a deadline reads PayBy created +
// PayWithin in every read; without a deadline, and failed, it is zero.
func (s suite) testLifecyclePayBy(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	w := newVoucher(t, st, 10)
	a, b, f := order(1, v.ID), order(1, w.ID), order(2, v.ID)
	a.CreatedAt = base.Add(1234567 * time.Nanosecond)
	save(t, st, a, b)
	fail(t, st, f, "failed")
	want := created(a)
	if want.PayBy != micro(a.CreatedAt).Add(payWithin) {
		t.Fatalf("the suite's created(): PayBy %v", want.PayBy)
	}
	checkOrder(t, st, want)
	checkOrder(t, st, stored(b)) // PayBy zero
	checkOrder(t, st, failedAs(f, "failed"))
	checkUserOrders(t, st, 1, 0, []*seckill.Order{stored(b), want})
	if got := walkVoucherOrders(t, st, v.ID, 10); len(got) != 1 || !cmp.Equal(got[0], want) {
		t.Errorf("VoucherOrders = %v; want [%+v]", got, want)
	}
	vs, err := st.DeadlineVouchers(ctx)
	if err != nil {
		t.Fatalf("DeadlineVouchers: %v", err)
	}
	if len(vs) != 1 || vs[0].ID != v.ID || vs[0].PayWithin != payWithin {
		t.Errorf("DeadlineVouchers = %+v; want voucher %d alone, PayWithin %v", vs, v.ID, payWithin)
	}
}

// testCountOrders: the orders holding a unit are counted, created and
// paid; cancelled ones are not, nor refunding and refunded ones.
func (s suite) testLifecycleCountOrders(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	os := orders(5, 1, v.ID)
	save(t, st, os...)
	mustPay(t, st, os[0].ID)
	mustCancel(t, st, os[1].ID)
	mustCancel(t, st, os[2].ID)
	mustPay(t, st, os[2].ID) // refunding
	if _, err := st.RefundOrder(ctx, os[2].ID, base); err != nil {
		t.Fatal(err)
	}
	mustCancel(t, st, os[3].ID)
	mustPay(t, st, os[3].ID) // refunding
	checkStock(t, st, v.ID, 8, 2)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Paid: 1, Cancelled: 3, Unreturned: 3, Refunding: 1, Refunded: 1})
	checkStatuses(t, st, orderIDs(os), map[int64]seckill.OrderStatus{
		os[0].ID: seckill.OrderPaid, os[1].ID: seckill.OrderCancelled, os[2].ID: seckill.OrderRefunded,
		os[3].ID: seckill.OrderRefunding, os[4].ID: seckill.OrderCreated,
	})
}

// mustPay pays the order, and fails tb on an error.
func mustPay(tb testing.TB, st seckill.Store, id int64) *seckill.Order {
	tb.Helper()
	o, err := st.PayOrder(tb.Context(), id, payment(fmt.Sprint("pay_", id), time.Minute))
	if err != nil {
		tb.Fatalf("PayOrder(%d): %v", id, err)
	}
	return o
}

// mustCancel cancels the order as its buyer, and fails tb on an error.
func mustCancel(tb testing.TB, st seckill.Store, id int64) *seckill.Order {
	tb.Helper()
	o, err := st.CancelOrder(tb.Context(), id, seckill.ReasonBuyerCancelled, base.Add(time.Minute))
	if err != nil {
		tb.Fatalf("CancelOrder(%d): %v", id, err)
	}
	return o
}

// testRebuyNo: without RebuyAfterCancel a cancelled order keeps its
// buyer's slot: a new order of the buyer is a BuyerConflict, and the sync
// mode answers the cancelled order; it is listed for the cache's rebuild.
func (s suite) testLifecycleNoRebuy(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	a := order(1, v.ID)
	save(t, st, a)
	mustCancel(t, st, a.ID)
	b := order(1, v.ID)
	if got := save(t, st, b); got[0] != seckill.BuyerConflict {
		t.Errorf("SaveOrders of a new order of a buyer with a cancelled order = %v; want %v", got[0], seckill.BuyerConflict)
	}
	c := order(1, v.ID)
	checkRefusal(t, "PlaceOrder of a buyer with a cancelled order", st.PlaceOrder(ctx, c, base.Add(time.Minute)), duplicate(a.ID))
	checkNoOrder(t, st, b.ID)
	checkNoOrder(t, st, c.ID)
	checkStock(t, st, v.ID, 10, 0)
	if got := walkVoucherOrders(t, st, v.ID, 10); len(got) != 1 || got[0].ID != a.ID || got[0].Status != seckill.OrderCancelled {
		t.Errorf("VoucherOrders = %v; want the cancelled order %d alone, cancelled", orderIDs(got), a.ID)
	}
	// The same by the deadline.
	d := order(2, v.ID)
	save(t, st, d)
	if due, err := st.CancelDue(ctx, v.ID, base.Add(time.Hour), base.Add(time.Hour), base.Add(time.Hour), 10); err != nil || len(due) != 1 {
		t.Fatalf("CancelDue = %v, %v; want order %d", due, err, d.ID)
	}
	if got := save(t, st, order(2, v.ID)); got[0] != seckill.BuyerConflict {
		t.Errorf("SaveOrders of a new order of a buyer with an order cancelled by the deadline = %v; want %v", got[0], seckill.BuyerConflict)
	}
	checkStock(t, st, v.ID, 10, 0)
}

// testRebuyYes: with RebuyAfterCancel a cancelled order frees its buyer's
// slot: their new order is saved (and placed, in the sync mode), the old
// one stays cancelled, and both are listed for the rebuild, each with its
// status (the cache must know the cancelled one's unit went back).
func (s suite) testLifecycleRebuy(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, true)
	a, d := order(1, v.ID), order(2, v.ID)
	save(t, st, a, d)
	mustCancel(t, st, a.ID)
	// With a redelivery of d, so that a store that first tries a batch as
	// all new also looks the buyers up.
	b := order(1, v.ID)
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.Saved, seckill.AlreadySaved}, save(t, st, b, d)); diff != "" {
		t.Errorf("SaveOrders of a new order of a buyer whose order was cancelled, and a redelivery (-want +got):\n%s", diff)
	}
	// A redelivery of the cancelled order changes nothing.
	if got := save(t, st, a); got[0] != seckill.AlreadySaved {
		t.Errorf("SaveOrders of the cancelled order again = %v; want %v", got[0], seckill.AlreadySaved)
	}
	// Nor in one batch with the buyer's next order, which goes in: the
	// cancelled order no longer holds the buyer (an admitted order lost,
	// else).
	mustCancel(t, st, d.ID)
	c := order(2, v.ID)
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.AlreadySaved, seckill.Saved}, save(t, st, d, c)); diff != "" {
		t.Errorf("SaveOrders of a redelivered cancelled order and its buyer's next order (-want +got):\n%s", diff)
	}
	cancelled := cancelledAs(created(a), seckill.ReasonBuyerCancelled, base.Add(time.Minute))
	checkOrder(t, st, cancelled)
	checkOrder(t, st, created(b))
	// A buyer with a new order again holds the slot.
	if got := save(t, st, order(1, v.ID)); got[0] != seckill.BuyerConflict {
		t.Errorf("SaveOrders of a third order = %v; want %v", got[0], seckill.BuyerConflict)
	}

	// The deadline frees the slot too, and the sync mode places an order.
	if due, err := st.CancelDue(ctx, v.ID, base.Add(time.Second), base.Add(time.Second), base.Add(time.Hour), 10); err != nil || len(due) != 2 {
		t.Fatalf("CancelDue = %v, %v; want orders %d and %d", orderIDs(due), err, b.ID, c.ID)
	}
	e := order(2, v.ID)
	checkRefusal(t, "PlaceOrder of a buyer whose order was cancelled", st.PlaceOrder(ctx, e, base.Add(time.Minute)), nil)
	checkRefusal(t, "PlaceOrder again", st.PlaceOrder(ctx, order(2, v.ID), base.Add(time.Minute)), duplicate(e.ID))
	checkStock(t, st, v.ID, 9, 1)
	swept := base.Add(time.Hour)
	want := []*seckill.Order{
		cancelled,
		cancelledAs(created(d), seckill.ReasonBuyerCancelled, base.Add(time.Minute)),
		cancelledAs(created(b), seckill.ReasonNotPaid, swept),
		cancelledAs(created(c), seckill.ReasonNotPaid, swept),
		created(e),
	}
	if diff := cmp.Diff(want, walkVoucherOrders(t, st, v.ID, 2)); diff != "" {
		t.Errorf("VoucherOrders: want every order, the cancelled ones too (-want +got):\n%s", diff)
	}
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Cancelled: 4, Unreturned: 4})
}

// testCancelDue: a sweep cancels the voucher's created orders written
// before the time, the earliest first, up to the limit, gives their units
// back, and touches no other order. The suite's orders are admitted at
// base, ahead of the clock: each is written at its CreatedAt.
func (s suite) testCancelDue(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 20, false)
	w := deadlineVoucher(t, st, 20, false)
	os := orders(6, 1, v.ID)
	for i, o := range os {
		o.CreatedAt = base.Add(time.Duration(5-i) * time.Second) // the last oldest
	}
	other := order(1, w.ID)
	save(t, st, append(os, other)...)
	mustPay(t, st, os[5].ID)            // the oldest, paid
	mustCancel(t, st, os[4].ID)         // the next, cancelled already
	before := base.Add(4 * time.Second) // os[1]'s creation: not due
	at := base.Add(time.Hour)

	due, err := st.CancelDue(ctx, v.ID, before.Add(time.Second), before.Add(time.Second), at, 2)
	want := []*seckill.Order{
		cancelledAs(created(os[3]), seckill.ReasonNotPaid, at),
		cancelledAs(created(os[2]), seckill.ReasonNotPaid, at),
	}
	if diff := cmp.Diff(want, due); err != nil || diff != "" {
		t.Errorf("CancelDue, limit 2: %v (-want +got):\n%s", err, diff)
	}
	// os[1] was made at before: not due.
	due, err = st.CancelDue(ctx, v.ID, before, before, at, 10)
	if err != nil || len(due) != 0 {
		t.Errorf("CancelDue of none due = %v, %v; want none", orderIDs(due), err)
	}
	checkOrder(t, st, created(os[1]))
	checkOrder(t, st, created(os[0]))
	checkOrder(t, st, created(other))
	checkStock(t, st, v.ID, 17, 3)
	checkStock(t, st, w.ID, 19, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 2, Paid: 1, Cancelled: 3, Unreturned: 3})
	if due, err := st.CancelDue(ctx, nextID(), at, at, at, 10); err != nil || len(due) != 0 {
		t.Errorf("CancelDue of no voucher = %v, %v; want none", due, err)
	}
}

// testUnreturned: cancelled orders are unreturned until MarkReturned;
// created ones are never marked.
func (s suite) testUnreturned(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	os := orders(4, 1, v.ID)
	save(t, st, os...)
	early, late := base.Add(time.Minute), base.Add(2*time.Minute)
	for i, at := range map[int]time.Time{0: early, 1: late, 2: early} {
		if _, err := st.CancelOrder(ctx, os[i].ID, seckill.ReasonBuyerCancelled, at); err != nil {
			t.Fatal(err)
		}
	}
	mustPay(t, st, os[2].ID) // refunding: still unreturned

	got, err := st.Unreturned(ctx, v.ID, late, 10)
	if err != nil {
		t.Fatalf("Unreturned: %v", err)
	}
	if diff := cmp.Diff([]int64{os[0].ID, os[2].ID}, orderIDs(got)); diff != "" {
		t.Errorf("Unreturned cancelled before %v (-want +got):\n%s", late, diff)
	}
	if got, _ := st.Unreturned(ctx, v.ID, late.Add(time.Second), 1); len(got) != 1 {
		t.Errorf("Unreturned, limit 1 = %v; want 1 order", orderIDs(got))
	}
	if err := st.MarkReturned(ctx, []int64{os[0].ID, os[2].ID, os[3].ID, nextID()}); err != nil {
		t.Fatalf("MarkReturned: %v", err)
	}
	if err := st.MarkReturned(ctx, nil); err != nil {
		t.Fatalf("MarkReturned(nil): %v", err)
	}
	got, err = st.Unreturned(ctx, v.ID, late.Add(time.Second), 10)
	if diff := cmp.Diff([]int64{os[1].ID}, orderIDs(got)); err != nil || diff != "" {
		t.Errorf("Unreturned after MarkReturned: %v (-want +got):\n%s", err, diff)
	}
	want := cancelledAs(created(os[0]), seckill.ReasonBuyerCancelled, early)
	want.Returned = true
	checkOrder(t, st, want)
	checkOrder(t, st, created(os[3])) // created: not marked
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: 1, Cancelled: 3, Unreturned: 1, Refunding: 1})
}

// testPaymentEvents: an event is new once; its id compares exactly.
func (s suite) testPaymentEvents(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	for _, tc := range []struct {
		id   string
		want bool
	}{{"evt_1NG8Du2eZvKYlo2C", true}, {"evt_1NG8Du2eZvKYlo2C", false}, {"evt_1ng8du2ezvkylo2c", true}, {"evt_2", true}} {
		got, err := st.RecordPaymentEvent(ctx, tc.id, 42, base)
		if err != nil || got != tc.want {
			t.Errorf("RecordPaymentEvent(%q) = %v, %v; want %v", tc.id, got, err, tc.want)
		}
	}
}

// testPayCancelRace: a payment, a buyer's cancel and a sweep of its
// voucher race for each of many orders, the three launched at once. Each
// order ends paid, or cancelled (refunding, since the payment came
// second): never both, and each answer agrees with where it ended; its
// voucher's stock rose by one if it was cancelled, else not at all.
func (s suite) testPayCancelRace(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	const n = 150
	os := make([]*seckill.Order, n)
	for i := range os {
		// A voucher each, so that each sweep races for one order.
		os[i] = order(int64(i+1), deadlineVoucher(t, st, 1, false).ID)
	}
	save(t, st, os...)

	type answers struct {
		pay, cancel *seckill.Order
		swept       []*seckill.Order
	}
	got := make([]answers, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	// Let go in waves of 10 orders, 30 callers: each order's three still
	// race, and SQLite's one write lock is not fought over by hundreds at
	// once (a caller could wait past its busy timeout on a loaded machine).
	const wave = 10
	var start chan struct{}
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i, o := range os {
		if i%wave == 0 {
			if start != nil {
				close(start)
				wg.Wait()
			}
			start = make(chan struct{})
		}
		start := start
		wg.Go(func() {
			<-start
			p, err := st.PayOrder(ctx, o.ID, payment(fmt.Sprint("pay_", o.ID), time.Minute))
			if err != nil {
				report(fmt.Errorf("PayOrder: %w", err))
			}
			got[i].pay = p
		})
		wg.Go(func() {
			<-start
			c, err := st.CancelOrder(ctx, o.ID, seckill.ReasonBuyerCancelled, base.Add(time.Minute))
			if err != nil {
				report(fmt.Errorf("CancelOrder: %w", err))
			}
			got[i].cancel = c
		})
		wg.Go(func() {
			<-start
			due, err := st.CancelDue(ctx, o.VoucherID, base.Add(time.Hour), base.Add(time.Hour), base.Add(time.Hour), 5)
			if err != nil {
				report(fmt.Errorf("CancelDue: %w", err))
			}
			got[i].swept = due
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	var paid, byBuyer, bySweep int
	for i, o := range os {
		final, err := st.Order(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		a := got[i]
		swept := len(a.swept) == 1 && a.swept[0].ID == o.ID
		if len(a.swept) > 1 || len(a.swept) == 1 && !swept {
			t.Errorf("the sweep of order %d's voucher returned %v", o.ID, orderIDs(a.swept))
		}
		var units int64 // back in the stock
		switch {
		case final.Status == seckill.OrderPaid:
			paid++
			if a.pay.Status != seckill.OrderPaid || a.cancel.Status != seckill.OrderPaid || swept || !final.CancelledAt.IsZero() {
				t.Errorf("order %d ended paid; pay answered %s, cancel %s, swept %v", o.ID, a.pay.Status, a.cancel.Status, swept)
			}
		case final.Status == seckill.OrderRefunding && final.Reason == seckill.ReasonNotPaid:
			bySweep++
			units = 1
			if a.pay.Status != seckill.OrderRefunding || !a.cancel.Status.Cancelled() || !swept {
				t.Errorf("order %d ended cancelled by the deadline; pay answered %s, cancel %s, swept %v", o.ID, a.pay.Status, a.cancel.Status, swept)
			}
		case final.Status == seckill.OrderRefunding && final.Reason == seckill.ReasonBuyerCancelled:
			byBuyer++
			units = 1
			if a.pay.Status != seckill.OrderRefunding || !a.cancel.Status.Cancelled() || swept {
				t.Errorf("order %d ended cancelled by its buyer; pay answered %s, cancel %s, swept %v", o.ID, a.pay.Status, a.cancel.Status, swept)
			}
		default:
			t.Errorf("order %d ended %+v; want paid, or refunding", o.ID, final)
		}
		checkStock(t, st, o.VoucherID, units, 1-units)
	}
	t.Logf("%d paid, %d cancelled by their buyer, %d by a sweep", paid, byBuyer, bySweep)
}

// testCancelDueConcurrent: sweepers at once over thousands of due orders
// cancel each exactly once between them, give back exactly as many units,
// and leave the orders not due alone.
func (s suite) testCancelDueConcurrent(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	const (
		nDue    = 2000
		nNotDue = 100
		nPaid   = 100
	)
	v := deadlineVoucher(t, st, nDue+nNotDue+nPaid, false)
	before := base.Add(time.Hour)
	all := orders(nDue+nNotDue+nPaid, 1, v.ID)
	for i, o := range all {
		if i >= nDue && i < nDue+nNotDue {
			o.CreatedAt = before.Add(time.Duration(i-nDue) * time.Microsecond) // at before or after: not due
		} else {
			o.CreatedAt = base.Add(time.Duration(i) * time.Millisecond)
		}
	}
	for chunk := range slices.Chunk(all, 500) {
		save(t, st, chunk...)
	}
	for _, o := range all[nDue+nNotDue:] {
		mustPay(t, st, o.ID)
	}

	const sweepers = 4
	results := make([][]*seckill.Order, sweepers)
	errs := make([]error, sweepers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sweepers {
		wg.Go(func() {
			<-start
			for transient := 0; ; {
				due, err := st.CancelDue(ctx, v.ID, before, before, before.Add(time.Minute), 100)
				// A transient failure (SQLite's lock waited on past its
				// busy timeout, on a loaded machine) is swept again, as
				// the sweeper does at its next tick.
				if errors.Is(err, seckill.ErrTransient) && transient < 20 {
					transient++
					continue
				}
				if err != nil {
					errs[i] = err
					return
				}
				if !slices.IsSortedFunc(due, func(a, b *seckill.Order) int { return a.PayBy.Compare(b.PayBy) }) {
					errs[i] = fmt.Errorf("a sweep returned orders out of deadline order: %v", orderIDs(due))
					return
				}
				if len(due) == 0 {
					return
				}
				results[i] = append(results[i], due...)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("sweeper %d: %v", i, err)
		}
	}
	cancelled := map[int64]int{}
	var total int64
	for i, rs := range results {
		t.Logf("sweeper %d cancelled %d", i, len(rs))
		for _, o := range rs {
			cancelled[o.ID]++
			total++
			if o.Status != seckill.OrderCancelled || o.Reason != seckill.ReasonNotPaid {
				t.Errorf("swept order %d is %s, %q", o.ID, o.Status, o.Reason)
			}
		}
	}
	if total != nDue || len(cancelled) != nDue {
		t.Errorf("sweeps returned %d orders, %d distinct; want each of the %d due once", total, len(cancelled), nDue)
	}
	for _, o := range all[:nDue] {
		if cancelled[o.ID] != 1 {
			t.Errorf("due order %d cancelled %d times", o.ID, cancelled[o.ID])
		}
	}
	for _, o := range all[nDue:] {
		if cancelled[o.ID] != 0 {
			t.Errorf("order %d, not due or paid, was cancelled", o.ID)
		}
	}
	checkStock(t, st, v.ID, nDue, nNotDue+nPaid)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Created: nNotDue, Paid: nPaid, Cancelled: nDue, Unreturned: nDue})
	got, err := st.Unreturned(ctx, v.ID, before.Add(time.Hour), 0)
	if err != nil || len(got) != 1000 {
		t.Errorf("Unreturned, no limit = %d orders, %v; want 1000 (the default)", len(got), err)
	}
}

// testPayByFromWrite: an order's deadline counts from when it is written,
// not from its admission (CreatedAt). An order admitted longer than
// PayWithin ago (a worker's backlog, or the database down, in the stream
// and queue modes) and written now is not due at once, however it is
// written (SaveOrders as a new batch, SaveOrders looked up beside a
// redelivery, PlaceOrder): its PayBy is the write + PayWithin in every
// read, and a sweep takes it just after the write's time, not at it. An
// order admitted ahead of the store's clock (a clock ahead of the
// database host's) is never payable before its admission: it keeps PayBy
// = CreatedAt + PayWithin.
func (s suite) testPayByFromWrite(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	other := newVoucher(t, st, 10)
	writes := []struct {
		name  string
		write func(t *testing.T, o *seckill.Order)
	}{
		{"SaveOrders", func(t *testing.T, o *seckill.Order) {
			if got := save(t, st, o); got[0] != seckill.Saved {
				t.Fatalf("SaveOrders = %v; want %v", got, seckill.Saved)
			}
		}},
		{"SaveOrders/LookedUp", func(t *testing.T, o *seckill.Order) {
			// A redelivery in the batch: a store that first tries a batch
			// as all new then looks it up.
			r := order(o.UserID+1000, other.ID)
			save(t, st, r)
			if diff := cmp.Diff([]seckill.SaveOutcome{seckill.AlreadySaved, seckill.Saved}, save(t, st, r, o)); diff != "" {
				t.Fatalf("SaveOrders of a redelivery and a new order (-want +got):\n%s", diff)
			}
		}},
		{"PlaceOrder", func(t *testing.T, o *seckill.Order) {
			checkRefusal(t, "PlaceOrder", st.PlaceOrder(ctx, o, open), nil)
		}},
	}
	var user int64
	for _, w := range writes {
		for _, admitted := range []struct {
			name  string
			at    time.Time
			ahead bool
		}{
			{"AdmittedLongAgo", time.Now().Add(-2 * payWithin), false},
			{"AdmittedAhead", base, true},
		} {
			t.Run(w.name+"/"+admitted.name, func(t *testing.T) {
				user++
				v := deadlineVoucher(t, st, 10, false)
				o := order(user, v.ID)
				o.CreatedAt = admitted.at
				before := time.Now()
				w.write(t, o)
				after := time.Now()

				// Written between before and after, or at CreatedAt if later.
				from, to := micro(before), micro(after)
				if admitted.ahead {
					from, to = micro(o.CreatedAt), micro(o.CreatedAt)
				}
				got, err := st.Order(ctx, o.ID)
				if err != nil {
					t.Fatalf("Order: %v", err)
				}
				if got.PayBy.Before(from.Add(payWithin)) || got.PayBy.After(to.Add(payWithin)) {
					t.Fatalf("PayBy = %v (CreatedAt %v); want the write + %v, between %v and %v",
						got.PayBy, got.CreatedAt, payWithin, from.Add(payWithin), to.Add(payWithin))
				}
				want := created(o)
				want.PayBy = got.PayBy
				checkGot(t, "Order", got, nil, want)
				checkUserOrders(t, st, user, 0, []*seckill.Order{want})
				if diff := cmp.Diff([]*seckill.Order{want}, walkVoucherOrders(t, st, v.ID, 10)); diff != "" {
					t.Errorf("VoucherOrders (-want +got):\n%s", diff)
				}

				// The sweeper's call, now: not due.
				now := time.Now()
				if due, err := st.CancelDue(ctx, v.ID, now.Add(-payWithin), now.Add(-payWithin), now, 10); err != nil || len(due) != 0 {
					t.Errorf("CancelDue now = %v, %v; want none: the order was just written", orderIDs(due), err)
				}
				// Due once its PayBy passed, and not at it.
				written := want.PayBy.Add(-payWithin)
				if due, err := st.CancelDue(ctx, v.ID, written, written, now, 10); err != nil || len(due) != 0 {
					t.Errorf("CancelDue of orders written before %v = %v, %v; want none: the order was written then", written, orderIDs(due), err)
				}
				at := now.Add(payWithin)
				due, err := st.CancelDue(ctx, v.ID, written.Add(time.Microsecond), written.Add(time.Microsecond), at, 10)
				if diff := cmp.Diff([]*seckill.Order{cancelledAs(want, seckill.ReasonNotPaid, at)}, due); err != nil || diff != "" {
					t.Errorf("CancelDue just after the write: %v (-want +got):\n%s", err, diff)
				}
				checkStock(t, st, v.ID, 10, 0)
			})
		}
	}
}

// testVoucherOrdersEveryStatus: VoucherOrders lists every order of the
// voucher in the orders table, by id, each with its status: created, paid,
// cancelled (one of a voucher with RebuyAfterCancel too, which freed its
// buyer's slot, beside the buyer's next order), refunding and refunded;
// failed orders are not listed.
func (s suite) testVoucherOrdersEveryStatus(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, true)
	os := orders(5, 1, v.ID)
	save(t, st, os...)
	mustPay(t, st, os[1].ID)
	mustCancel(t, st, os[2].ID)
	mustCancel(t, st, os[3].ID)
	mustPay(t, st, os[3].ID) // refunding
	mustCancel(t, st, os[4].ID)
	mustPay(t, st, os[4].ID)
	if _, err := st.RefundOrder(ctx, os[4].ID, base); err != nil {
		t.Fatal(err)
	}
	again := order(os[2].UserID, v.ID) // the buyer of the cancelled order buys again
	save(t, st, again)
	fail(t, st, order(6, v.ID), "failed")

	listed := append(os, again)
	want := make([]*seckill.Order, len(listed))
	for i, o := range listed {
		got, err := st.Order(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = got
	}
	wantStatus := []seckill.OrderStatus{seckill.OrderCreated, seckill.OrderPaid, seckill.OrderCancelled,
		seckill.OrderRefunding, seckill.OrderRefunded, seckill.OrderCreated}
	for i, o := range want {
		if o.Status != wantStatus[i] {
			t.Fatalf("order %d is %s; the test wants it %s", o.ID, o.Status, wantStatus[i])
		}
	}
	for _, limit := range []int{1, 4, 10} {
		if diff := cmp.Diff(want, walkVoucherOrders(t, st, v.ID, limit)); diff != "" {
			t.Errorf("VoucherOrders, %d at a time (-want +got):\n%s", limit, diff)
		}
	}
}

// testDeadlineVouchersOpen: DeadlineVouchers lists, newest first, the
// vouchers with a deadline that have a created order or a cancelled one
// whose unit is unreturned (refunding too); not those whose orders are all
// paid, or cancelled and returned, nor one without orders or without a
// deadline. A settled voucher comes back when an order of it is written
// late, and goes once that order is settled.
func (s suite) testDeadlineVouchersOpen(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	settled := deadlineVoucher(t, st, 10, false)
	withCreated := deadlineVoucher(t, st, 10, false)
	withUnreturned := deadlineVoucher(t, st, 10, false)
	withRefunding := deadlineVoucher(t, st, 10, false)
	_ = deadlineVoucher(t, st, 10, false) // no orders
	noDeadline := newVoucher(t, st, 10)

	paid, returned := order(1, settled.ID), order(2, settled.ID)
	c, u, r, n := order(1, withCreated.ID), order(1, withUnreturned.ID), order(1, withRefunding.ID), order(1, noDeadline.ID)
	save(t, st, paid, returned, c, u, r, n)
	mustPay(t, st, paid.ID)
	mustCancel(t, st, returned.ID)
	if err := st.MarkReturned(ctx, []int64{returned.ID}); err != nil {
		t.Fatalf("MarkReturned: %v", err)
	}
	mustCancel(t, st, u.ID)
	mustCancel(t, st, r.ID)
	mustPay(t, st, r.ID) // refunding, its unit unreturned

	check := func(what string, want ...*seckill.Voucher) {
		t.Helper()
		vs, err := st.DeadlineVouchers(ctx)
		if err != nil {
			t.Fatalf("DeadlineVouchers: %v", err)
		}
		var wantIDs []int64
		for _, v := range want {
			wantIDs = append(wantIDs, v.ID)
		}
		var gotIDs []int64
		for _, v := range vs {
			gotIDs = append(gotIDs, v.ID)
			if v.PayWithin != payWithin {
				t.Errorf("%s: DeadlineVouchers: voucher %d PayWithin %v; want %v", what, v.ID, v.PayWithin, payWithin)
			}
		}
		if diff := cmp.Diff(wantIDs, gotIDs); diff != "" {
			t.Errorf("%s: DeadlineVouchers (-want +got):\n%s", what, diff)
		}
	}
	check("settled left out", withRefunding, withUnreturned, withCreated)

	late := order(3, settled.ID)
	save(t, st, late)
	check("an order written late", withRefunding, withUnreturned, withCreated, settled)

	mustPay(t, st, late.ID)
	mustPay(t, st, c.ID)
	if err := st.MarkReturned(ctx, []int64{u.ID, r.ID}); err != nil {
		t.Fatalf("MarkReturned: %v", err)
	}
	check("all settled")
}

// startedAs is want with its payment started at the time.
func startedAs(want *seckill.Order, at time.Time) *seckill.Order {
	o := *want
	o.PaymentStartedAt = micro(at)
	return &o
}

// testStartPayment: the first start of a created order's payment is
// recorded, in every read, and kept through a second start, the payment
// and the order's later life; an order paid or cancelled first records
// none.
func (s suite) testStartPayment(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	a, paid, cancelled := order(1, v.ID), order(2, v.ID), order(3, v.ID)
	save(t, st, a, paid, cancelled)
	first := base.Add(time.Minute + 1234*time.Nanosecond)

	got, err := st.StartPayment(ctx, a.ID, first)
	want := startedAs(created(a), first)
	checkGot(t, "StartPayment", got, err, want)
	checkUTC(t, "StartPayment", got.PaymentStartedAt)
	got, err = st.StartPayment(ctx, a.ID, first.Add(time.Minute))
	checkGot(t, "StartPayment again", got, err, want)
	checkOrder(t, st, want)
	checkUserOrders(t, st, a.UserID, 0, []*seckill.Order{want})
	p := payment("pay_a", 3*time.Minute)
	got, err = st.PayOrder(ctx, a.ID, p)
	checkGot(t, "PayOrder of a started order", got, err, paidAs(want, p))

	wantPaid := mustPay(t, st, paid.ID)
	got, err = st.StartPayment(ctx, paid.ID, first)
	checkGot(t, "StartPayment of a paid order", got, err, wantPaid)
	wantCancelled := mustCancel(t, st, cancelled.ID)
	got, err = st.StartPayment(ctx, cancelled.ID, first)
	checkGot(t, "StartPayment of a cancelled order", got, err, wantCancelled)
}

// testCancelDueStarted: an order whose payment was started is held past
// its PayBy: due only once written before startedBefore (its grace over),
// while an order of the same time never started is due at before.
func (s suite) testCancelDueStarted(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	unstarted, started := order(1, v.ID), order(2, v.ID)
	save(t, st, unstarted, started)
	if _, err := st.StartPayment(ctx, started.ID, base.Add(time.Minute)); err != nil {
		t.Fatalf("StartPayment: %v", err)
	}
	// Both written at base: past PayBy at before, the grace not over.
	before, at := base.Add(time.Second), base.Add(payWithin+time.Second)
	due, err := st.CancelDue(ctx, v.ID, before, base, at, 10)
	want := []*seckill.Order{cancelledAs(created(unstarted), seckill.ReasonNotPaid, at)}
	if diff := cmp.Diff(want, due); err != nil || diff != "" {
		t.Errorf("CancelDue within the grace: %v (-want +got):\n%s", err, diff)
	}
	checkOrder(t, st, startedAs(created(started), base.Add(time.Minute)))

	later := at.Add(time.Minute)
	due, err = st.CancelDue(ctx, v.ID, before, before, later, 10)
	want = []*seckill.Order{cancelledAs(startedAs(created(started), base.Add(time.Minute)), seckill.ReasonNotPaid, later)}
	if diff := cmp.Diff(want, due); err != nil || diff != "" {
		t.Errorf("CancelDue after the grace: %v (-want +got):\n%s", err, diff)
	}
	checkStock(t, st, v.ID, 10, 0)
}

// testCancelUnpaid: CancelUnpaid cancels an order never started for its
// deadline, and holds one whose payment was started, written at or after
// startedBefore (its grace not over), even when the caller read it before
// the start: left created, its unit not given back; once written before
// startedBefore it is cancelled. A paid order is left paid.
func (s suite) testCancelUnpaid(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	unstarted, started, paid := order(1, v.ID), order(2, v.ID), order(3, v.ID)
	save(t, st, unstarted, started, paid) // written at base
	startedAt := base.Add(payWithin - time.Second)
	if _, err := st.StartPayment(ctx, started.ID, startedAt); err != nil {
		t.Fatalf("StartPayment: %v", err)
	}
	wantPaid := mustPay(t, st, paid.ID)
	at := base.Add(payWithin + time.Second)

	got, err := st.CancelUnpaid(ctx, unstarted.ID, base, at)
	checkGot(t, "CancelUnpaid of an order never started", got, err, cancelledAs(created(unstarted), seckill.ReasonNotPaid, at))
	got, err = st.CancelUnpaid(ctx, started.ID, base, at)
	held := startedAs(created(started), startedAt)
	checkGot(t, "CancelUnpaid of a started order written at startedBefore", got, err, held)
	checkStock(t, st, v.ID, 8, 2)
	got, err = st.CancelUnpaid(ctx, paid.ID, base.Add(time.Second), at)
	checkGot(t, "CancelUnpaid of a paid order", got, err, wantPaid)

	later := at.Add(time.Minute)
	got, err = st.CancelUnpaid(ctx, started.ID, base.Add(time.Microsecond), later)
	checkGot(t, "CancelUnpaid of a started order written before startedBefore", got, err, cancelledAs(held, seckill.ReasonNotPaid, later))
	checkStock(t, st, v.ID, 9, 1)
	checkCounts(t, st, v.ID, seckill.LifecycleCounts{Paid: 1, Cancelled: 2, Unreturned: 2})
}
