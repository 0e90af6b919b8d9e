package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/retry"
)

// open is a time within the sale window of newVoucher's vouchers.
var open = base.Add(time.Minute)

// placeRetrying places o as the sync mode's service does, as callerRetry
// says.
func placeRetrying(ctx context.Context, st seckill.Store, o *seckill.Order, now time.Time) error {
	return retry.Do(ctx, callerRetry, func() error { return st.PlaceOrder(ctx, o, now) })
}

// The refusals of PlaceOrder, as a client sees them: the same on every
// backend.
func notFound(voucherID int64) *seckill.Error {
	return seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", voucherID)
}

func notStarted(voucherID int64) *seckill.Error {
	return seckill.Errorf(seckill.ErrNotStarted, "the sale of voucher %d has not started", voucherID)
}

func ended(voucherID int64) *seckill.Error {
	return seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", voucherID)
}

func soldOut(voucherID int64) *seckill.Error {
	return seckill.Errorf(seckill.ErrSoldOut, "voucher %d is sold out", voucherID)
}

func duplicate(orderID int64) *seckill.Error {
	return &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: orderID}
}

// checkRefusal fails tb unless err is the refusal want (want nil: no
// error).
func checkRefusal(tb testing.TB, what string, err error, want *seckill.Error) {
	tb.Helper()
	if want == nil {
		if err != nil {
			tb.Errorf("%s: %v; want no error", what, err)
		}
		return
	}
	var got *seckill.Error
	if !errors.As(err, &got) {
		tb.Errorf("%s: %v; want %v, a *seckill.Error", what, err, want)
		return
	}
	// The values, not the pointers; the kinds compare with errors.Is.
	if diff := cmp.Diff(*want, *got, cmpopts.EquateErrors()); diff != "" {
		tb.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// checkNothingPlaced fails tb if the store holds o, or any order of its
// buyer.
func checkNothingPlaced(tb testing.TB, st seckill.Store, o *seckill.Order) {
	tb.Helper()
	checkNoOrder(tb, st, o.ID)
	checkUserOrders(tb, st, o.UserID, 0, nil)
}

func (s suite) testPlaceOrder(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	a, b := order(1, v.ID), order(2, v.ID)
	a.CreatedAt = base.Add(17 * time.Nanosecond)
	// The buyer of a, on another voucher: one order per buyer and voucher.
	c := order(1, w.ID)
	for _, o := range []*seckill.Order{a, b, c} {
		checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), o, open), nil)
	}
	checkOrder(t, st, stored(a))
	checkOrder(t, st, stored(b))
	checkOrder(t, st, stored(c))
	checkStock(t, st, v.ID, 8, 2)
	checkStock(t, st, w.ID, 9, 1)
	checkStatuses(t, st, []int64{a.ID, b.ID, c.ID}, map[int64]seckill.OrderStatus{
		a.ID: seckill.OrderCreated, b.ID: seckill.OrderCreated, c.ID: seckill.OrderCreated,
	})
}

func (s suite) testPlaceOrderCreatedAt(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	// An order without its admission time was made now: the time given,
	// not the store's clock.
	o := order(1, v.ID)
	o.CreatedAt = time.Time{}
	now := open.Add(123456789 * time.Nanosecond)
	checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), o, now), nil)
	want := stored(o)
	want.CreatedAt = micro(now)
	checkOrder(t, st, want)
}

func (s suite) testPlaceOrderWindow(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	begin, end := micro(v.BeginTime), micro(v.EndTime)
	for _, tc := range []struct {
		name string
		now  time.Time
		want *seckill.Error
	}{
		{"long before", begin.Add(-time.Hour), notStarted(v.ID)},
		{"just before", begin.Add(-time.Microsecond), notStarted(v.ID)},
		{"at the begin", begin, nil},
		{"just before the end", end.Add(-time.Microsecond), nil},
		{"at the end", end, ended(v.ID)},
		{"long after", end.Add(time.Hour), ended(v.ID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A buyer of their own, so that the cases do not meet.
			o := order(nextID(), v.ID)
			before := stock(t, st, v.ID)
			checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), o, tc.now), tc.want)
			if tc.want == nil {
				checkOrder(t, st, stored(o))
				if got := stock(t, st, v.ID); got != before-1 {
					t.Errorf("stock = %d after placing an order; want %d", got, before-1)
				}
				return
			}
			checkNothingPlaced(t, st, o)
			if got := stock(t, st, v.ID); got != before {
				t.Errorf("stock = %d after a refusal; want %d, unchanged", got, before)
			}
		})
	}
	checkStock(t, st, v.ID, 8, 2)
}

func (s suite) testPlaceOrderRefusals(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	empty := newVoucher(t, st, 0)
	missing := empty.ID + 1000
	for _, tc := range []struct {
		name      string
		voucherID int64
		now       time.Time
		want      *seckill.Error
	}{
		{"voucher not found", missing, open, notFound(missing)},
		{"not started", v.ID, base.Add(-time.Minute), notStarted(v.ID)},
		{"ended", v.ID, base.Add(2 * time.Hour), ended(v.ID)},
		{"sold out", empty.ID, open, soldOut(empty.ID)},
		// The window comes before the stock.
		{"sold out and ended", empty.ID, base.Add(2 * time.Hour), ended(empty.ID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := order(nextID(), tc.voucherID)
			checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), o, tc.now), tc.want)
			checkNothingPlaced(t, st, o)
		})
	}
	checkStock(t, st, v.ID, 10, 0)
	checkStock(t, st, empty.ID, 0, 0)
}

func (s suite) testPlaceOrderSoldOut(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 2)
	a, b, c := order(1, v.ID), order(2, v.ID), order(3, v.ID)
	checkRefusal(t, "PlaceOrder of the first of 2", st.PlaceOrder(t.Context(), a, open), nil)
	checkRefusal(t, "PlaceOrder of the last of 2", st.PlaceOrder(t.Context(), b, open), nil)
	checkRefusal(t, "PlaceOrder of a third", st.PlaceOrder(t.Context(), c, open), soldOut(v.ID))
	checkNothingPlaced(t, st, c)
	checkStock(t, st, v.ID, 0, 2)
}

func (s suite) testPlaceOrderDuplicate(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 2)
	a := order(1, v.ID)
	checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), a, open), nil)
	// The stream mode's orders hold the buyer's slot just the same.
	b := order(2, v.ID)
	save(t, st, b)
	checkStock(t, st, v.ID, 0, 2)

	for _, tc := range []struct {
		name string
		o    *seckill.Order
		now  time.Time
		want *seckill.Error
	}{
		{"again", order(a.UserID, v.ID), open, duplicate(a.ID)},
		{"of an order saved", order(b.UserID, v.ID), open, duplicate(b.ID)},
		// A retry of the same order after a lost answer: it was placed.
		{"the same order", a, open, duplicate(a.ID)},
		// The buyer gets their order back even when none is left, and
		// after the sale (G5), as the Redis admission answers.
		{"after the sale", order(a.UserID, v.ID), base.Add(2 * time.Hour), duplicate(a.ID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), tc.o, tc.now), tc.want)
			if tc.o != a {
				checkNoOrder(t, st, tc.o.ID)
			}
		})
	}
	checkOrder(t, st, stored(a))
	checkOrder(t, st, stored(b))
	checkUserOrders(t, st, a.UserID, 0, []*seckill.Order{stored(a)})
	checkStock(t, st, v.ID, 0, 2)
}

func (s suite) testPlaceOrderAfterFailed(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	f := order(1, v.ID)
	fail(t, st, f, "dead-lettered")
	// A failed order does not hold the buyer's slot.
	o := order(f.UserID, v.ID)
	checkRefusal(t, "PlaceOrder after a failed order", st.PlaceOrder(t.Context(), o, open), nil)
	checkOrder(t, st, stored(o))
	checkOrder(t, st, failedAs(f, "dead-lettered"))
	checkStock(t, st, v.ID, 9, 1)
	// Now the buyer has a created order.
	again := order(f.UserID, v.ID)
	checkRefusal(t, "PlaceOrder again", st.PlaceOrder(t.Context(), again, open), duplicate(o.ID))
	checkStock(t, st, v.ID, 9, 1)
}

func (s suite) testPlaceOrderIDTaken(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	a := order(1, v.ID)
	checkRefusal(t, "PlaceOrder", st.PlaceOrder(t.Context(), a, open), nil)
	// The id of another buyer's order, or of the buyer's order of another
	// voucher: the service made an id twice. Not the client's fault, and
	// not a duplicate of the client's.
	for _, o := range []*seckill.Order{
		{ID: a.ID, UserID: 2, VoucherID: v.ID, CreatedAt: base},
		{ID: a.ID, UserID: a.UserID, VoucherID: w.ID, CreatedAt: base},
	} {
		err := st.PlaceOrder(t.Context(), o, open)
		var refusal *seckill.Error
		if err == nil || errors.As(err, &refusal) {
			t.Errorf("PlaceOrder of order %d of user %d, voucher %d with the id of another order: %v; want an error that is no refusal", o.ID, o.UserID, o.VoucherID, err)
		}
	}
	checkOrder(t, st, stored(a))
	checkUserOrders(t, st, 2, 0, nil)
	checkStock(t, st, v.ID, 9, 1)
	checkStock(t, st, w.ID, 10, 0)
}

func (s suite) testPlaceOrderInvalid(t *testing.T) {
	st := s.store(t)
	if err := st.PlaceOrder(t.Context(), nil, open); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Errorf("PlaceOrder(nil) = %v; want ErrInvalidArgument", err)
	}
}

// placed is the outcome of one PlaceOrder call.
type placed struct {
	o   *seckill.Order
	err error
}

// placeConcurrently places the orders of each caller in turn, the callers
// all at once, retrying transient failures, and returns the outcomes.
func placeConcurrently(t *testing.T, st seckill.Store, callers [][]*seckill.Order) []placed {
	t.Helper()
	outcomes := make([][]placed, len(callers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, os := range callers {
		wg.Go(func() {
			<-start
			for _, o := range os {
				outcomes[i] = append(outcomes[i], placed{o, placeRetrying(t.Context(), st, o, open)})
			}
		})
	}
	close(start)
	wg.Wait()
	var all []placed
	for _, os := range outcomes {
		all = append(all, os...)
	}
	return all
}

func (s suite) testPlaceOrderConcurrent(t *testing.T) {
	st := s.store(t)
	const stock, callers, calls, buyers = 50, 40, 5, 100
	v := newVoucher(t, st, stock)
	// Caller i's call j is buyer (5i + j) % 100's: callers i and i+20 ask
	// for the same buyers at the same time.
	orders := make([][]*seckill.Order, callers)
	for i := range orders {
		for j := range calls {
			orders[i] = append(orders[i], order(int64((calls*i+j)%buyers+1), v.ID))
		}
	}
	outcomes := placeConcurrently(t, st, orders)

	// The buyer's placed order.
	bought := map[int64]*seckill.Order{}
	for _, p := range outcomes {
		if p.err != nil {
			continue
		}
		if had, ok := bought[p.o.UserID]; ok {
			t.Errorf("buyer %d placed orders %d and %d", p.o.UserID, had.ID, p.o.ID)
		}
		bought[p.o.UserID] = p.o
	}
	if len(bought) != stock {
		t.Errorf("%d orders placed with a stock of %d for %d buyers; want %d", len(bought), stock, buyers, stock)
	}
	// A buyer with an order is told of it whenever they ask again; one
	// without was refused for the stock, each time.
	for _, p := range outcomes {
		if p.err == nil {
			continue
		}
		var want *seckill.Error
		if had, ok := bought[p.o.UserID]; ok {
			want = duplicate(had.ID)
		} else {
			want = soldOut(v.ID)
		}
		checkRefusal(t, "PlaceOrder", p.err, want)
	}
	checkStock(t, st, v.ID, 0, stock)
	for _, o := range bought {
		checkOrder(t, st, stored(o))
	}
	for _, p := range outcomes {
		if p.err != nil {
			checkNoOrder(t, st, p.o.ID)
		}
	}
}

func (s suite) testPlaceOrderConcurrentSameBuyer(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	// Rounds of a buyer each: from the second on, the store's connections
	// are open, and the calls do meet in the database.
	const rounds, callers = 5, 20
	for buyer := int64(1); buyer <= rounds; buyer++ {
		orders := make([][]*seckill.Order, callers)
		for i := range orders {
			orders[i] = []*seckill.Order{order(buyer, v.ID)}
		}
		outcomes := placeConcurrently(t, st, orders)

		var won []*seckill.Order
		for _, p := range outcomes {
			if p.err == nil {
				won = append(won, p.o)
			}
		}
		if len(won) != 1 {
			t.Fatalf("%d of %d concurrent calls of buyer %d placed an order; want 1", len(won), callers, buyer)
		}
		for _, p := range outcomes {
			if p.err != nil {
				checkRefusal(t, "PlaceOrder", p.err, duplicate(won[0].ID))
			}
		}
		checkOrder(t, st, stored(won[0]))
		checkUserOrders(t, st, buyer, 0, []*seckill.Order{stored(won[0])})
	}
	checkStock(t, st, v.ID, 10-rounds, rounds)
}
