package http_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// answer is one buyer's answer from POST /api/vouchers/{id}/seckill.
type answer struct {
	status  int
	code    string
	orderID string
}

// TestSeckillConcurrency is G1 and G2 under real concurrency: 2,000
// requests at once from 500 buyers asking 4 times each. Exactly the stock
// is sold (or every buyer, if the stock is larger), one order per buyer,
// each buyer's repeats carry its one order id, and after the drain the
// database holds exactly those orders and the stock they leave.
func TestSeckillConcurrency(t *testing.T) {
	t.Parallel()
	const buyers, repeats = 500, 4
	type run struct {
		mode    seckill.Mode
		backend string
		// redis is "" (the backend's Redis), "cluster" (a Redis Cluster of
		// 3 masters and 3 replicas) or "sentinel" (a master, a replica and
		// 3 sentinels).
		redis string
	}
	runs := []run{
		{seckill.ModeStream, "mysql", ""}, {seckill.ModeStream, "postgres", ""}, {seckill.ModeStream, "embedded", ""},
		{seckill.ModeQueue, "mysql", ""}, {seckill.ModeQueue, "postgres", ""},
		{seckill.ModeSync, "mysql", ""}, {seckill.ModeSync, "postgres", ""},
		{seckill.ModeStream, "mysql", "cluster"}, {seckill.ModeStream, "postgres", "cluster"}, {seckill.ModeQueue, "mysql", "cluster"},
		{seckill.ModeStream, "mysql", "sentinel"},
	}
	for _, r := range runs {
		for i, stock := range []int64{100, 600} {
			mode, backend := r.mode, r.backend
			name := fmt.Sprintf("%s/%s/stock=%d", mode, backend, stock)
			if r.redis != "" {
				name = fmt.Sprintf("%s/%s+%s/stock=%d", mode, backend, r.redis, stock)
			}
			t.Run(name, func(t *testing.T) {
				opt := envOptions{backend: backend, mode: mode}
				switch r.redis {
				case "cluster":
					opt.redisURL = faults.SharedCluster(t).URL
				case "sentinel":
					opt.redisURL = faults.SharedSentinel(t).URL
				}
				e := newEnv(t, opt)
				body := e.validVoucher()
				body["stock"] = stock
				voucherID := e.createVoucher(body)["id"].(string)
				if r.redis == "cluster" {
					// Each stock's sale on a master of its own.
					voucherID = e.voucherOnMaster(i, func() string { return e.createVoucher(body)["id"].(string) }, voucherID)
				}
				tokens := make([]string, buyers)
				for i := range tokens {
					tokens[i] = e.mint(auth.Identity{UserID: int64(1000 + i)}, time.Hour)
				}
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000, MaxConnsPerHost: 0}}
				defer client.CloseIdleConnections()

				answers := make([][]answer, buyers)
				var (
					mu    sync.Mutex
					wg    sync.WaitGroup
					start = make(chan struct{})
				)
				for i := range buyers * repeats {
					buyer := i % buyers
					wg.Go(func() {
						<-start
						res := e.doWith(client, "POST", "/api/vouchers/"+voucherID+"/seckill", tokens[buyer], nil)
						a := answer{status: res.status}
						a.code, _ = res.body["code"].(string)
						a.orderID, _ = res.body["orderId"].(string)
						mu.Lock()
						answers[buyer] = append(answers[buyer], a)
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()

				want := min(stock, buyers)
				admitted := map[string]int{} // order id → buyer
				for buyer, as := range answers {
					var id string
					oks := 0
					for _, a := range as {
						switch {
						case a.status == 200:
							oks++
						case a.status == 409 && (a.code == "duplicate_order" || a.code == "sold_out"):
						default:
							t.Fatalf("buyer %d got %d %q", buyer, a.status, a.code)
						}
						if a.orderID != "" {
							if id != "" && a.orderID != id {
								t.Fatalf("buyer %d got two order ids: %s and %s", buyer, id, a.orderID)
							}
							id = a.orderID
						}
						if a.code == "sold_out" && id != "" {
							t.Errorf("buyer %d with order %s was told sold_out", buyer, id)
						}
					}
					if id != "" {
						if oks != 1 {
							t.Errorf("buyer %d has order %s from %d answers of 200, want 1", buyer, id, oks)
						}
						admitted[id] = 1000 + buyer
					}
				}
				if int64(len(admitted)) != want {
					t.Fatalf("%d buyers admitted, want %d", len(admitted), want)
				}

				ctx := context.Background()
				vid := mustID(t, voucherID)
				testenv.WaitFor(t, 60*time.Second, "all admitted orders in the database", func() bool {
					n, err := e.store.CountOrders(ctx, vid)
					return err == nil && n >= want
				})
				stored, err := e.store.VoucherOrders(ctx, vid, 0, 10_000)
				if err != nil {
					t.Fatal(err)
				}
				users := map[int64]bool{}
				for _, o := range stored {
					if admitted[fmt.Sprint(o.ID)] != int(o.UserID) {
						t.Errorf("order %d of user %d in the database was not answered 200 to that user", o.ID, o.UserID)
					}
					users[o.UserID] = true
				}
				if int64(len(stored)) != want || int64(len(users)) != want {
					t.Errorf("database: %d orders of %d buyers, want %d of %d", len(stored), len(users), want, want)
				}
				v, err := e.store.Voucher(ctx, vid)
				if err != nil {
					t.Fatal(err)
				}
				if v.Stock != stock-want {
					t.Errorf("database stock %d, want %d", v.Stock, stock-want)
				}
				got := e.do("GET", "/api/vouchers/"+voucherID, "", nil)
				if got.body["remaining"] != float64(stock-want) {
					t.Errorf("remaining %v, want %d", got.body["remaining"], stock-want)
				}
				if mode == seckill.ModeSync {
					return
				}
				rec, err := e.app.Reconciler.Reconcile(ctx, vid, false)
				if err != nil || !rec.OK() {
					t.Errorf("Redis and the database disagree: %+v, %v", rec, err)
				}
			})
		}
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	var id int64
	if _, err := fmt.Sscan(s, &id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSeckillAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	body := e.validVoucher()
	body["stock"] = 1
	id := e.createVoucher(body)["id"].(string)

	e.wantError(e.do("POST", "/api/vouchers/"+id+"/seckill", "", nil), 401, "unauthorized")
	e.wantError(e.do("POST", "/api/vouchers/abc/seckill", e.buyer, nil), 400, "invalid_argument")
	e.wantError(e.do("POST", "/api/vouchers/987654/seckill", e.buyer, nil), 404, "voucher_not_found")

	first := e.do("POST", "/api/vouchers/"+id+"/seckill", e.buyer, nil)
	if first.status != 200 || first.body["status"] != "pending" || first.body["orderId"] == "" {
		t.Fatalf("first buy = %d %s", first.status, first.raw)
	}
	again := e.do("POST", "/api/vouchers/"+id+"/seckill", e.buyer, nil)
	e.wantError(again, 409, "duplicate_order")
	if again.body["orderId"] != first.body["orderId"] {
		t.Errorf("duplicate_order carries %v, want the first order %v", again.body["orderId"], first.body["orderId"])
	}
	other := e.mint(auth.Identity{UserID: 3}, time.Hour)
	e.wantError(e.do("POST", "/api/vouchers/"+id+"/seckill", other, nil), 409, "sold_out")

	later := e.validVoucher()
	later["beginTime"] = e.now.Add(30 * time.Minute).Format(time.RFC3339)
	laterID := e.createVoucher(later)["id"].(string)
	e.wantError(e.do("POST", "/api/vouchers/"+laterID+"/seckill", e.buyer, nil), 409, "not_started")

	// A sale that is over: written to the database and Redis directly, as
	// the API refuses to create one.
	over := &seckill.Voucher{Title: "over", Stock: 5, InitialStock: 5, BeginTime: e.now.Add(-2 * time.Hour), EndTime: e.now.Add(-time.Hour)}
	if err := e.store.CreateVoucher(ctx, over); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cache.LoadVoucher(ctx, over); err != nil {
		t.Fatal(err)
	}
	e.wantError(e.do("POST", fmt.Sprintf("/api/vouchers/%d/seckill", over.ID), e.buyer, nil), 409, "ended")
	// And one over that Redis does not hold: the same answer, from the rebuild.
	over2 := &seckill.Voucher{Title: "over", Stock: 5, InitialStock: 5, BeginTime: e.now.Add(-2 * time.Hour), EndTime: e.now.Add(-time.Hour)}
	if err := e.store.CreateVoucher(ctx, over2); err != nil {
		t.Fatal(err)
	}
	e.wantError(e.do("POST", fmt.Sprintf("/api/vouchers/%d/seckill", over2.ID), e.buyer, nil), 409, "ended")

	// Each answer counted by its result; the 401 and the 400 (a malformed
	// id) never reached the buy.
	for result, want := range map[string]float64{"admitted": 1, "duplicate_order": 1, "sold_out": 1, "not_started": 1,
		"ended": 2, "voucher_not_found": 1, "rate_limited": 0, "unavailable": 0, "invalid_argument": 0} {
		if got := e.metric(`seckill_admissions_total{result="` + result + `"}`); got != want {
			t.Errorf("seckill_admissions_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := e.metric("seckill_admission_duration_seconds_count"); got != 7 {
		t.Errorf("seckill_admission_duration_seconds_count = %v, want 7", got)
	}
}

// TestOrderStatus: an order reads pending while its message waits, then
// created; only its owner sees it.
func TestOrderStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{holdWorkers: true}) // no workers: orders stay pending
	id := e.createVoucher(e.validVoucher())["id"].(string)
	res := e.do("POST", "/api/vouchers/"+id+"/seckill", e.buyer, nil)
	if res.status != 200 {
		t.Fatalf("buy = %d %s", res.status, res.raw)
	}
	orderID := res.body["orderId"].(string)

	got := e.do("GET", "/api/orders/"+orderID, e.buyer, nil)
	if got.status != 200 || got.body["status"] != "pending" || got.body["voucherId"] != id || got.body["userId"] != "2" {
		t.Fatalf("GET order while pending = %d %s", got.status, got.raw)
	}
	list := e.do("GET", "/api/orders", e.buyer, nil)
	if orders := list.body["orders"].([]any); len(orders) != 1 || orders[0].(map[string]any)["status"] != "pending" {
		t.Fatalf("GET /api/orders while pending = %s", list.raw)
	}
	other := e.mint(auth.Identity{UserID: 99}, time.Hour)
	e.wantError(e.do("GET", "/api/orders/"+orderID, other, nil), 404, "order_not_found")
	if list := e.do("GET", "/api/orders", other, nil); len(list.body["orders"].([]any)) != 0 {
		t.Errorf("another user lists %s", list.raw)
	}
	e.wantError(e.do("GET", "/api/orders/"+orderID, "", nil), 401, "unauthorized")
	e.wantError(e.do("GET", "/api/orders/x1", e.buyer, nil), 400, "invalid_argument")
	e.wantError(e.do("GET", "/api/orders/12345", e.buyer, nil), 404, "order_not_found")
	e.wantError(e.do("GET", "/api/orders?limit=0", e.buyer, nil), 400, "invalid_argument")

	// The workers started: the order becomes created.
	e.startPool()
	testenv.WaitFor(t, 30*time.Second, "order created", func() bool {
		return e.do("GET", "/api/orders/"+orderID, e.buyer, nil).body["status"] == "created"
	})
	e.wantError(e.do("GET", "/api/orders/"+orderID, other, nil), 404, "order_not_found")
}

// voucherOnMaster returns id, or the first voucher that more calls of
// create make, that the Cluster's master number i (in slot order) holds.
func (e *env) voucherOnMaster(i int, create func() string, id string) string {
	e.t.Helper()
	ctx := context.Background()
	topo, err := e.cache.Topology(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	want := topo.Masters[i%len(topo.Masters)].Addr
	for range 100 {
		masters, err := e.cache.VoucherMasters(ctx, mustID(e.t, id))
		if err != nil {
			e.t.Fatal(err)
		}
		if masters[mustID(e.t, id)] == want {
			return id
		}
		id = create()
	}
	e.t.Fatalf("no voucher of 100 on master %s", want)
	return ""
}
