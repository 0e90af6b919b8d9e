package seckill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/sqlledger"
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
			cache := ledgerOf(vs).Cache
			for u := int64(1); u <= 3; u++ {
				if err := cache.Admit(ctx, seckill.Admission{VoucherID: view.ID, Generation: view.Generation, UserID: u, OrderID: 9000 + u}); err != nil {
					t.Fatal(err)
				}
			}
			// The database's half alone.
			if _, added, _, err := store.AddStock(ctx, view.ID, "k", 5); err != nil || !added {
				t.Fatalf("AddStock in the store = %v, %v", added, err)
			}
			r := &redisledger.Reconciler{Vouchers: vs, Repairer: ledgerOf(vs), Store: store, Cache: ledgerOf(vs).Cache}
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
				left, err := ledgerOf(vs).Cache.Remaining(ctx, view.ID)
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

// TestEndBeforeStartAnswersEnded: a sale an operator ended before it began
// answers ended at once, in every mode, on shards too, and on the
// challenge path, not "not started" until the start it had (then ended).
// Its window is empty: the start moved to the end.
func TestEndBeforeStartAnswersEnded(t *testing.T) {
	t.Parallel()
	later := func(title string) *seckill.Voucher {
		v := onSale(title, 10)
		v.BeginTime, v.EndTime = v.BeginTime.Add(time.Hour), v.EndTime.Add(time.Hour)
		return v
	}
	for _, tc := range []struct {
		name   string
		mode   seckill.Mode
		shards int
	}{
		{"stream", seckill.ModeStream, 1},
		{"stream, 4 shards", seckill.ModeStream, 4},
		{"queue", seckill.ModeQueue, 1},
		{"sync", seckill.ModeSync, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vs, store, _ := services(t, "")
			orders := orderService(vs, store, 100)
			switch tc.mode {
			case seckill.ModeQueue:
				ledgerOf(vs).Queued = true
				redisLedger(orders).Queue, redisLedger(orders).Queued = &queue{}, true
			case seckill.ModeSync:
				vs = &seckill.VoucherService{Store: store, Logger: vs.Logger, Clock: time.Now}
				vs.Ledger = &sqlledger.Ledger{Store: store}
				orders = &seckill.OrderService{Ledger: &sqlledger.Ledger{Store: store}, Store: store, Vouchers: vs, IDs: &counter{n: 100}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
			}
			ctx := t.Context()
			v := later("ended before it began, " + tc.name)
			v.Shards = tc.shards
			view, err := vs.Create(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			// A buyer of each home shard.
			for u := int64(1); u <= 8; u++ {
				if _, err := orders.Buy(ctx, u, view.ID); !errors.Is(err, seckill.ErrNotStarted) {
					t.Fatalf("buy of user %d before the start = %v, want not_started", u, err)
				}
			}
			ended, err := vs.End(ctx, view.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !ended.BeginTime.Equal(ended.EndTime) {
				t.Errorf("ended before it began: window [%v, %v), want empty", ended.BeginTime, ended.EndTime)
			}
			for u := int64(1); u <= 8; u++ {
				if _, err := orders.Buy(ctx, u, view.ID); !errors.Is(err, seckill.ErrEnded) {
					t.Errorf("buy of user %d after an end before the start = %v, want ended", u, err)
				}
			}
			if tc.mode == seckill.ModeSync {
				return
			}
			// Rebuilt from the database: ended still.
			if err := ledgerOf(vs).Cache.Unload(ctx, view.ID); err != nil {
				t.Fatal(err)
			}
			if err := ledgerOf(vs).Rebuild(ctx, view.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := orders.Buy(ctx, 9, view.ID); !errors.Is(err, seckill.ErrEnded) {
				t.Errorf("buy after an end before the start and an unload = %v, want ended", err)
			}
		})
	}
	t.Run("challenge", func(t *testing.T) {
		t.Parallel()
		cs, vs, _, _ := challenges(t, nil)
		cs.Clock = time.Now // the clock End moves the window by
		ctx := t.Context()
		v := later("challenged, ended before it began")
		v.Challenge, v.ChallengeLead = true, time.Minute
		view, err := vs.Create(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Check(ctx, 1, view.ID, ""); !errors.Is(err, seckill.ErrNotStarted) {
			t.Fatalf("challenge check before the start = %v, want not_started", err)
		}
		if _, err := vs.End(ctx, view.ID); err != nil {
			t.Fatal(err)
		}
		if err := cs.Check(ctx, 1, view.ID, ""); !errors.Is(err, seckill.ErrEnded) {
			t.Errorf("challenge check after an end before the start = %v, want ended", err)
		}
		if _, err := cs.Issue(ctx, 1, view.ID); !errors.Is(err, seckill.ErrEnded) {
			t.Errorf("challenge issued after an end before the start: %v, want ended", err)
		}
	})
}
