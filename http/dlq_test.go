package http_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/testenv"
)

// newDLQEnv is newEnv's server in the stream mode, its workers not started: the test starts them
// (startPool) once it has made its dead letters.
func newDLQEnv(t *testing.T) *env {
	return newEnv(t, envOptions{holdWorkers: true})
}

// buyAs buys the voucher as the user and returns the order id.
func (e *env) buyAs(user int64, voucher string) (token, orderID string) {
	e.t.Helper()
	token = e.mint(auth.Identity{UserID: user}, time.Hour)
	res := e.do("POST", "/api/vouchers/"+voucher+"/seckill", token, nil)
	if res.status != 200 {
		e.t.Fatalf("user %d buys voucher %s: %d %s", user, voucher, res.status, res.raw)
	}
	return token, res.body["orderId"].(string)
}

// deadLetterAll reads the voucher's new order messages and dead-letters
// each as the workers do: its order recorded failed, then the message moved
// with its stock and buyer slot given back.
func (e *env) deadLetterAll(voucherID int64, reason string) {
	e.t.Helper()
	ctx := context.Background()
	msgs, err := e.cache.ReadOrders(ctx, seckill.Shard{VoucherID: voucherID}, "test", 100, 0)
	if err != nil || len(msgs) == 0 {
		e.t.Fatalf("read orders: %d, %v", len(msgs), err)
	}
	for _, m := range msgs {
		if m.Err == nil {
			o := m.Order
			o.Status, o.Reason = seckill.OrderFailed, reason
			if err := e.store.FailOrder(ctx, &o); err != nil {
				e.t.Fatal(err)
			}
		}
		if moved, err := e.cache.DeadLetter(ctx, m, seckill.DeadLetter{Reason: reason}); err != nil || !moved {
			e.t.Fatalf("dead-letter %s: %v, %v", m.EntryID, moved, err)
		}
	}
}

// deadLetters lists the dead letters through the API, by id.
func (e *env) deadLetters() map[string]map[string]any {
	e.t.Helper()
	res := e.do("GET", "/api/admin/dlq", e.admin, nil)
	list, ok := res.body["deadLetters"].([]any)
	if res.status != 200 || !ok {
		e.t.Fatalf("GET /api/admin/dlq = %d %s", res.status, res.raw)
	}
	out := map[string]map[string]any{}
	for _, d := range list {
		m := d.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

func (e *env) orderStatus(token, id string) string {
	e.t.Helper()
	res := e.do("GET", "/api/orders/"+id, token, nil)
	if res.status != 200 {
		e.t.Fatalf("GET /api/orders/%s = %d %s", id, res.status, res.raw)
	}
	return res.body["status"].(string)
}

// TestDeadLetterAPI: a sale in which orders are dead-lettered, then listed,
// retried (with and without stock), discarded, through the admin API.
func TestDeadLetterAPI(t *testing.T) {
	t.Parallel()
	e := newDLQEnv(t)
	ctx := context.Background()
	if res := e.do("GET", "/api/admin/dlq", e.admin, nil); res.status != 200 || string(res.raw) != "{\"deadLetters\":[]}\n" {
		t.Errorf("GET /api/admin/dlq with none = %d %s, want an empty list", res.status, res.raw)
	}
	body := e.validVoucher()
	body["stock"] = 2
	voucher := e.createVoucher(body)["id"].(string)
	vid := mustID(t, voucher)
	tokenA, orderA := e.buyAs(10, voucher)
	tokenB, orderB := e.buyAs(11, voucher)
	before := time.Now().Add(-time.Second)
	e.deadLetterAll(vid, "test: the database refused it")
	if err := e.rawRedis.Do(ctx, e.rawRedis.B().Xadd().Key(fmt.Sprintf("%s:{v%d}:orders", e.redisPrefix, vid)).Id("*").
		FieldValue().FieldValue("junk", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	e.deadLetterAll(vid, "malformed")
	after := time.Now().Add(time.Second)
	_, orderC := e.buyAs(12, voucher) // one unit left

	// The list: each with its fields, ids as strings, times RFC 3339.
	list := e.deadLetters()
	if len(list) != 3 {
		t.Fatalf("%d dead letters, want 3: %v", len(list), list)
	}
	var malformed string
	for id, d := range list {
		at, err := time.Parse(time.RFC3339Nano, d["at"].(string))
		if err != nil || at.Before(before) || at.After(after) {
			t.Errorf("dead letter %s at %v (%v), want an RFC 3339 time between %v and %v", id, d["at"], err, before, after)
		}
		delete(d, "at")
		if strings.HasPrefix(id, voucher+":") {
			malformed = id
		}
	}
	want := map[string]map[string]any{
		orderA:    {"id": orderA, "voucherId": voucher, "orderId": orderA, "userId": "10", "reason": "test: the database refused it", "stockReturned": true},
		orderB:    {"id": orderB, "voucherId": voucher, "orderId": orderB, "userId": "11", "reason": "test: the database refused it", "stockReturned": true},
		malformed: {"id": malformed, "voucherId": voucher, "reason": "malformed", "stockReturned": false},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("GET /api/admin/dlq (-want +got):\n%s", diff)
	}

	e.startPool()
	testenv.WaitFor(t, 20*time.Second, "order C persisted", func() bool { return e.orderStatus(e.mint(auth.Identity{UserID: 12}, time.Hour), orderC) == "created" })

	// Retry with a unit left: pending, then created; the dead letter gone.
	res := e.do("POST", "/api/admin/dlq/"+orderA+"/retry", e.admin, nil)
	if res.status != 200 || res.body["orderId"] != orderA || res.body["status"] != "pending" {
		t.Fatalf("retry %s = %d %s, want 200 with the order pending", orderA, res.status, res.raw)
	}
	testenv.WaitFor(t, 20*time.Second, "the retried order created", func() bool { return e.orderStatus(tokenA, orderA) == "created" })
	if _, ok := e.deadLetters()[orderA]; ok {
		t.Errorf("dead letter %s still listed after its retry", orderA)
	}

	// Retry when sold out: 409, nothing changes.
	e.wantError(e.do("POST", "/api/admin/dlq/"+orderB+"/retry", e.admin, nil), 409, "sold_out")
	if st := e.orderStatus(tokenB, orderB); st != "failed" {
		t.Errorf("order %s is %s after a refused retry, want failed", orderB, st)
	}
	if _, ok := e.deadLetters()[orderB]; !ok {
		t.Errorf("dead letter %s gone after a refused retry", orderB)
	}

	// Discard: gone; the order stays failed.
	res = e.do("POST", "/api/admin/dlq/"+orderB+"/discard", e.admin, nil)
	if res.status != 200 || res.body["discarded"] != true {
		t.Fatalf("discard %s = %d %s, want 200 discarded", orderB, res.status, res.raw)
	}
	if _, ok := e.deadLetters()[orderB]; ok {
		t.Errorf("dead letter %s still listed after its discard", orderB)
	}
	if st := e.orderStatus(tokenB, orderB); st != "failed" {
		t.Errorf("order %s is %s after its discard, want failed", orderB, st)
	}
	e.wantError(e.do("POST", "/api/admin/dlq/"+orderB+"/retry", e.admin, nil), 404, "dead_letter_not_found")
	e.wantError(e.do("POST", "/api/admin/dlq/"+orderB+"/discard", e.admin, nil), 404, "dead_letter_not_found")

	// The malformed one cannot be retried; it can be discarded.
	e.wantError(e.do("POST", "/api/admin/dlq/"+malformed+"/retry", e.admin, nil), 400, "invalid_argument")
	if res := e.do("POST", "/api/admin/dlq/"+malformed+"/discard", e.admin, nil); res.status != 200 {
		t.Errorf("discard %s = %d %s", malformed, res.status, res.raw)
	}
	if list := e.deadLetters(); len(list) != 0 {
		t.Errorf("dead letters left: %v, want none", list)
	}
}

// TestDeadLetterAPIRefuses: bad ids, non-admins and the anonymous get the
// usual errors, and change nothing.
func TestDeadLetterAPIRefuses(t *testing.T) {
	t.Parallel()
	e := newDLQEnv(t)
	voucher := e.createVoucher(e.validVoucher())["id"].(string)
	_, order := e.buyAs(10, voucher)
	e.deadLetterAll(mustID(t, voucher), "r")

	for _, id := range []string{"abc", "0", "-1", "01", "1:x", voucher + ":1", strings.Repeat("9", 100), "%20" + order} {
		e.wantError(e.do("POST", "/api/admin/dlq/"+id+"/retry", e.admin, nil), 400, "invalid_argument")
		e.wantError(e.do("POST", "/api/admin/dlq/"+id+"/discard", e.admin, nil), 400, "invalid_argument")
	}
	for _, id := range []string{"123456789", voucher + ":1-1"} {
		e.wantError(e.do("POST", "/api/admin/dlq/"+id+"/retry", e.admin, nil), 404, "dead_letter_not_found")
		e.wantError(e.do("POST", "/api/admin/dlq/"+id+"/discard", e.admin, nil), 404, "dead_letter_not_found")
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/admin/dlq"},
		{"POST", "/api/admin/dlq/" + order + "/retry"},
		{"POST", "/api/admin/dlq/" + order + "/discard"},
		{"POST", "/api/admin/vouchers/" + voucher + "/reconcile?repair=true"},
	} {
		e.wantError(e.do(r.method, r.path, e.buyer, nil), 403, "forbidden")
		e.wantError(e.do(r.method, r.path, "", nil), 401, "unauthorized")
	}
	if _, ok := e.deadLetters()[order]; !ok {
		t.Errorf("dead letter %s gone after refused requests", order)
	}
}

func TestReconcileAPI(t *testing.T) {
	t.Parallel()
	e := newDLQEnv(t)
	ctx := context.Background()
	e.startPool()
	body := e.validVoucher()
	body["stock"] = 3
	voucher := e.createVoucher(body)["id"].(string)
	tokenA, orderA := e.buyAs(10, voucher)
	testenv.WaitFor(t, 20*time.Second, "the order persisted", func() bool { return e.orderStatus(tokenA, orderA) == "created" })

	reconcile := func(query string) map[string]any {
		t.Helper()
		res := e.do("POST", "/api/admin/vouchers/"+voucher+"/reconcile"+query, e.admin, nil)
		if res.status != 200 {
			t.Fatalf("reconcile%s = %d %s", query, res.status, res.raw)
		}
		return res.body
	}
	want := map[string]any{"voucherId": voucher, "initialStock": 3.0, "dbStock": 2.0, "dbOrders": 1.0, "loaded": true,
		"remaining": 2.0, "buyers": 1.0, "pending": 0.0, "deadLetters": 0.0, "drift": 0.0, "buyerDrift": 0.0, "ok": true, "repaired": false}
	if diff := cmp.Diff(want, reconcile("")); diff != "" {
		t.Errorf("reconcile (-want +got):\n%s", diff)
	}
	// Redis gains a unit it should not have: drift, reported, then repaired.
	if err := e.rawRedis.Do(ctx, e.rawRedis.B().Incr().Key(fmt.Sprintf("%s:{v%s}:stock", e.redisPrefix, voucher)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	want["remaining"], want["drift"], want["ok"] = 3.0, -1.0, false
	if diff := cmp.Diff(want, reconcile("?repair=false")); diff != "" {
		t.Errorf("reconcile with drift (-want +got):\n%s", diff)
	}
	want["remaining"], want["drift"], want["ok"], want["repaired"] = 2.0, 0.0, true, true
	if diff := cmp.Diff(want, reconcile("?repair=true")); diff != "" {
		t.Errorf("reconcile?repair=true (-want +got):\n%s", diff)
	}

	e.wantError(e.do("POST", "/api/admin/vouchers/"+voucher+"/reconcile?repair=maybe", e.admin, nil), 400, "invalid_argument")
	e.wantError(e.do("POST", "/api/admin/vouchers/x/reconcile", e.admin, nil), 400, "invalid_argument")
	e.wantError(e.do("POST", "/api/admin/vouchers/987654/reconcile", e.admin, nil), 404, "voucher_not_found")
}
