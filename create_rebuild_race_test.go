package seckill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redisledger"
)

// raceStore runs afterInsert right after a voucher's row is inserted,
// before Create loads the voucher into Redis: the moment when a buyer (or
// another instance's worker, or Restore) can find the new id not loaded,
// rebuild it from the database and buy.
type raceStore struct {
	seckill.Store
	afterInsert func(v *seckill.Voucher)
}

func (s *raceStore) CreateVoucher(ctx context.Context, v *seckill.Voucher) error {
	if err := s.Store.CreateVoucher(ctx, v); err != nil {
		return err
	}
	if s.afterInsert != nil {
		s.afterInsert(v)
	}
	return nil
}

func orderService(vs *seckill.VoucherService, store seckill.OrderStore, first int64) *seckill.OrderService {
	return &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), SoldOut: fencedSlots(cacheOf(vs)), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}, Store: store, Vouchers: vs, IDs: &counter{n: first}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
}

// TestCreateRacesRebuild: a buy that lands between the voucher's insert and
// its load rebuilds it and is admitted (answered 200); the load must keep
// that admission, not delete it as stale. Redis may also hold state of
// another voucher that had the same id (a database reset): the buy must not
// be admitted into that, and the load replaces it.
func TestCreateRacesRebuild(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		name := map[bool]string{false: "empty", true: "stale state of another generation"}[stale]
		t.Run(name, func(t *testing.T) {
			vs, store, _ := services(t, "")
			cache := cacheOf(vs)
			ctx := context.Background()
			if stale {
				// The first voucher of this fresh database gets id 1; Redis
				// holds a sale of an earlier database's voucher 1, with buyer
				// 77 holding order 7700.
				old := onSale("earlier database", 5)
				old.ID, old.Generation = 1, 12345
				if _, err := cache.LoadVoucher(ctx, old); err != nil {
					t.Fatal(err)
				}
				if err := cache.Admit(ctx, seckill.Admission{VoucherID: 1, Generation: 12345, UserID: 77, OrderID: 7700}); err != nil {
					t.Fatal(err)
				}
			}
			rs := &raceStore{Store: store}
			vs.Store = rs
			orders := orderService(vs, store, 5000)
			var (
				mu       sync.Mutex
				answered = map[int64]int64{} // buyer → order answered 200
			)
			rs.afterInsert = func(v *seckill.Voucher) {
				for _, user := range []int64{42, 77} {
					o, err := orders.Buy(ctx, user, v.ID)
					if err != nil {
						t.Errorf("buy of user %d before the load: %v, want admitted", user, err)
						continue
					}
					mu.Lock()
					answered[user] = o.ID
					mu.Unlock()
				}
			}
			view, err := vs.Create(ctx, onSale("raced", 10))
			if err != nil {
				t.Fatal(err)
			}
			if len(answered) != 2 {
				t.Fatalf("answered %v, want both buyers admitted", answered)
			}
			if view.Remaining == nil || *view.Remaining != 8 {
				t.Errorf("Create says %v remaining, want 8", deref(view.Remaining))
			}
			for user, id := range answered {
				found, err := cache.BuyerOrders(ctx, user, view.ID)
				if err != nil || found[view.ID] != id {
					t.Errorf("buyer %d, answered order %d, holds %v in Redis (%v)", user, id, found, err)
				}
			}
			msgs, err := cache.ReadOrders(ctx, seckill.Shard{VoucherID: view.ID}, "race_test", 10, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			queued := map[int64]bool{}
			for _, m := range msgs {
				queued[m.Order.ID] = true
			}
			for user, id := range answered {
				if !queued[id] {
					t.Errorf("order %d of buyer %d, answered 200, is not in the stream: the workers will never write it", id, user)
				}
			}
			if queued[7700] {
				t.Error("the earlier database's order 7700 is still in the stream")
			}
			rec, err := (&redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: store, Cache: cache}).Reconcile(ctx, view.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.OK() || rec.Remaining != 8 || rec.Pending != 2 {
				t.Errorf("reconcile = %+v; want agreement with 8 remaining and 2 pending", rec)
			}
			// Asking again gives each buyer their own order (G5).
			for user, id := range answered {
				_, err := orders.Buy(ctx, user, view.ID)
				var e *seckill.Error
				if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != id {
					t.Errorf("buyer %d asking again = %v, want duplicate_order with %d", user, err, id)
				}
			}
		})
	}
}
