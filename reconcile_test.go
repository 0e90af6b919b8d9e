package seckill_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seckill/seckill"
)

// TestRepairQueueModeKeepsBuyers: in the queue mode the orders a live
// instance holds in memory are in neither Redis's stream nor the database,
// only in their buyers' slots. A repair that deleted the buyers (as the
// stream mode's does, whose orders are all in the stream) let those buyers
// buy again and sold their units twice; it must keep them, as the fence
// recovery's rebuild does in the queue mode.
func TestRepairQueueModeKeepsBuyers(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	vs.Mode, vs.Fence.Mode = seckill.ModeQueue, seckill.ModeQueue
	ctx := context.Background()
	view, err := vs.Create(ctx, onSale("queued", 10))
	if err != nil {
		t.Fatal(err)
	}
	cache := vs.Cache.(seckill.OrderCache)
	queued := map[int64]int64{} // buyer → order, waiting in a live instance's queue
	for u := int64(1); u <= 3; u++ {
		a := seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9000 + u}
		if err := cache.Reserve(ctx, a); err != nil {
			t.Fatal(err)
		}
		queued[u] = a.OrderID
	}
	r := &seckill.Reconciler{Vouchers: vs, Store: store, Cache: vs.Cache}
	if _, err := r.Reconcile(ctx, view.ID, true); err != nil {
		t.Fatal(err)
	}
	for u, id := range queued {
		got, err := cache.BuyerOrders(ctx, u, view.ID)
		if err != nil || got[view.ID] != id {
			t.Errorf("buyer %d's slot after the repair = %v, %v; want their queued order %d", u, got, err, id)
		}
		again := seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9100 + u}
		if err := cache.Reserve(ctx, again); !errors.Is(err, seckill.ErrDuplicateOrder) {
			t.Errorf("buyer %d, whose order is queued, asks again after the repair: %v; want duplicate_order", u, err)
		}
	}
}
