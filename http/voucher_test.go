package http_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// validVoucher returns a create-voucher body that passes validation.
func (e *env) validVoucher() map[string]any {
	return map[string]any{
		"title":     "Flash sale: 50 元 voucher",
		"stock":     100,
		"beginTime": e.now.Add(-time.Minute).Format(time.RFC3339),
		"endTime":   e.now.Add(time.Hour).Format(time.RFC3339),
	}
}

// createVoucher creates a voucher as admin and returns its answer.
func (e *env) createVoucher(body map[string]any) map[string]any {
	e.t.Helper()
	res := e.do("POST", "/api/admin/vouchers", e.admin, body)
	if res.status != 201 {
		e.t.Fatalf("create voucher = %d %s", res.status, res.raw)
	}
	return res.body
}

func TestCreateVoucher(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.validVoucher()
	res := e.do("POST", "/api/admin/vouchers", e.admin, body)
	if res.status != 201 {
		t.Fatalf("POST /api/admin/vouchers = %d %s", res.status, res.raw)
	}
	id, ok := res.body["id"].(string)
	if !ok || id == "" {
		t.Fatalf("id %v is not a decimal string", res.body["id"])
	}
	if loc := res.header.Get("Location"); loc != "/api/vouchers/"+id {
		t.Errorf("Location = %q", loc)
	}
	want := map[string]any{
		"id":        id,
		"title":     body["title"],
		"stock":     float64(100),
		"remaining": float64(100),
		"beginTime": body["beginTime"],
		"endTime":   body["endTime"],
	}
	for k, v := range want {
		if res.body[k] != v {
			t.Errorf("created voucher %s = %v, want %v", k, res.body[k], v)
		}
	}
	got := e.do("GET", "/api/vouchers/"+id, "", nil)
	if got.status != 200 {
		t.Fatalf("GET /api/vouchers/%s = %d %s", id, got.status, got.raw)
	}
	for k, v := range want {
		if got.body[k] != v {
			t.Errorf("read back %s = %v, want %v", k, got.body[k], v)
		}
	}
}

// TestCreateVoucherSale: what a voucher sells (price, value, currency,
// subtitle, rules, image) is stored and shown by the create answer, the
// voucher and the list; one created without them is free, in the server's
// default currency, with no description.
func TestCreateVoucherSale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.validVoucher()
	sale := map[string]any{
		"price":    float64(1250),
		"value":    float64(2000),
		"currency": "JPY",
		"subtitle": "一杯咖啡",
		"rules":    "Valid 30 days.\nOne per visit.",
		"imageUrl": "https://img.example.com/coffee.png",
	}
	for k, v := range sale {
		body[k] = v
	}
	created := e.createVoucher(body)
	plain := e.createVoucher(e.validVoucher())
	none := map[string]any{"price": float64(0), "value": float64(0), "currency": seckill.DefaultCurrency, "subtitle": "", "rules": "", "imageUrl": ""}

	list := e.do("GET", "/api/vouchers", "", nil)
	listed := map[string]map[string]any{}
	for _, v := range list.body["vouchers"].([]any) {
		listed[v.(map[string]any)["id"].(string)] = v.(map[string]any)
	}
	for _, tc := range []struct {
		voucher map[string]any
		want    map[string]any
	}{{created, sale}, {plain, none}} {
		id := tc.voucher["id"].(string)
		got := e.do("GET", "/api/vouchers/"+id, "", nil).body
		for k, v := range tc.want {
			if tc.voucher[k] != v {
				t.Errorf("voucher %s: created %s = %#v, want %#v", id, k, tc.voucher[k], v)
			}
			if got[k] != v {
				t.Errorf("voucher %s: read back %s = %#v, want %#v", id, k, got[k], v)
			}
			if listed[id][k] != v {
				t.Errorf("voucher %s: listed %s = %#v, want %#v", id, k, listed[id][k], v)
			}
		}
	}

	// A price with no deadline gets the default one; a deadline of 0 sent
	// with a price is refused, since its orders could never be paid.
	if got, want := created["payWithinSeconds"], float64(seckill.DefaultPricedPayWithin/time.Second); got != want {
		t.Errorf("a priced voucher created with no payWithinSeconds has %v, want %v", got, want)
	}
	if got := plain["payWithinSeconds"]; got != float64(0) {
		t.Errorf("a free voucher created with no payWithinSeconds has %v, want 0", got)
	}
	body = e.validVoucher()
	body["price"], body["payWithinSeconds"] = 100, 0
	res := e.do("POST", "/api/admin/vouchers", e.admin, body)
	e.wantError(res, 400, "invalid_argument")
	if !strings.Contains(string(res.raw), "payWithinSeconds") {
		t.Errorf("a priced voucher with payWithinSeconds 0: %s, want the field named", res.raw)
	}
}

func TestGetVoucher(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := e.createVoucher(e.validVoucher())
	id := v["id"].(string)

	// remaining comes from Redis, stock from the database: take 30 from the
	// Redis stock behind the service's back and both must show it.
	key := e.redisPrefix + ":{v" + id + "}:stock"
	if err := e.rawRedis.Do(context.Background(), e.rawRedis.B().Decrby().Key(key).Decrement(30).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	got := e.do("GET", "/api/vouchers/"+id, "", nil)
	if got.body["remaining"] != float64(70) || got.body["stock"] != float64(100) {
		t.Errorf("after Redis sold 30: remaining %v, stock %v; want 70 and 100", got.body["remaining"], got.body["stock"])
	}
	if err := e.rawRedis.Do(context.Background(), e.rawRedis.B().Del().Key(key).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got := e.do("GET", "/api/vouchers/"+id, "", nil); got.status != 200 || got.body["remaining"] != nil || !strings.Contains(string(got.raw), `"remaining":null`) {
		t.Errorf("voucher not in Redis: %d %s; want remaining null", got.status, got.raw)
	}

	for _, bad := range []string{"abc", "0", "-1", "01", "1.5", "99999999999999999999", "%20"} {
		e.wantError(e.do("GET", "/api/vouchers/"+bad, "", nil), 400, "invalid_argument")
	}
	e.wantError(e.do("GET", "/api/vouchers/987654321", "", nil), 404, "voucher_not_found")
}

func TestListVouchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 3 {
		b := e.validVoucher()
		b["title"] = fmt.Sprintf("voucher %d", i)
		ids = append(ids, e.createVoucher(b)["id"].(string))
	}
	res := e.do("GET", "/api/vouchers", "", nil)
	list := res.body["vouchers"].([]any)
	if res.status != 200 || len(list) != 3 {
		t.Fatalf("GET /api/vouchers = %d %s", res.status, res.raw)
	}
	for i, v := range list {
		if got, want := v.(map[string]any)["id"], ids[2-i]; got != want {
			t.Errorf("vouchers[%d].id = %v, want %v (newest first)", i, got, want)
		}
	}
	res = e.do("GET", "/api/vouchers?limit=2", "", nil)
	if list := res.body["vouchers"].([]any); len(list) != 2 {
		t.Errorf("limit=2 gave %d vouchers", len(list))
	}
	for _, bad := range []string{"0", "-1", "x", "1001"} {
		e.wantError(e.do("GET", "/api/vouchers?limit="+bad, "", nil), 400, "invalid_argument")
	}
}

// TestCreateVoucherShardsByMode: the stream mode makes a sharded voucher and
// every answer shows its shards; the sync and queue modes refuse shards
// above 1 with a 400 that says why, and store nothing.
func TestCreateVoucherShardsByMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []seckill.Mode{seckill.ModeStream, seckill.ModeQueue, seckill.ModeSync} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode})
			body := e.validVoucher()
			body["shards"] = 4
			res := e.do("POST", "/api/admin/vouchers", e.admin, body)
			if mode != seckill.ModeStream {
				e.wantError(res, 400, "invalid_argument")
				if msg := res.body["message"].(string); !strings.Contains(msg, "shards") || !strings.Contains(msg, string(mode)) {
					t.Errorf("message %q does not name shards and the %s mode", msg, mode)
				}
				if vs, err := e.store.Vouchers(context.Background(), 10); err != nil || len(vs) != 0 {
					t.Errorf("a refused voucher was stored: %v, %v", vs, err)
				}
				// One shard is what every mode takes.
				body["shards"] = 1
				if v := e.createVoucher(body); v["shards"] != float64(1) {
					t.Errorf("created with shards 1: %v", v)
				}
				return
			}
			if res.status != 201 || res.body["shards"] != float64(4) {
				t.Fatalf("create with 4 shards = %d %s", res.status, res.raw)
			}
			id := res.body["id"].(string)
			if got := e.do("GET", "/api/vouchers/"+id, "", nil); got.body["shards"] != float64(4) {
				t.Errorf("GET /api/vouchers/%s = %s; want shards 4", id, got.raw)
			}
			list := e.do("GET", "/api/vouchers", "", nil).body["vouchers"].([]any)
			if len(list) != 1 || list[0].(map[string]any)["shards"] != float64(4) {
				t.Errorf("GET /api/vouchers = %v; want the voucher with shards 4", list)
			}
			vid, _ := strconv.ParseInt(id, 10, 64)
			if v, err := e.store.Voucher(context.Background(), vid); err != nil || v.Shards != 4 {
				t.Errorf("the database's row = %+v, %v; want 4 shards", v, err)
			}
		})
	}
}
