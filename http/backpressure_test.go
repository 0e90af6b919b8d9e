package http_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
)

// TestBackpressure: the database stops answering during a sale. Admission
// goes on into the stream until its backlog reaches the high-water mark,
// then answers 503 with Retry-After, so Redis cannot fill up; the workers
// back off (their circuit breaker) instead of spinning. When the database
// is back, everything drains, nothing is lost, and admission resumes.
func TestBackpressure(t *testing.T) {
	t.Parallel()
	const high, low = 40, 10
	e := newEnv(t, envOptions{proxyDB: true, backlogHigh: high, backlogLow: low})
	body := e.validVoucher()
	body["stock"] = 1000
	voucherID := e.createVoucher(body)["id"].(string)
	vid := mustID(t, voucherID)
	e.dbProxy.Down()

	admitted := map[string]int64{}
	refused := 0
	for u := int64(0); u < 300 && refused < 20; u++ {
		token := e.mint(auth.Identity{UserID: 5000 + u}, time.Hour)
		res := e.do("POST", "/api/vouchers/"+voucherID+"/seckill", token, nil)
		switch {
		case res.status == 200:
			admitted[res.body["orderId"].(string)] = 5000 + u
		case res.status == 503 && res.body["code"] == "unavailable":
			if res.header.Get("Retry-After") == "" {
				t.Fatal("a 503 without Retry-After")
			}
			refused++
		default:
			t.Fatalf("buy %d: %d %s", u, res.status, res.raw)
		}
		time.Sleep(2 * time.Millisecond) // a steady stream of buyers
	}
	if refused == 0 {
		t.Fatalf("admission never paused: %d admitted with the database down", len(admitted))
	}
	// The mark is read every 50ms: a few more than it may get in.
	if len(admitted) < high || len(admitted) > high+40 {
		t.Errorf("%d admitted before the pause, want about the high-water mark %d", len(admitted), high)
	}
	if got := e.metric(`seckill_admissions_total{result="unavailable"}`); got != float64(refused) {
		t.Errorf("seckill_admissions_total{result=\"unavailable\"} = %v, want the %d refused", got, refused)
	}
	if w := e.app.Pool.WorkerStats(); w.Breaker == "closed" {
		t.Errorf("the database is down and the workers' breaker is %q", w.Breaker)
	}

	e.dbProxy.Up()
	ctx := context.Background()
	testenv.WaitFor(t, 30*time.Second, "the backlog drained", func() bool {
		n, err := e.store.CountOrders(ctx, vid)
		return err == nil && n == int64(len(admitted))
	})
	for id, user := range admitted {
		o, err := e.store.Order(ctx, mustID(t, id))
		if err != nil || o.UserID != user || o.Status != "created" {
			t.Fatalf("order %s of user %d after the drain: %+v, %v", id, user, o, err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "admission resumed", func() bool {
		res := e.do("POST", "/api/vouchers/"+voucherID+"/seckill", e.mint(auth.Identity{UserID: 9999}, time.Hour), nil)
		return res.status == 200 || res.body["code"] == "duplicate_order"
	})
	t.Logf("%d admitted, then %d refused with 503 while the database was down; all drained after", len(admitted), refused)
}
