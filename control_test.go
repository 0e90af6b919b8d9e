package seckill_test

import (
	"context"
	"testing"

	"github.com/seckill/seckill"
)

// TestAddStockCrashBetweenWrites: an addition of stock the database took
// and Redis never did (the process died between the two) leaves Redis
// with less stock than the database: reconcile's invariant shows the
// units as drift, and either the same request again (its key adds
// nothing) or a repair puts Redis right, exactly once.
func TestAddStockCrashBetweenWrites(t *testing.T) {
	t.Parallel()
	for _, fix := range []string{"retry", "repair"} {
		t.Run(fix, func(t *testing.T) {
			t.Parallel()
			vs, store, _ := services(t, "")
			ctx := context.Background()
			view, err := vs.Create(ctx, onSale("restocked", 10))
			if err != nil {
				t.Fatal(err)
			}
			cache := vs.Cache.(seckill.OrderCache)
			for u := int64(1); u <= 3; u++ {
				if err := cache.Admit(ctx, seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9000 + u}); err != nil {
					t.Fatal(err)
				}
			}
			// The database's half alone.
			if _, added, _, err := store.AddStock(ctx, view.ID, "k", 5); err != nil || !added {
				t.Fatalf("AddStock in the store = %v, %v", added, err)
			}
			r := &seckill.Reconciler{Vouchers: vs, Store: store, Cache: vs.Cache}
			rec, err := r.Reconcile(ctx, view.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if rec.OK() || rec.Drift != 5 {
				t.Fatalf("reconcile after the database's half: ok %v, drift %d; want drift 5", rec.OK(), rec.Drift)
			}
			var remaining int64
			switch fix {
			case "retry":
				got, err := vs.AddStock(ctx, view.ID, "k", 5)
				if err != nil {
					t.Fatal(err)
				}
				remaining = *got.Remaining
			case "repair":
				if rec, err := r.Reconcile(ctx, view.ID, true); err != nil || !rec.Repaired {
					t.Fatalf("repair = %+v, %v", rec, err)
				}
				left, err := vs.Cache.Remaining(ctx, view.ID)
				if err != nil {
					t.Fatal(err)
				}
				remaining = left[view.ID]
			}
			if remaining != 12 {
				t.Errorf("remaining after the %s = %d, want 12 (15 − 3 admitted)", fix, remaining)
			}
			if rec, err := r.Reconcile(ctx, view.ID, false); err != nil || !rec.OK() {
				t.Errorf("reconcile after the %s: %+v, %v", fix, rec, err)
			}
			if v, err := store.Voucher(ctx, view.ID); err != nil || v.InitialStock != 15 {
				t.Errorf("database initial stock %+v, %v; want 15: added once", v, err)
			}
		})
	}
}
