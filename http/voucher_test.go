package http

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
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

// validVoucher returns a create-voucher body that passes validation on the
// fakes' clock.
func (e *fakeEnv) validVoucher() map[string]any {
	return map[string]any{
		"title":     "Flash sale: 50 元 voucher",
		"stock":     100,
		"beginTime": fakeNow.Add(-time.Minute).Format(time.RFC3339),
		"endTime":   fakeNow.Add(time.Hour).Format(time.RFC3339),
	}
}

func TestCreateVoucherAuth(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	body := e.validVoucher()
	expired := e.mint(auth.Identity{UserID: 1, Admin: true})
	e.tokens.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	e.wantError(e.do("POST", "/api/admin/vouchers", expired, body), 401, "unauthorized")
	e.tokens.Now = time.Now

	other, err := auth.NewTokens([]byte("a different secret, also long enough"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		header string
		status int
		code   string
	}{
		"no token":           {"", 401, "unauthorized"},
		"not bearer":         {"Basic YWRtaW46YWRtaW4=", 401, "unauthorized"},
		"empty bearer":       {"Bearer ", 401, "unauthorized"},
		"garbage":            {"Bearer abc.def.ghi", 401, "unauthorized"},
		"forged":             {"Bearer " + forged, 401, "unauthorized"},
		"buyer is not admin": {"Bearer " + e.buyer, 403, "forbidden"},
	} {
		t.Run(name, func(t *testing.T) {
			res := e.doHeader("POST", "/api/admin/vouchers", tc.header, body)
			wantError(t, res, tc.status, tc.code)
			if tc.status == 401 && !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
		})
	}
	// Nothing was created by any of them.
	e.untouched()
}

func TestCreateVoucherInvalid(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	with := func(k string, v any) map[string]any {
		b := e.validVoucher()
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	past := fakeNow.Add(-time.Hour).Format(time.RFC3339)
	for name, tc := range map[string]struct {
		body any
		want string // in the message
	}{
		"empty title":        {with("title", ""), "title"},
		"blank title":        {with("title", "   "), "title"},
		"title too long":     {with("title", strings.Repeat("券", 201)), "title"},
		"title control char": {with("title", "a\x00b"), "title"},
		"no title":           {with("title", nil), "title"},
		"title not a string": {with("title", 5), "title"},
		"stock zero":         {with("stock", 0), "stock"},
		"stock negative":     {with("stock", -1), "stock"},
		"stock too large":    {with("stock", 10_000_001), "stock"},
		"stock a string":     {with("stock", "10"), "stock"},
		"stock a fraction":   {with("stock", 1.5), "stock"},
		"stock huge":         {`{"title":"t","stock":1e30,"beginTime":"2026-01-01T00:00:00Z","endTime":"2099-01-01T00:00:00Z"}`, "stock"},
		"no stock":           {with("stock", nil), "stock"},
		"begin after end":    {with("beginTime", fakeNow.Add(2*time.Hour).Format(time.RFC3339)), "endTime"},
		"begin equals end":   {with("beginTime", fakeNow.Add(time.Hour).Format(time.RFC3339)), "endTime"},
		"end in the past":    {with("endTime", past), "endTime"},
		"bad begin":          {with("beginTime", "tomorrow"), "beginTime"},
		"begin without zone": {with("beginTime", "2026-12-01T20:00:00"), "beginTime"},
		"begin in year 0":    {with("beginTime", "0000-01-01T00:00:00Z"), "beginTime"},
		"no end":             {with("endTime", nil), "endTime"},
		"unknown field":      {with("price", 5), "price"},
		"array":              {`[1,2]`, "object"},
		"two objects":        {`{"title":"a"} {"title":"b"}`, "single"},
		"malformed":          {`{"title": "a",`, "JSON"},
		"not json":           {`title=a&stock=5`, "JSON"},
		"empty body":         {``, "empty"},
		"null":               {`null`, "title"},
	} {
		t.Run(name, func(t *testing.T) {
			res := e.do("POST", "/api/admin/vouchers", e.admin, tc.body)
			wantError(t, res, 400, "invalid_argument")
			if msg := res.body["message"].(string); !strings.Contains(msg, tc.want) {
				t.Errorf("message %q does not mention %q", msg, tc.want)
			}
		})
	}
	if len(e.vouchers.vouchers) != 0 {
		t.Errorf("invalid requests created vouchers: %v", e.vouchers.vouchers)
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	big := `{"title":"` + strings.Repeat("a", 64<<10) + `"}`
	e.wantError(e.do("POST", "/api/admin/vouchers", e.admin, big), 413, "body_too_large")
	e.wantError(e.do("POST", "/api/auth/code", "", big), 413, "body_too_large")
	e.untouched()
}

func TestGetVoucher(t *testing.T) {
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
