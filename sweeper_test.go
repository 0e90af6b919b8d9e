package seckill_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// dueStore is a LifecycleStore of vouchers with due orders, no more: it
// records the sweeper's calls of CancelDue, in order.
type dueStore struct {
	seckill.LifecycleStore
	vouchers []*seckill.Voucher

	mu    sync.Mutex
	due   map[int64]int // voucher id → orders due
	next  int64
	calls []dueCall
	// startedBefore is the last CancelDue's time before which an order
	// whose payment was started is due.
	startedBefore time.Time
}

// dueCall is one CancelDue: the voucher, and how many it cancelled.
type dueCall struct{ Voucher, Cancelled int64 }

func (d *dueStore) DeadlineVouchers(context.Context) ([]*seckill.Voucher, error) {
	return d.vouchers, nil
}

func (d *dueStore) CancelDue(_ context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) ([]*seckill.Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := min(d.due[voucherID], limit)
	d.due[voucherID] -= n
	d.calls = append(d.calls, dueCall{voucherID, int64(n)})
	d.startedBefore = startedBefore
	os := make([]*seckill.Order, n)
	for i := range os {
		d.next++
		os[i] = &seckill.Order{ID: d.next, VoucherID: voucherID, Status: seckill.OrderCancelled, CancelledAt: at}
	}
	return os, nil
}

func (d *dueStore) Unreturned(context.Context, int64, time.Time, int) ([]*seckill.Order, error) {
	return nil, nil
}

func (d *dueStore) MarkReturned(context.Context, []int64) error { return nil }

// TestSweepOldVoucherDoesNotDelayNew: an old voucher with many due orders,
// listed first, does not hold up a new sale's: the sweeper takes a batch of
// each voucher in turn, so the new sale's due orders are cancelled after
// one batch of the old voucher's, not after all of them.
func TestSweepOldVoucherDoesNotDelayNew(t *testing.T) {
	t.Parallel()
	old := &seckill.Voucher{ID: 1, PayWithin: time.Minute}
	sale := &seckill.Voucher{ID: 2, PayWithin: time.Minute}
	st := &dueStore{vouchers: []*seckill.Voucher{old, sale}, due: map[int64]int{old.ID: 7, sale.ID: 2}}
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &seckill.Sweeper{Store: st, Logger: slog.New(slog.DiscardHandler), Batch: 3, Clock: func() time.Time { return now }}
	cancelled, _, err := s.Sweep(t.Context())
	if err != nil || cancelled != 9 {
		t.Fatalf("Sweep = %d cancelled, %v; want 9", cancelled, err)
	}
	want := []dueCall{{old.ID, 3}, {sale.ID, 2}, {old.ID, 3}, {old.ID, 1}}
	if diff := cmp.Diff(want, st.calls); diff != "" {
		t.Errorf("CancelDue calls (-want +got):\n%s", diff)
	}
	if i := slices.Index(st.calls, dueCall{sale.ID, 2}); i != 1 {
		t.Errorf("the new sale's due orders were cancelled by call %d; want the second, after one batch of the old voucher's", i)
	}
}

// TestSweeperSweepsEveryEvery: started, the sweeper sweeps once every
// Every, by its clock, and not before the first Every has passed; stopped,
// it sweeps no more.
func TestSweeperSweepsEveryEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := &seckill.Voucher{ID: 1, PayWithin: time.Minute}
		st := &dueStore{vouchers: []*seckill.Voucher{v}, due: map[int64]int{v.ID: 2}}
		began := time.Now()
		s := &seckill.Sweeper{Store: st, Logger: slog.New(slog.DiscardHandler), Every: 2 * time.Second, Clock: time.Now}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		sweeps := func(at time.Duration, want int64) {
			t.Helper()
			time.Sleep(time.Until(began.Add(at)))
			synctest.Wait()
			if got := s.Stats().Sweeps; got != want {
				t.Errorf("sweeps after %v: %d, want %d", at, got, want)
			}
		}
		sweeps(1999*time.Millisecond, 0)
		sweeps(2500*time.Millisecond, 1)
		if got, want := s.Stats().LastSuccess, began.Add(2*time.Second); !got.Equal(want) {
			t.Errorf("the first sweep began at %v by its clock, want %v", got, want)
		}
		if got := s.Stats().Cancelled; got != 2 {
			t.Errorf("%d orders cancelled, want the 2 due", got)
		}
		sweeps(6500*time.Millisecond, 3)
		s.Stop()
		sweeps(20*time.Second, 3)
	})
}

// TestSweepHoldsStartedPaymentsForGrace: the sweeper asks for the orders
// whose payment was started only once their grace after PayBy is over:
// Grace, or DefaultPaymentGrace unset.
func TestSweepHoldsStartedPaymentsForGrace(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		grace, out time.Duration
	}{
		{"Default", 0, seckill.DefaultPaymentGrace},
		{"Set", time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &seckill.Voucher{ID: 1, PayWithin: time.Hour}
			st := &dueStore{vouchers: []*seckill.Voucher{v}, due: map[int64]int{}}
			s := &seckill.Sweeper{Store: st, Logger: slog.New(slog.DiscardHandler), Grace: tc.grace, Clock: func() time.Time { return now }}
			if _, _, err := s.Sweep(t.Context()); err != nil {
				t.Fatal(err)
			}
			if want := now.Add(-v.PayWithin - tc.out); !st.startedBefore.Equal(want) {
				t.Errorf("CancelDue's startedBefore = %v; want %v: PayBy and a grace of %v past", st.startedBefore, want, tc.out)
			}
		})
	}
}
