package storetest

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

// stored is how the store gives back o once saved.
func stored(o *seckill.Order) *seckill.Order {
	return &seckill.Order{ID: o.ID, UserID: o.UserID, VoucherID: o.VoucherID, Status: seckill.OrderCreated, CreatedAt: micro(o.CreatedAt)}
}

// checkOrder fails tb unless the store holds want.
func checkOrder(tb testing.TB, st seckill.Store, want *seckill.Order) {
	tb.Helper()
	got, err := st.Order(tb.Context(), want.ID)
	if err != nil {
		tb.Errorf("Order(%d): %v", want.ID, err)
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("Order(%d) (-want +got):\n%s", want.ID, diff)
	}
	checkUTC(tb, "Order", got.CreatedAt)
}

// checkNoOrder fails tb if the store holds an order with the id.
func checkNoOrder(tb testing.TB, st seckill.Store, id int64) {
	tb.Helper()
	if got, err := st.Order(tb.Context(), id); !errors.Is(err, seckill.ErrOrderNotFound) {
		tb.Errorf("Order(%d) = %+v, %v; want ErrOrderNotFound", id, got, err)
	}
}

// checkStock fails tb unless the voucher has the stock and the orders.
func checkStock(tb testing.TB, st seckill.Store, voucherID, wantStock, wantOrders int64) {
	tb.Helper()
	if got := stock(tb, st, voucherID); got != wantStock {
		tb.Errorf("voucher %d stock = %d; want %d", voucherID, got, wantStock)
	}
	if got := countOrders(tb, st, voucherID); got != wantOrders {
		tb.Errorf("voucher %d has %d orders; want %d", voucherID, got, wantOrders)
	}
}

func (s suite) testSaveOrdersEmpty(t *testing.T) {
	st := s.store(t)
	for _, batch := range [][]*seckill.Order{nil, {}} {
		got, err := st.SaveOrders(t.Context(), batch)
		if err != nil || len(got) != 0 {
			t.Errorf("SaveOrders(%v) = %v, %v; want no outcomes and no error", batch, got, err)
		}
	}
}

func (s suite) testSaveOrdersOutcomes(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	a, b := order(1, v.ID), order(2, v.ID)

	got := save(t, st, a, b)
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.Saved, seckill.Saved}, got); diff != "" {
		t.Errorf("first save (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 8, 2)
	checkOrder(t, st, stored(a))
	checkOrder(t, st, stored(b))

	// A redelivery changes nothing.
	got = save(t, st, a, b)
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.AlreadySaved, seckill.AlreadySaved}, got); diff != "" {
		t.Errorf("redelivery (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 8, 2)

	idOtherBuyer := &seckill.Order{ID: a.ID, UserID: 3, VoucherID: v.ID, CreatedAt: base}
	idOtherVoucher := &seckill.Order{ID: a.ID, UserID: a.UserID, VoucherID: w.ID, CreatedAt: base}
	secondOfBuyer := order(b.UserID, v.ID)
	otherVoucher := order(b.UserID, w.ID)
	got = save(t, st, idOtherBuyer, idOtherVoucher, secondOfBuyer, otherVoucher)
	want := []seckill.SaveOutcome{seckill.IDConflict, seckill.IDConflict, seckill.BuyerConflict, seckill.Saved}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 8, 2)
	checkStock(t, st, w.ID, 9, 1)
	// The conflicting orders changed nothing.
	checkOrder(t, st, stored(a))
	checkNoOrder(t, st, secondOfBuyer.ID)
	checkOrder(t, st, stored(otherVoucher))
}

func (s suite) testSaveOrdersCreatedAt(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	given := order(1, v.ID)
	given.CreatedAt = base.Add(17 * time.Nanosecond)
	zero := order(2, v.ID)
	zero.CreatedAt = time.Time{}
	failed := order(3, v.ID)
	failed.Status, failed.Reason = seckill.OrderFailed, "whatever the caller says"

	before := time.Now()
	save(t, st, given, zero, failed)
	after := time.Now()

	checkOrder(t, st, stored(given))
	// Whatever the status and reason passed in, a saved order is created.
	checkOrder(t, st, stored(failed))
	got, err := st.Order(t.Context(), zero.ID)
	if err != nil {
		t.Fatalf("Order: %v", err)
	}
	checkNow(t, "CreatedAt of an order saved without one", got.CreatedAt, before, after)
	checkUTC(t, "Order", got.CreatedAt)
}

func (s suite) testSaveOrdersCollisionsInBatch(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	a := order(1, v.ID)
	again := *a
	idOtherBuyer := &seckill.Order{ID: a.ID, UserID: 2, VoucherID: v.ID, CreatedAt: base}
	secondOfBuyer := order(1, v.ID)
	// Buyer 2 is free: the order of theirs above was not saved.
	c := order(2, v.ID)

	got := save(t, st, a, &again, idOtherBuyer, secondOfBuyer, c)
	want := []seckill.SaveOutcome{seckill.Saved, seckill.AlreadySaved, seckill.IDConflict, seckill.BuyerConflict, seckill.Saved}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batch colliding with itself (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 8, 2)
	checkOrder(t, st, stored(a))
	checkOrder(t, st, stored(c))
	checkNoOrder(t, st, secondOfBuyer.ID)
}

func (s suite) testSaveOrdersStockArithmetic(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 5)
	batch := []*seckill.Order{order(1, v.ID), order(1, w.ID), order(2, v.ID), order(3, v.ID), order(2, w.ID)}
	if diff := cmp.Diff(repeat(seckill.Saved, 5), save(t, st, batch...)); diff != "" {
		t.Errorf("mixed batch (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 7, 3)
	checkStock(t, st, w.ID, 3, 2)

	// The last of the stock sells.
	save(t, st, orders(7, 100, v.ID)...)
	checkStock(t, st, v.ID, 0, 10)
	_, err := st.SaveOrders(t.Context(), []*seckill.Order{order(200, v.ID)})
	if !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("SaveOrders past the stock: %v; want ErrSoldOut", err)
	}
	checkStock(t, st, v.ID, 0, 10)

	got, err := st.Voucher(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("Voucher: %v", err)
	}
	if got.InitialStock != 10 {
		t.Errorf("InitialStock = %d after sales; want 10, unchanged", got.InitialStock)
	}
}

func (s suite) testSaveOrdersDuplicatesDoNotCount(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1)
	a := order(1, v.ID)
	again := *a
	want := []seckill.SaveOutcome{seckill.Saved, seckill.AlreadySaved}
	if diff := cmp.Diff(want, save(t, st, a, &again)); diff != "" {
		t.Errorf("an order twice in a batch (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 0, 1)
	// A redelivery after the sale sold out is no sale: it must not fail.
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.AlreadySaved}, save(t, st, a)); diff != "" {
		t.Errorf("redelivery when sold out (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]seckill.SaveOutcome{seckill.BuyerConflict}, save(t, st, order(1, v.ID))); diff != "" {
		t.Errorf("second order of the buyer when sold out (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 0, 1)
}

func (s suite) testSaveOrdersSoldOut(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 2)
	w := newVoucher(t, st, 5)
	first := order(1, v.ID)
	save(t, st, first)

	onW := order(1, w.ID)
	batch := []*seckill.Order{onW, first, order(2, v.ID), order(3, v.ID)}
	got, err := st.SaveOrders(t.Context(), batch)
	if !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("SaveOrders of 2 new orders with a stock of 1 = %v, %v; want ErrSoldOut", got, err)
	}
	if errors.Is(err, seckill.ErrVoucherNotFound) || errors.Is(err, seckill.ErrTransient) {
		t.Errorf("sold-out error %v also wraps another kind", err)
	}
	// Nothing of the batch was written, not even the other voucher's order.
	checkStock(t, st, v.ID, 1, 1)
	checkStock(t, st, w.ID, 5, 0)
	for _, o := range batch[2:] {
		checkNoOrder(t, st, o.ID)
	}
	checkNoOrder(t, st, onW.ID)

	// The same batch without one of the orders fits.
	want := []seckill.SaveOutcome{seckill.Saved, seckill.AlreadySaved, seckill.Saved}
	if diff := cmp.Diff(want, save(t, st, batch[:3]...)); diff != "" {
		t.Errorf("batch that fits (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 0, 2)
	checkStock(t, st, w.ID, 4, 1)
}

func (s suite) testSaveOrdersNewSoldOut(t *testing.T) {
	st := s.store(t)
	// Every order new, the stock short only on the voucher of the higher
	// id: the stores that take each voucher's stock in id order have
	// taken the first one's when they find the second short, and must
	// give it back.
	v := newVoucher(t, st, 5)
	w := newVoucher(t, st, 1)
	batch := []*seckill.Order{order(1, w.ID), order(1, v.ID), order(2, v.ID), order(2, w.ID)}
	got, err := st.SaveOrders(t.Context(), batch)
	if !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("SaveOrders of 2 new orders with a stock of 1 = %v, %v; want ErrSoldOut", got, err)
	}
	checkStock(t, st, v.ID, 5, 0)
	checkStock(t, st, w.ID, 1, 0)
	for _, o := range batch {
		checkNoOrder(t, st, o.ID)
	}
	// Without the order that does not fit, the batch is saved whole.
	if diff := cmp.Diff(repeat(seckill.Saved, 3), save(t, st, batch[:3]...)); diff != "" {
		t.Errorf("batch that fits (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 3, 2)
	checkStock(t, st, w.ID, 0, 1)
}

func (s suite) testSaveOrdersUnknownVoucher(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 5)
	good := order(1, v.ID)
	bad := order(1, v.ID+1000)
	got, err := st.SaveOrders(t.Context(), []*seckill.Order{good, bad})
	if !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Fatalf("SaveOrders with an unknown voucher = %v, %v; want ErrVoucherNotFound", got, err)
	}
	if errors.Is(err, seckill.ErrTransient) {
		t.Errorf("unknown-voucher error %v is marked transient; retrying cannot help", err)
	}
	checkStock(t, st, v.ID, 5, 0)
	checkNoOrder(t, st, good.ID)
	checkNoOrder(t, st, bad.ID)
}

func (s suite) testSaveOrdersLargeBatch(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1500)
	w := newVoucher(t, st, 1500)
	// Large enough to need several statements on a backend that limits
	// the parameters of one.
	batch := slices.Concat(orders(1200, 1, v.ID), orders(1300, 1, w.ID))
	if diff := cmp.Diff(repeat(seckill.Saved, len(batch)), save(t, st, batch...)); diff != "" {
		t.Errorf("large batch (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 300, 1200)
	checkStock(t, st, w.ID, 200, 1300)
	if diff := cmp.Diff(repeat(seckill.AlreadySaved, len(batch)), save(t, st, batch...)); diff != "" {
		t.Errorf("large batch again (-want +got):\n%s", diff)
	}
	checkStock(t, st, v.ID, 300, 1200)
	checkOrder(t, st, stored(batch[len(batch)-1]))
}

// saveConcurrently saves each batch from a goroutine of its own, all at
// once, retrying transient failures, and returns each batch's outcomes and
// error.
func saveConcurrently(t *testing.T, st seckill.Store, batches [][]*seckill.Order) ([][]seckill.SaveOutcome, []error) {
	t.Helper()
	outcomes := make([][]seckill.SaveOutcome, len(batches))
	errs := make([]error, len(batches))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, batch := range batches {
		wg.Go(func() {
			<-start
			outcomes[i], errs[i] = saveRetrying(t.Context(), st, batch)
		})
	}
	close(start)
	wg.Wait()
	return outcomes, errs
}

// checkSavedOnce fails t unless, across the batches' outcomes, each order
// was saved exactly once and otherwise found already saved.
func checkSavedOnce(t *testing.T, batches [][]*seckill.Order, outcomes [][]seckill.SaveOutcome) {
	t.Helper()
	saved := map[int64]int{}
	for i, batch := range batches {
		if len(outcomes[i]) != len(batch) {
			t.Errorf("batch %d: %d outcomes for %d orders", i, len(outcomes[i]), len(batch))
			continue
		}
		for j, o := range batch {
			switch outcomes[i][j] {
			case seckill.Saved:
				saved[o.ID]++
			case seckill.AlreadySaved:
				saved[o.ID] += 0 // seen, so that an order never saved shows
			default:
				t.Errorf("batch %d order %d: outcome %v; want saved or already saved", i, o.ID, outcomes[i][j])
			}
		}
	}
	for id, n := range saved {
		if n != 1 {
			t.Errorf("order %d saved %d times; want once", id, n)
		}
	}
}

func (s suite) testSaveOrdersConcurrentSameBatch(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1000)
	batch := orders(200, 1, v.ID)
	batches := make([][]*seckill.Order, 8)
	for i := range batches {
		batches[i] = batch
	}
	outcomes, errs := saveConcurrently(t, st, batches)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("saver %d: %v", i, err)
		}
	}
	checkSavedOnce(t, batches, outcomes)
	checkStock(t, st, v.ID, 800, 200)
}

func (s suite) testSaveOrdersConcurrentOverlapping(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1000)
	w := newVoucher(t, st, 1000)
	// 300 orders on two vouchers; each saver takes a window of 100 that
	// overlaps its neighbours', half of them in reverse, so that savers
	// meet the same rows in different orders.
	all := make([]*seckill.Order, 300)
	for i := range all {
		all[i] = order(int64(i/2+1), []int64{v.ID, w.ID}[i%2])
	}
	batches := make([][]*seckill.Order, 8)
	for i := range batches {
		batch := slices.Clone(all[i*25 : i*25+125])
		if i%2 == 1 {
			slices.Reverse(batch)
		}
		batches[i] = batch
	}
	outcomes, errs := saveConcurrently(t, st, batches)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("saver %d: %v", i, err)
		}
	}
	checkSavedOnce(t, batches, outcomes)
	// Windows cover orders 0 to 299: 150 per voucher.
	checkStock(t, st, v.ID, 850, 150)
	checkStock(t, st, w.ID, 850, 150)
}

func (s suite) testSaveOrdersConcurrentIDClash(t *testing.T) {
	st := s.store(t)
	// Each saver has a voucher of its own and the same 100 order ids: the
	// savers do not wait for one another's voucher, and meet only on the
	// ids, which each of them must then see as taken by another.
	ids := make([]int64, 100)
	for i := range ids {
		ids[i] = nextID()
	}
	vouchers := make([]*seckill.Voucher, 6)
	batches := make([][]*seckill.Order, len(vouchers))
	for i := range vouchers {
		vouchers[i] = newVoucher(t, st, 1000)
		for j, id := range ids {
			batches[i] = append(batches[i], &seckill.Order{ID: id, UserID: int64(j + 1), VoucherID: vouchers[i].ID, CreatedAt: base})
		}
		if i%2 == 1 {
			slices.Reverse(batches[i])
		}
	}
	outcomes, errs := saveConcurrently(t, st, batches)
	savedByID := map[int64]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("saver %d: %v", i, err)
		}
		var saved int64
		for j, o := range batches[i] {
			switch outcomes[i][j] {
			case seckill.Saved:
				saved++
				savedByID[o.ID]++
			case seckill.IDConflict:
			default:
				t.Errorf("saver %d order %d: outcome %v; want saved or id conflict", i, o.ID, outcomes[i][j])
			}
		}
		checkStock(t, st, vouchers[i].ID, 1000-saved, saved)
	}
	for _, id := range ids {
		if savedByID[id] != 1 {
			t.Errorf("order %d saved %d times; want once", id, savedByID[id])
		}
	}
}

func (s suite) testSaveOrdersConcurrentNoOversell(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 250)
	batches := make([][]*seckill.Order, 8)
	for i := range batches {
		batches[i] = orders(50, int64(i*50+1), v.ID)
	}
	outcomes, errs := saveConcurrently(t, st, batches)
	succeeded, soldOut := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			succeeded++
			if diff := cmp.Diff(repeat(seckill.Saved, 50), outcomes[i]); diff != "" {
				t.Errorf("saver %d (-want +got):\n%s", i, diff)
			}
		case errors.Is(err, seckill.ErrSoldOut):
			soldOut++
			for _, o := range batches[i] {
				checkNoOrder(t, st, o.ID)
			}
		default:
			t.Errorf("saver %d: %v", i, err)
		}
	}
	if succeeded != 5 || soldOut != 3 {
		t.Errorf("%d batches of 50 saved and %d sold out with a stock of 250; want 5 and 3", succeeded, soldOut)
	}
	checkStock(t, st, v.ID, 0, 250)
}

func (s suite) testOrderNotFound(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1)
	a := order(1, v.ID)
	save(t, st, a)
	for _, id := range []int64{a.ID + 1, 0, -1} {
		checkNoOrder(t, st, id)
	}
}

// orderIDs returns the ids of os, in order.
func orderIDs(os []*seckill.Order) []int64 {
	ids := make([]int64, len(os))
	for i, o := range os {
		ids[i] = o.ID
	}
	return ids
}

func (s suite) testUserOrders(t *testing.T) {
	st := s.store(t)
	const buyer, other = 7, 8
	var vouchers []*seckill.Voucher
	for range 101 {
		vouchers = append(vouchers, newVoucher(t, st, 2))
	}
	// The buyer's orders, saved in separate batches and within one,
	// interleaved with another buyer's: ids grow with time.
	var mine []*seckill.Order
	for _, v := range vouchers[:3] {
		o := order(buyer, v.ID)
		save(t, st, o, order(other, v.ID))
		mine = append(mine, o)
	}
	var rest []*seckill.Order
	for _, v := range vouchers[3:] {
		rest = append(rest, order(buyer, v.ID))
	}
	save(t, st, rest...)
	mine = append(mine, rest...)
	slices.Reverse(mine)

	for _, tc := range []struct {
		limit int
		want  []*seckill.Order
	}{
		{0, mine[:100]},
		{-1, mine[:100]},
		{1000, mine},
		{2, mine[:2]},
	} {
		got, err := st.UserOrders(t.Context(), buyer, tc.limit)
		if err != nil {
			t.Fatalf("UserOrders(%d): %v", tc.limit, err)
		}
		if diff := cmp.Diff(orderIDs(tc.want), orderIDs(got)); diff != "" {
			t.Errorf("UserOrders(limit %d) ids (-want +got):\n%s", tc.limit, diff)
		}
	}
	got, err := st.UserOrders(t.Context(), buyer, 1)
	if err != nil {
		t.Fatalf("UserOrders: %v", err)
	}
	if diff := cmp.Diff([]*seckill.Order{stored(mine[0])}, got); diff != "" {
		t.Errorf("UserOrders(limit 1) (-want +got):\n%s", diff)
	}
	got, err = st.UserOrders(t.Context(), 9, 0)
	if err != nil || len(got) != 0 {
		t.Errorf("UserOrders of a buyer without orders = %v, %v; want none", got, err)
	}
}

func (s suite) testCountOrders(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	checkStock(t, st, v.ID, 10, 0)
	save(t, st, slices.Concat(orders(3, 1, v.ID), orders(1, 1, w.ID))...)
	// Failed orders are not counted.
	fail(t, st, order(50, v.ID), "failed")
	checkStock(t, st, v.ID, 7, 3)
	checkStock(t, st, w.ID, 9, 1)
	if n := countOrders(t, st, w.ID+1000); n != 0 {
		t.Errorf("CountOrders of an unknown voucher = %d; want 0", n)
	}
}

func (s suite) testCountFailedOrders(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	count := func(voucherID, want int64) {
		t.Helper()
		n, err := st.CountFailedOrders(t.Context(), voucherID)
		if err != nil || n != want {
			t.Errorf("CountFailedOrders(%d) = %d, %v; want %d", voucherID, n, err, want)
		}
	}
	count(v.ID, 0)
	save(t, st, orders(2, 1, v.ID)...)
	fail(t, st, order(50, v.ID), "failed")
	fail(t, st, order(51, v.ID), "failed")
	fail(t, st, order(52, w.ID), "failed")
	// Failed, then saved after all (a retried dead letter): created.
	retried := order(53, v.ID)
	fail(t, st, retried, "failed")
	save(t, st, retried)
	count(v.ID, 2)
	count(w.ID, 1)
	count(w.ID+1000, 0)
	checkStock(t, st, v.ID, 7, 3)
}

func (s suite) testUserOrdersWithFailed(t *testing.T) {
	st := s.store(t)
	const buyer, other = 7, 8
	var vs []*seckill.Voucher
	for range 6 {
		vs = append(vs, newVoucher(t, st, 10))
	}
	// Ids grow in the order the orders are made; created and failed
	// interleave, and other buyers' orders are in between.
	c1 := order(buyer, vs[0].ID)
	f1 := order(buyer, vs[1].ID)
	otherFailed := order(other, vs[1].ID)
	c2 := order(buyer, vs[2].ID)
	f2 := order(buyer, vs[3].ID)
	otherCreated := order(other, vs[3].ID)
	f3 := order(buyer, vs[4].ID)    // the buyer tried again after it failed:
	again := order(buyer, vs[4].ID) // created
	both := order(buyer, vs[5].ID)  // failed, then saved: created, once
	save(t, st, c1, otherCreated)
	fail(t, st, f1, "f1")
	fail(t, st, otherFailed, "other")
	save(t, st, c2)
	fail(t, st, f2, "f2")
	fail(t, st, f3, "f3")
	save(t, st, again)
	fail(t, st, both, "both")
	save(t, st, both)

	mine := []*seckill.Order{stored(both), stored(again), failedAs(f3, "f3"), failedAs(f2, "f2"), stored(c2), failedAs(f1, "f1"), stored(c1)}
	for _, tc := range []struct {
		limit int
		want  []*seckill.Order
	}{
		{0, mine},
		{-1, mine},
		{100, mine},
		{len(mine), mine},
		// The order in both tables counts once against the limit.
		{1, mine[:1]},
		{2, mine[:2]},
		{3, mine[:3]},
		{5, mine[:5]},
	} {
		checkUserOrders(t, st, buyer, tc.limit, tc.want)
	}
	checkUserOrders(t, st, other, 0, []*seckill.Order{stored(otherCreated), failedAs(otherFailed, "other")})
}

// walkVoucherOrders reads the voucher's orders page by page, limit at a
// time, checking each page, and returns them all.
func walkVoucherOrders(t *testing.T, st seckill.Store, voucherID int64, limit int) []*seckill.Order {
	t.Helper()
	var all []*seckill.Order
	var after int64
	for page := 0; ; page++ {
		got, err := st.VoucherOrders(t.Context(), voucherID, after, limit)
		if err != nil {
			t.Fatalf("VoucherOrders(%d, %d, %d): %v", voucherID, after, limit, err)
		}
		if len(got) > limit {
			t.Fatalf("VoucherOrders(%d, %d, %d) returned %d orders", voucherID, after, limit, len(got))
		}
		for _, o := range got {
			if o.ID <= after {
				t.Fatalf("page %d after %d has order %d: not after it, or not in id order", page, after, o.ID)
			}
			after = o.ID
			checkUTC(t, "VoucherOrders", o.CreatedAt)
		}
		all = append(all, got...)
		if len(got) < limit {
			return all
		}
		if page > 1000 {
			t.Fatal("VoucherOrders keeps returning pages")
		}
	}
}

func (s suite) testVoucherOrders(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1000)
	w := newVoucher(t, st, 1000)
	var want []*seckill.Order
	// Created orders of v in several batches, orders of w and failed
	// orders of v in between.
	first := orders(40, 1, v.ID)
	save(t, st, slices.Concat(first, orders(10, 1, w.ID))...)
	for _, o := range first {
		want = append(want, stored(o))
	}
	for i := range 10 {
		fail(t, st, order(int64(1000+i), v.ID), "failed")
	}
	both := order(500, v.ID)
	fail(t, st, both, "failed, then saved")
	save(t, st, both)
	want = append(want, stored(both))
	fail(t, st, order(2000, w.ID), "failed")
	second := orders(45, 100, v.ID)
	save(t, st, slices.Concat(orders(5, 100, w.ID), second)...)
	for _, o := range second {
		want = append(want, stored(o))
	}
	fail(t, st, order(3000, v.ID), "failed after the rest")

	for _, limit := range []int{1, 7, len(want), len(want) + 1} {
		if diff := cmp.Diff(want, walkVoucherOrders(t, st, v.ID, limit)); diff != "" {
			t.Errorf("VoucherOrders of v, %d at a time (-want +got):\n%s", limit, diff)
		}
	}
	for _, tc := range []struct {
		after int64
		limit int
		want  []*seckill.Order
	}{
		{0, 0, want},
		{0, -1, want},
		{want[10].ID, 5, want[11:16]},
		{want[10].ID - 1, 1, want[10:11]},
		{want[len(want)-1].ID, 10, nil},
		{-1 << 62, 3, want[:3]},
	} {
		got, err := st.VoucherOrders(t.Context(), v.ID, tc.after, tc.limit)
		if err != nil {
			t.Fatalf("VoucherOrders(%d, %d): %v", tc.after, tc.limit, err)
		}
		if diff := cmp.Diff(orderIDs(tc.want), orderIDs(got)); diff != "" {
			t.Errorf("VoucherOrders(after %d, limit %d) ids (-want +got):\n%s", tc.after, tc.limit, diff)
		}
	}
	if got := walkVoucherOrders(t, st, w.ID, 4); len(got) != 15 {
		t.Errorf("VoucherOrders of w: %d orders; want 15", len(got))
	}
	if got := walkVoucherOrders(t, st, w.ID+1000, 4); len(got) != 0 {
		t.Errorf("VoucherOrders of an unknown voucher = %v; want none", orderIDs(got))
	}
}

func (s suite) testVoucherOrdersDefaultLimit(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1100)
	os := orders(1100, 1, v.ID)
	save(t, st, os...)
	for _, limit := range []int{0, -1} {
		got, err := st.VoucherOrders(t.Context(), v.ID, 0, limit)
		if err != nil {
			t.Fatalf("VoucherOrders: %v", err)
		}
		if diff := cmp.Diff(orderIDs(os[:1000]), orderIDs(got)); diff != "" {
			t.Errorf("VoucherOrders(limit %d) ids (-want +got):\n%s", limit, diff)
		}
	}
	got, err := st.VoucherOrders(t.Context(), v.ID, os[999].ID, 0)
	if err != nil {
		t.Fatalf("VoucherOrders: %v", err)
	}
	if diff := cmp.Diff(orderIDs(os[1000:]), orderIDs(got)); diff != "" {
		t.Errorf("VoucherOrders of the second page ids (-want +got):\n%s", diff)
	}
}

func (s suite) testOrderStatuses(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 10)
	a, b, onW := order(1, v.ID), order(2, v.ID), order(1, w.ID)
	save(t, st, a, b, onW)
	f := order(3, v.ID)
	fail(t, st, f, "failed")
	both := order(4, v.ID)
	fail(t, st, both, "failed, then saved")
	save(t, st, both)
	unknown := nextID()

	ids := []int64{unknown, a.ID, f.ID, both.ID, onW.ID, 0, -1, a.ID, f.ID}
	want := map[int64]seckill.OrderStatus{
		a.ID:    seckill.OrderCreated,
		f.ID:    seckill.OrderFailed,
		both.ID: seckill.OrderCreated,
		onW.ID:  seckill.OrderCreated,
	}
	checkStatuses(t, st, ids, want)
	checkStatuses(t, st, []int64{f.ID}, map[int64]seckill.OrderStatus{f.ID: seckill.OrderFailed})
	checkStatuses(t, st, []int64{unknown}, map[int64]seckill.OrderStatus{})
}

func (s suite) testOrderStatusesEmpty(t *testing.T) {
	st := s.store(t)
	// Closed, the store cannot query: an empty list must not need to.
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, ids := range [][]int64{nil, {}} {
		got, err := st.OrderStatuses(t.Context(), ids)
		if err != nil || len(got) != 0 {
			t.Errorf("OrderStatuses(%v) = %v, %v; want none and no error, without a query", ids, got, err)
		}
	}
}

func (s suite) testOrderStatusesLarge(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 2000)
	// 1,200 created, 300 failed, 100 failed then created, 1,400 unknown:
	// more than one statement's worth on a backend that limits them.
	created := orders(1200, 1, v.ID)
	failed := orders(400, 2000, v.ID)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for _, o := range failed[i*100 : (i+1)*100] {
				if err := st.FailOrder(t.Context(), o); err != nil {
					t.Errorf("FailOrder: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	save(t, st, slices.Concat(created, failed[300:])...)

	want := map[int64]seckill.OrderStatus{}
	var ids []int64
	for _, o := range slices.Concat(created, failed[300:]) {
		want[o.ID] = seckill.OrderCreated
		ids = append(ids, o.ID)
	}
	for _, o := range failed[:300] {
		want[o.ID] = seckill.OrderFailed
		ids = append(ids, o.ID)
	}
	for range 1400 {
		ids = append(ids, nextID())
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	checkStatuses(t, st, ids, want)
}
