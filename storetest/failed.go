package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	seckill "github.com/seckill/seckill"
)

// maxReason is how many characters of a failed order's reason the stores
// keep.
const maxReason = 500

// failedAs is how the store gives back o once failed with the reason.
func failedAs(o *seckill.Order, reason string) *seckill.Order {
	return &seckill.Order{ID: o.ID, UserID: o.UserID, VoucherID: o.VoucherID, Status: seckill.OrderFailed, Reason: reason, CreatedAt: micro(o.CreatedAt)}
}

// fail records a copy of o as failed with the reason, and fails tb on an
// error.
func fail(tb testing.TB, st seckill.Store, o *seckill.Order, reason string) {
	tb.Helper()
	f := *o
	f.Reason = reason
	if err := st.FailOrder(tb.Context(), &f); err != nil {
		tb.Fatalf("FailOrder(%d, %.40q): %v", o.ID, reason, err)
	}
}

// checkUserOrders fails tb unless UserOrders(userID, limit) is want.
func checkUserOrders(tb testing.TB, st seckill.Store, userID int64, limit int, want []*seckill.Order) {
	tb.Helper()
	got, err := st.UserOrders(tb.Context(), userID, limit)
	if err != nil {
		tb.Errorf("UserOrders(%d, %d): %v", userID, limit, err)
		return
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		tb.Errorf("UserOrders(%d, limit %d) (-want +got):\n%s", userID, limit, diff)
	}
	for _, o := range got {
		checkUTC(tb, "UserOrders", o.CreatedAt)
	}
}

// checkStatuses fails tb unless OrderStatuses(ids) is want.
func checkStatuses(tb testing.TB, st seckill.Store, ids []int64, want map[int64]seckill.OrderStatus) {
	tb.Helper()
	got, err := st.OrderStatuses(tb.Context(), ids)
	if err != nil {
		tb.Errorf("OrderStatuses(%d ids): %v", len(ids), err)
		return
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		tb.Errorf("OrderStatuses(%d ids) (-want +got):\n%s", len(ids), diff)
	}
}

func (s suite) testFailOrder(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	a := order(1, v.ID)
	a.CreatedAt = base.Add(17 * time.Nanosecond)
	// The status passed in does not matter.
	a.Status = seckill.OrderCreated
	fail(t, st, a, "stream: 16 deliveries failed: insert orders: connection refused")
	checkOrder(t, st, failedAs(a, "stream: 16 deliveries failed: insert orders: connection refused"))

	// An order without its admission time gets the time it failed.
	zero := order(2, v.ID)
	zero.CreatedAt = time.Time{}
	before := time.Now()
	fail(t, st, zero, "")
	after := time.Now()
	got, err := st.Order(t.Context(), zero.ID)
	if err != nil {
		t.Fatalf("Order: %v", err)
	}
	if got.Status != seckill.OrderFailed || got.Reason != "" {
		t.Errorf("Order(%d) = %+v; want failed with no reason", zero.ID, got)
	}
	checkNow(t, "CreatedAt of an order failed without one", got.CreatedAt, before, after)
	checkUTC(t, "Order", got.CreatedAt)

	// Failed orders take no stock and are not counted.
	checkStock(t, st, v.ID, 10, 0)
	checkStatuses(t, st, []int64{a.ID, zero.ID}, map[int64]seckill.OrderStatus{a.ID: seckill.OrderFailed, zero.ID: seckill.OrderFailed})
}

func (s suite) testFailOrderTwice(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	a := order(1, v.ID)
	fail(t, st, a, "first")
	// Whatever the second call says, the first record stays.
	again := &seckill.Order{ID: a.ID, UserID: 2, VoucherID: w.ID, CreatedAt: base.Add(time.Hour)}
	fail(t, st, again, "second")
	checkOrder(t, st, failedAs(a, "first"))
	checkUserOrders(t, st, 2, 0, nil)
	checkStock(t, st, v.ID, 10, 0)
}

func (s suite) testFailOrderCreated(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	a := order(1, v.ID)
	save(t, st, a)
	fail(t, st, a, "too late: the order is in the database")
	checkOrder(t, st, stored(a))
	checkUserOrders(t, st, a.UserID, 0, []*seckill.Order{stored(a)})
	checkStatuses(t, st, []int64{a.ID}, map[int64]seckill.OrderStatus{a.ID: seckill.OrderCreated})
	checkStock(t, st, v.ID, 9, 1)
}

func (s suite) testFailOrderConcurrent(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	const rounds, callers = 5, 20
	for round := range rounds {
		a := order(int64(round+1), v.ID)
		reasons := make([]string, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			reasons[i] = fmt.Sprintf("caller %d", i)
			f := *a
			f.Reason = reasons[i]
			wg.Go(func() {
				<-start
				errs[i] = st.FailOrder(t.Context(), &f)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: FailOrder by caller %d of %d at once: %v", round, i, callers, err)
			}
		}
		got, err := st.UserOrders(t.Context(), a.UserID, 0)
		if err != nil {
			t.Fatalf("UserOrders: %v", err)
		}
		if len(got) != 1 {
			t.Fatalf("round %d: %d orders after %d concurrent FailOrder of one order; want 1: %+v", round, len(got), callers, got)
		}
		want := failedAs(a, got[0].Reason)
		if diff := cmp.Diff(want, got[0]); diff != "" {
			t.Errorf("round %d: the failed order (-want +got):\n%s", round, diff)
		}
		if !strings.HasPrefix(got[0].Reason, "caller ") {
			t.Errorf("round %d: reason %q is none of the callers'", round, got[0].Reason)
		}
	}
	checkStock(t, st, v.ID, 10, 0)
}

func (s suite) testFailOrderFreesBuyer(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 5)
	f := order(1, v.ID)
	fail(t, st, f, "dead-lettered")
	checkStock(t, st, v.ID, 5, 0)

	// The buyer buys again after Redis gave their slot back.
	g := order(1, v.ID)
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.Saved}, save(t, st, g)); diff != "" {
		t.Errorf("saving the buyer's order after their failed one (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 4, 1)
	checkOrder(t, st, failedAs(f, "dead-lettered"))
	checkOrder(t, st, stored(g))
	checkUserOrders(t, st, 1, 0, []*seckill.Order{stored(g), failedAs(f, "dead-lettered")})
	page, err := st.VoucherOrders(t.Context(), v.ID, 0, 0)
	if err != nil {
		t.Fatalf("VoucherOrders: %v", err)
	}
	if diff := cmp.Diff([]*seckill.Order{stored(g)}, page); diff != "" {
		t.Errorf("VoucherOrders (-want +got):\n%s", diff)
	}
}

func (s suite) testFailOrderLongReason(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	long := strings.Repeat("秒杀失败🙂é!", 100) // 700 characters of 1 to 4 bytes
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"too long", long, string([]rune(long)[:maxReason])},
		{"at the limit, four bytes each", strings.Repeat("🙂", maxReason), strings.Repeat("🙂", maxReason)},
		{"one over the limit", strings.Repeat("é", maxReason) + "!", strings.Repeat("é", maxReason)},
		// Error messages quote anything; a byte the database refuses must
		// not keep the failure from being recorded.
		{"invalid UTF-8 and NUL", "bad \xff\xfe byte, \x00 NUL", "bad \uFFFD byte, \uFFFD NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := order(1, v.ID)
			fail(t, st, o, tc.reason)
			checkOrder(t, st, failedAs(o, tc.want))
		})
	}
}

func (s suite) testFailOrderInvalid(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	bad := order(1, v.ID+1000)
	err := st.FailOrder(t.Context(), bad)
	if !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Errorf("FailOrder of an order of an unknown voucher: %v; want ErrVoucherNotFound", err)
	}
	if errors.Is(err, seckill.ErrTransient) {
		t.Errorf("unknown-voucher error %v is marked transient; retrying cannot help", err)
	}
	checkNoOrder(t, st, bad.ID)
	if err := st.FailOrder(t.Context(), nil); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Errorf("FailOrder(nil): %v; want ErrInvalidArgument", err)
	}
}

func (s suite) testFailedThenSaved(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	a := order(1, v.ID)
	fail(t, st, a, "gave up too soon")
	// A retry of the write that failed gets through after all.
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.Saved}, save(t, st, a)); diff != "" {
		t.Errorf("saving a failed order (-want +got):\n%s", diff)
	}
	checkOrder(t, st, stored(a))
	checkUserOrders(t, st, a.UserID, 0, []*seckill.Order{stored(a)})
	checkStatuses(t, st, []int64{a.ID}, map[int64]seckill.OrderStatus{a.ID: seckill.OrderCreated})
	checkStock(t, st, v.ID, 9, 1)
	page, err := st.VoucherOrders(t.Context(), v.ID, 0, 0)
	if err != nil {
		t.Fatalf("VoucherOrders: %v", err)
	}
	if diff := cmp.Diff([]*seckill.Order{stored(a)}, page); diff != "" {
		t.Errorf("VoucherOrders (-want +got):\n%s", diff)
	}
	// And failing it again changes nothing.
	fail(t, st, a, "again")
	checkOrder(t, st, stored(a))
}

func (s suite) testFailOrderRacingSave(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1000)
	// A worker saves orders while the dead-letter path fails the same
	// orders: each ends created (SaveOrders does not look at failed
	// orders), and neither side fails for meeting the other.
	batch := orders(100, 1, v.ID)
	const failers = 4
	start := make(chan struct{})
	var (
		wg       sync.WaitGroup
		outcomes []seckill.SaveOutcome
		saveErr  error
	)
	wg.Go(func() {
		<-start
		outcomes, saveErr = saveRetrying(t.Context(), st, batch)
	})
	for i := range failers {
		wg.Go(func() {
			<-start
			for j := i; j < len(batch); j += failers {
				f := *batch[j]
				f.Reason = "dead-lettered"
				if err := st.FailOrder(t.Context(), &f); err != nil {
					t.Errorf("FailOrder(%d) while it is saved: %v", f.ID, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if saveErr != nil {
		t.Fatalf("SaveOrders while the orders fail: %v", saveErr)
	}
	if diff := cmp.Diff(repeat(seckill.Saved, len(batch)), outcomes); diff != "" {
		t.Errorf("SaveOrders while the orders fail (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 900, 100)
	want := map[int64]seckill.OrderStatus{}
	for _, o := range batch {
		want[o.ID] = seckill.OrderCreated
	}
	checkStatuses(t, st, orderIDs(batch), want)
	checkOrder(t, st, stored(batch[0]))
	checkUserOrders(t, st, batch[0].UserID, 0, []*seckill.Order{stored(batch[0])})
}
