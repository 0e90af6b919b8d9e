package seckill_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// TestCompare: what the cache holds of a sale against the database's
// counts, as both the Reconciler and the monitor see it.
func TestCompare(t *testing.T) {
	t.Parallel()
	lag := func(n int64) *int64 { return &n }
	v := &seckill.Voucher{ID: 7, InitialStock: 100}
	for _, tc := range []struct {
		name   string
		st     seckill.CacheState
		orders int64
		stored map[int64]seckill.OrderStatus
		want   seckill.Reconciliation
	}{{
		name:   "agree",
		st:     seckill.CacheState{Loaded: true, Remaining: 80, Buyers: 20, Length: 16, Pending: 3, Lag: lag(12), PendingOrders: []int64{10, 11, 12}},
		orders: 6,
		// 11 is committed and not yet acknowledged: not pending.
		stored: map[int64]seckill.OrderStatus{11: seckill.OrderCreated},
		want:   seckill.Reconciliation{Orders: 6, Loaded: true, Remaining: 80, Buyers: 20, Pending: 14},
	}, {
		name:   "lag unknown: at most the entries not pending",
		st:     seckill.CacheState{Loaded: true, Remaining: 80, Buyers: 20, Length: 16, Pending: 3, PendingOrders: []int64{10, 11, 12}},
		orders: 4,
		stored: map[int64]seckill.OrderStatus{11: seckill.OrderCreated},
		want:   seckill.Reconciliation{Orders: 4, Loaded: true, Remaining: 80, Buyers: 20, Pending: 15, Drift: 1, BuyerDrift: 1},
	}, {
		name:   "pending beyond those listed, and an order listed twice",
		st:     seckill.CacheState{Loaded: true, Remaining: 90, Buyers: 10, Length: 10, Pending: 10, Lag: lag(0), PendingOrders: []int64{1, 1, 2}, Unlisted: 7},
		orders: 1,
		stored: map[int64]seckill.OrderStatus{2: seckill.OrderCreated},
		want:   seckill.Reconciliation{Orders: 1, Loaded: true, Remaining: 90, Buyers: 10, Pending: 8, Drift: 1, BuyerDrift: 1},
	}, {
		// 5 is a dead letter retried, delivered again: its first failure is
		// in the database, its unit and buyer in the cache again.
		name:   "a failed order delivered again is pending",
		st:     seckill.CacheState{Loaded: true, Remaining: 95, Buyers: 5, Length: 2, Pending: 1, Lag: lag(0), PendingOrders: []int64{5}},
		orders: 4,
		stored: map[int64]seckill.OrderStatus{5: seckill.OrderFailed},
		want:   seckill.Reconciliation{Orders: 4, Loaded: true, Remaining: 95, Buyers: 5, Pending: 1},
	}, {
		name:   "a read cut short at its bounds is an estimate",
		st:     seckill.CacheState{Loaded: true, Remaining: 0, Buyers: 100, Length: 20_000, Pending: 10, Bounded: true},
		orders: 0,
		want:   seckill.Reconciliation{Loaded: true, Buyers: 100, Pending: 19_990, Drift: -19_890, BuyerDrift: -19_890, Estimated: true},
	}, {
		name:   "not loaded: no stock counts",
		st:     seckill.CacheState{Remaining: 5, DeadLetters: 2},
		orders: 30,
		want:   seckill.Reconciliation{Orders: 30, DeadLetters: 2, Drift: 70, BuyerDrift: -30},
	}, {
		name:   "the database's stock as the sync mode's sale",
		st:     seckill.CacheState{Loaded: true, Remaining: 60},
		orders: 40,
		want:   seckill.Reconciliation{Orders: 40, Loaded: true, Remaining: 60, BuyerDrift: -40},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := seckill.Compare(v, &tc.st, tc.orders, tc.stored)
			tc.want.Voucher = v
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("Compare (-want +got):\n%s", diff)
			}
		})
	}
}
