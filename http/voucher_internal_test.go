package http

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
)

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
		"shards zero":        {with("shards", 0), "shards"},
		"shards negative":    {with("shards", -1), "shards"},
		"shards too many":    {with("shards", 65), "shards"},
		"shards a string":    {with("shards", "6"), "shards"},
		"shards a fraction":  {with("shards", 1.5), "shards"},
		"shards over stock":  {`{"title":"t","stock":3,"shards":4,"beginTime":"2026-01-01T00:00:00Z","endTime":"2099-01-01T00:00:00Z"}`, "shards"},
		"begin after end":    {with("beginTime", fakeNow.Add(2*time.Hour).Format(time.RFC3339)), "endTime"},
		"begin equals end":   {with("beginTime", fakeNow.Add(time.Hour).Format(time.RFC3339)), "endTime"},
		"end in the past":    {with("endTime", past), "endTime"},
		"bad begin":          {with("beginTime", "tomorrow"), "beginTime"},
		"begin without zone": {with("beginTime", "2026-12-01T20:00:00"), "beginTime"},
		"begin in year 0":    {with("beginTime", "0000-01-01T00:00:00Z"), "beginTime"},
		"no end":             {with("endTime", nil), "endTime"},
		"unknown field":      {with("discount", 5), "discount"},
		"price negative":     {with("price", -1), "price"},
		"price too large":    {with("price", 1_000_000_000_001), "price"},
		"price a fraction":   {with("price", 12.5), "price"},
		"price a string":     {with("price", "1250"), "price"},
		"value negative":     {with("value", -1), "value"},
		"value below price":  {`{"title":"t","stock":3,"price":1000,"value":999,"beginTime":"2026-01-01T00:00:00Z","endTime":"2099-01-01T00:00:00Z"}`, "value"},
		"currency lower":     {with("currency", "cny"), "currency"},
		"currency unknown":   {with("currency", "XYZ"), "CNY, EUR"},
		"currency empty":     {with("currency", ""), "currency"},
		"currency a number":  {with("currency", 156), "currency"},
		"subtitle too long":  {with("subtitle", strings.Repeat("券", 201)), "subtitle"},
		"subtitle newline":   {with("subtitle", "a\nb"), "subtitle"},
		"rules too long":     {with("rules", strings.Repeat("r", 5001)), "rules"},
		"rules control char": {with("rules", "a\x00b"), "rules"},
		"image relative":     {with("imageUrl", "/img/v.png"), "imageUrl"},
		"image ftp":          {with("imageUrl", "ftp://example.com/v.png"), "imageUrl"},
		"image javascript":   {with("imageUrl", "javascript:alert(1)"), "imageUrl"},
		"image no host":      {with("imageUrl", "https:///v.png"), "imageUrl"},
		"image with space":   {with("imageUrl", "https://example.com/a b.png"), "imageUrl"},
		"image user info":    {with("imageUrl", "https://u:p@example.com/v.png"), "imageUrl"},
		"image too long":     {with("imageUrl", "https://example.com/"+strings.Repeat("a", 2048)), "imageUrl"},
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

// TestCreateVoucherShards: shards are passed on to the service, 1 when the
// request has none, and every answer shows them.
func TestCreateVoucherShards(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	for _, tc := range []struct {
		shards any // nil: absent
		want   int
	}{
		{nil, 1},
		{1, 1},
		{6, 6},
		{64, 64},
	} {
		body := e.validVoucher()
		if tc.shards != nil {
			body["shards"] = tc.shards
		}
		res := e.do("POST", "/api/admin/vouchers", e.admin, body)
		if res.status != 201 {
			t.Fatalf("create with shards %v = %d %s", tc.shards, res.status, res.raw)
		}
		if got := res.body["shards"]; got != float64(tc.want) {
			t.Errorf("create with shards %v answered shards %v; want %d", tc.shards, got, tc.want)
		}
		created := e.vouchers.vouchers[len(e.vouchers.vouchers)-1]
		if created.Shards != tc.want {
			t.Errorf("create with shards %v gave the service Shards %d; want %d", tc.shards, created.Shards, tc.want)
		}
		id := res.body["id"].(string)
		if got := e.do("GET", "/api/vouchers/"+id, "", nil); got.status != 200 || got.body["shards"] != float64(tc.want) {
			t.Errorf("GET /api/vouchers/%s = %d %s; want shards %d", id, got.status, got.raw, tc.want)
		}
	}
	// A voucher read from a row made before shards (Shards 0) shows 1.
	e.vouchers.vouchers[0].Shards = 0
	list := e.do("GET", "/api/vouchers", "", nil)
	var got []any
	for _, v := range list.body["vouchers"].([]any) {
		got = append(got, v.(map[string]any)["shards"])
	}
	if want := []any{float64(64), float64(6), float64(1), float64(1)}; !slices.Equal(got, want) {
		t.Errorf("GET /api/vouchers shards %v; want %v", got, want)
	}
}
