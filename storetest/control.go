package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
)

// The operator's controls of a voucher: pause, end now, add stock.

func (s suite) testPauseVoucher(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	got, err := st.PauseVoucher(t.Context(), v.ID, true)
	if err != nil || !got.Paused {
		t.Fatalf("PauseVoucher(true) = %+v, %v; want paused", got, err)
	}
	if read, err := st.Voucher(t.Context(), v.ID); err != nil || !read.Paused {
		t.Fatalf("Voucher after the pause = %+v, %v; want paused", read, err)
	}
	o := order(nextID(), v.ID)
	checkRefusal(t, "PlaceOrder while paused", st.PlaceOrder(t.Context(), o, open),
		seckill.Errorf(seckill.ErrPaused, "the sale of voucher %d is paused; try again later", v.ID))
	checkNothingPlaced(t, st, o)
	// Twice is the same.
	if got, err := st.PauseVoucher(t.Context(), v.ID, true); err != nil || !got.Paused {
		t.Fatalf("PauseVoucher(true) again = %+v, %v; want paused", got, err)
	}
	if got, err := st.PauseVoucher(t.Context(), v.ID, false); err != nil || got.Paused {
		t.Fatalf("PauseVoucher(false) = %+v, %v; want not paused", got, err)
	}
	checkRefusal(t, "PlaceOrder once resumed", st.PlaceOrder(t.Context(), o, open), nil)
	checkStock(t, st, v.ID, 9, 1)
	if _, err := st.PauseVoucher(t.Context(), v.ID+1000, true); !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Errorf("PauseVoucher of no voucher: %v; want ErrVoucherNotFound", err)
	}
}

// testPauseRacesPlaceOrder pauses a voucher while buyers place orders at
// once: no order commits after PauseVoucher returned (the sync mode's
// pause is exact), and every one refused after is ErrPaused.
func (s suite) testPauseRacesPlaceOrder(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 100_000)
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		placed  atomic.Int64
		started = make(chan struct{}, 8)
	)
	// The buyers stop however the test ends: a Fatal below must not leave
	// them failing the test after it has returned, hiding why it did.
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				err := st.PlaceOrder(t.Context(), order(nextID(), v.ID), open)
				switch {
				case err == nil:
					if placed.Add(1) == 1 || i == 0 {
						select {
						case started <- struct{}{}:
						default:
						}
					}
				case errors.Is(err, seckill.ErrPaused):
				case errors.Is(err, seckill.ErrTransient):
					// SQLite's lock waited on past its busy timeout on a
					// loaded machine: the buyer asks again.
				default:
					t.Errorf("PlaceOrder: %v", err)
					return
				}
			}
		})
	}
	<-started
	for placed.Load() < 50 {
		time.Sleep(time.Millisecond) // a few commits under way; nothing to wait on
	}
	// A transient failure (SQLite's lock waited on past its busy timeout
	// while the buyers hammer it) is asked again, as an operator does.
	for {
		_, err := st.PauseVoucher(t.Context(), v.ID, true)
		if err == nil {
			break
		}
		if !errors.Is(err, seckill.ErrTransient) {
			t.Fatal(err)
		}
	}
	atPause, err := st.CountOrders(t.Context(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Let the buyers go on, refused, for as many more tries.
	// A transient failure (SQLite's lock waited on past its busy timeout
	// while the buyers hammer it) is asked again, as the buyers do; an
	// order placed is what fails.
	for range 50 {
		err := st.PlaceOrder(t.Context(), order(nextID(), v.ID), open)
		if !errors.Is(err, seckill.ErrPaused) && !errors.Is(err, seckill.ErrTransient) {
			t.Errorf("PlaceOrder after the pause: %v; want ErrPaused", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	after, err := st.CountOrders(t.Context(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after != atPause {
		t.Errorf("%d orders when the pause returned, %d once the buyers stopped: placed while paused", atPause, after)
	}
	checkStock(t, st, v.ID, 100_000-after, after)
}

func (s suite) testEndVoucher(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	at := base.Add(30*time.Minute + 999*time.Nanosecond)
	got, err := st.EndVoucher(t.Context(), v.ID, at)
	if err != nil || !got.EndTime.Equal(micro(at)) {
		t.Fatalf("EndVoucher = %+v, %v; want EndTime %v", got, err, micro(at))
	}
	checkUTC(t, "EndVoucher", got.EndTime)
	// A later end does not move it back.
	if got, err := st.EndVoucher(t.Context(), v.ID, base.Add(45*time.Minute)); err != nil || !got.EndTime.Equal(micro(at)) {
		t.Fatalf("EndVoucher later = %+v, %v; want EndTime %v, unchanged", got, err, micro(at))
	}
	o := order(nextID(), v.ID)
	checkRefusal(t, "PlaceOrder at the new end", st.PlaceOrder(t.Context(), o, micro(at)), ended(v.ID))
	checkNothingPlaced(t, st, o)
	checkRefusal(t, "PlaceOrder before the new end", st.PlaceOrder(t.Context(), o, open), nil)
	if _, err := st.EndVoucher(t.Context(), v.ID+1000, at); !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Errorf("EndVoucher of no voucher: %v; want ErrVoucherNotFound", err)
	}

	// Ended before it began: the start moves to the end, and the sale
	// answers ended from then on, not "not started" until the old start.
	early := newVoucher(t, st, 10)
	before := base.Add(-time.Hour + 999*time.Nanosecond)
	got, err = st.EndVoucher(t.Context(), early.ID, before)
	if err != nil {
		t.Fatalf("EndVoucher before the start: %v", err)
	}
	if !got.EndTime.Equal(micro(before)) || !got.BeginTime.Equal(micro(before)) {
		t.Errorf("EndVoucher before the start = %+v; want BeginTime and EndTime %v", got, micro(before))
	}
	checkUTC(t, "EndVoucher before the start", got.BeginTime, got.EndTime)
	for _, now := range []time.Time{micro(before), micro(before).Add(time.Minute), base.Add(-time.Microsecond), base, open} {
		o := order(nextID(), early.ID)
		checkRefusal(t, "PlaceOrder after an end before the start, at "+now.String(), st.PlaceOrder(t.Context(), o, now), ended(early.ID))
		checkNothingPlaced(t, st, o)
	}
	// Ended again later: the window stays as it was.
	if got, err := st.EndVoucher(t.Context(), early.ID, open); err != nil || !got.BeginTime.Equal(micro(before)) || !got.EndTime.Equal(micro(before)) {
		t.Fatalf("EndVoucher again = %+v, %v; want BeginTime and EndTime %v, unchanged", got, err, micro(before))
	}
}

func (s suite) testAddStock(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	w := newVoucher(t, st, 3)
	if err := st.PlaceOrder(t.Context(), order(nextID(), v.ID), open); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got *seckill.Voucher, added bool, recorded int64, err error, wantAdded bool, wantRecorded, wantStock, wantInitial int64) {
		t.Helper()
		if err != nil || added != wantAdded || recorded != wantRecorded || got.Stock != wantStock || got.InitialStock != wantInitial {
			t.Errorf("%s = stock %d of %d, added %v, recorded %d, %v; want stock %d of %d, added %v, recorded %d",
				what, got.Stock, got.InitialStock, added, recorded, err, wantStock, wantInitial, wantAdded, wantRecorded)
		}
	}
	got, added, recorded, err := st.AddStock(t.Context(), v.ID, "k-1", 5)
	check("AddStock", got, added, recorded, err, true, 5, 14, 15)
	got, added, recorded, err = st.AddStock(t.Context(), v.ID, "k-1", 5)
	check("AddStock with the key again", got, added, recorded, err, false, 5, 14, 15)
	got, added, recorded, err = st.AddStock(t.Context(), v.ID, "k-1", 7)
	check("AddStock with the key and other units", got, added, recorded, err, false, 5, 14, 15)
	// Keys compare exactly, and per voucher.
	got, added, recorded, err = st.AddStock(t.Context(), v.ID, "K-1", 1)
	check("AddStock with the key in capitals", got, added, recorded, err, true, 1, 15, 16)
	got, added, recorded, err = st.AddStock(t.Context(), w.ID, "k-1", 2)
	check("AddStock of another voucher", got, added, recorded, err, true, 2, 5, 5)
	// The total stays within MaxStock.
	if _, _, _, err := st.AddStock(t.Context(), v.ID, "k-2", seckill.MaxStock-15); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Errorf("AddStock past MaxStock: %v; want ErrInvalidArgument", err)
	}
	got, added, recorded, err = st.AddStock(t.Context(), v.ID, "k-2", seckill.MaxStock-16)
	check("AddStock to MaxStock", got, added, recorded, err, true, seckill.MaxStock-16, seckill.MaxStock-1, seckill.MaxStock)
	// A key recorded answers the same, also once the stock is full.
	got, added, recorded, err = st.AddStock(t.Context(), v.ID, "k-2", seckill.MaxStock-16)
	check("AddStock to MaxStock again", got, added, recorded, err, false, seckill.MaxStock-16, seckill.MaxStock-1, seckill.MaxStock)
	if _, _, _, err := st.AddStock(t.Context(), w.ID+1000, "k-1", 1); !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Errorf("AddStock to no voucher: %v; want ErrVoucherNotFound", err)
	}
	checkStock(t, st, v.ID, seckill.MaxStock-1, 1)
}

// testAddStockConcurrent adds with one key from 20 callers at once: once.
func (s suite) testAddStockConcurrent(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 10)
	var wg sync.WaitGroup
	var added atomic.Int64
	for range 20 {
		wg.Go(func() {
			got, ok, recorded, err := st.AddStock(t.Context(), v.ID, "once", 7)
			if err != nil || recorded != 7 || got.InitialStock != 17 {
				t.Errorf("AddStock = %+v, %v, %d, %v; want initial stock 17, recorded 7", got, ok, recorded, err)
			}
			if ok {
				added.Add(1)
			}
		})
	}
	wg.Wait()
	if n := added.Load(); n != 1 {
		t.Errorf("%d of 20 concurrent additions with one key added; want 1", n)
	}
	checkStock(t, st, v.ID, 17, 0)
}
