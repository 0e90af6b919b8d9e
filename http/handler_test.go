package http

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// The handlers on fakes: the error table, the JSON of every route's
// answers, bad input (G7) and access (G8). Each answer is also checked
// against openapi.json (fakeEnv.do).

// TestErrorTable: every domain error answers its status and code, with a
// client-safe message, Retry-After where a client should wait, and the
// existing order of a duplicate; anything else is a 500 that tells nothing.
func TestErrorTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       string
		message    string
		retryAfter string
		orderID    string
	}{
		{"invalid argument", seckill.ErrInvalidArgument, 400, "invalid_argument", "invalid argument", "", ""},
		{"invalid argument with message", seckill.Errorf(seckill.ErrInvalidArgument, "stock: must be positive"), 400, "invalid_argument", "stock: must be positive", "", ""},
		{"unauthorized", seckill.ErrUnauthorized, 401, "unauthorized", "unauthorized", "", ""},
		{"forbidden", seckill.ErrForbidden, 403, "forbidden", "forbidden", "", ""},
		{"voucher not found, wrapped", fmt.Errorf("get voucher 7: %w", seckill.ErrVoucherNotFound), 404, "voucher_not_found", "voucher not found", "", ""},
		{"order not found", seckill.ErrOrderNotFound, 404, "order_not_found", "order not found", "", ""},
		{"dead letter not found", seckill.ErrDeadLetterNotFound, 404, "dead_letter_not_found", "dead letter not found", "", ""},
		{"route not found", errRouteNotFound, 404, "not_found", "no such route", "", ""},
		{"method not allowed", errMethodNotAllowed, 405, "method_not_allowed", "method not allowed", "", ""},
		{"sold out", seckill.ErrSoldOut, 409, "sold_out", "sold out", "", ""},
		{"duplicate order", &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already hold an order", OrderID: 9007199254740993}, 409, "duplicate_order", "you already hold an order", "", "9007199254740993"},
		{"challenge required", seckill.ErrChallengeRequired, 403, "challenge_required", "challenge required", "", ""},
		{"challenge invalid", seckill.Errorf(seckill.ErrChallengeInvalid, "used"), 403, "challenge_invalid", "used", "", ""},
		{"challenge not needed", seckill.ErrChallengeNotNeeded, 409, "challenge_not_needed", "challenge not needed", "", ""},
		{"not started", seckill.ErrNotStarted, 409, "not_started", "sale has not started", "", ""},
		{"ended", seckill.ErrEnded, 409, "ended", "sale has ended", "", ""},
		{"paused", seckill.ErrPaused, 409, "paused", "sale is paused", "", ""},
		{"order pending", &seckill.Error{Kind: seckill.ErrOrderPending, Message: "not yet", RetryAfter: time.Second}, 409, "order_pending", "not yet", "1", ""},
		{"order paid", &seckill.Error{Kind: seckill.ErrOrderPaid, Message: "paid", OrderID: 7}, 409, "order_paid", "paid", "", "7"},
		{"order cancelled", &seckill.Error{Kind: seckill.ErrOrderCancelled, Message: "cancelled", OrderID: 7}, 409, "order_cancelled", "cancelled", "", "7"},
		{"order failed", seckill.ErrOrderFailed, 409, "order_failed", "order failed", "", ""},
		{"no payment deadline", seckill.ErrNoDeadline, 409, "no_payment_deadline", "no payment deadline", "", ""},
		{"bad signature, wrapped", fmt.Errorf("verify: %w", seckill.ErrBadSignature), 401, "bad_signature", "bad signature", "", ""},
		{"body too large", errBodyTooLarge, 413, "body_too_large", "request body too large", "", ""},
		{"rate limited", &seckill.Error{Kind: seckill.ErrRateLimited, Message: "slow down", RetryAfter: 1500 * time.Millisecond}, 429, "rate_limited", "slow down", "2", ""},
		{"unavailable", seckill.ErrUnavailable, 503, "unavailable", "service unavailable", "1", ""},
		{"unavailable with a wait", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "try later", RetryAfter: 5 * time.Second}, 503, "unavailable", "try later", "5", ""},
		{"unavailable with a cause", fmt.Errorf("%w: %w", seckill.Errorf(seckill.ErrUnavailable, "the database is slow"), errService), 503, "unavailable", "the database is slow", "1", ""},
		{"transient", fmt.Errorf("read: %w: %w", seckill.ErrTransient, errService), 503, "unavailable", "transient failure", "1", ""},
		{"request timeout in a store", fmt.Errorf("mysql: cancel order 7: %w", context.DeadlineExceeded), 503, "unavailable", "the request took too long; try again", "1", ""},
		{"user not found", seckill.ErrUserNotFound, 500, "internal", "internal error", "", ""},
		{"voucher not loaded", seckill.ErrVoucherNotLoaded, 500, "internal", "internal error", "", ""},
		{"cache unverified", seckill.ErrCacheUnverified, 500, "internal", "internal error", "", ""},
		{"unknown", errService, 500, "internal", "internal error", "", ""},
		{"unknown kind", &seckill.Error{Kind: errService, Message: "secret", OrderID: 5, RetryAfter: time.Second}, 500, "internal", "internal error", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t)
			e.vouchers.err = tc.err
			res := e.do("GET", "/api/vouchers/7", "", nil)
			e.wantError(res, tc.status, tc.code)
			want := map[string]any{"code": tc.code, "message": tc.message}
			if tc.orderID != "" {
				want["orderId"] = tc.orderID
			}
			if diff := cmp.Diff(want, res.body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if got := res.header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

// TestClientClosedRequest: a request whose client went away, and whose
// handler returns the cancellation, is recorded 499, not a 500 of the
// service's; a cancellation while the client still waits is a 500.
func TestClientClosedRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		gone   bool
		status int
	}{
		{"the client went away", true, 499},
		{"the client still waits", false, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t)
			e.vouchers.err = fmt.Errorf("mysql: begin: %w", context.Canceled)
			ctx, cancel := context.WithCancel(context.Background())
			if tc.gone {
				cancel()
			}
			defer cancel()
			rec := httptest.NewRecorder()
			e.handler.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/api/vouchers/7", nil))
			if rec.Code != tc.status {
				t.Errorf("status %d, want %d (body %s)", rec.Code, tc.status, rec.Body)
			}
		})
	}
}

// TestErrorTableCovered: TestErrorTable tries every entry of the table.
func TestErrorTableCovered(t *testing.T) {
	t.Parallel()
	tried := []error{seckill.ErrInvalidArgument, seckill.ErrUnauthorized, seckill.ErrForbidden, seckill.ErrVoucherNotFound,
		seckill.ErrOrderNotFound, seckill.ErrDeadLetterNotFound, errRouteNotFound, errMethodNotAllowed, seckill.ErrSoldOut,
		seckill.ErrDuplicateOrder, seckill.ErrNotStarted, seckill.ErrEnded, seckill.ErrPaused, errBodyTooLarge, seckill.ErrRateLimited,
		seckill.ErrUnavailable, seckill.ErrTransient, seckill.ErrOrderPending, seckill.ErrOrderPaid, seckill.ErrOrderCancelled,
		seckill.ErrOrderFailed, seckill.ErrNoDeadline, seckill.ErrBadSignature, context.DeadlineExceeded,
		seckill.ErrChallengeRequired, seckill.ErrChallengeInvalid, seckill.ErrChallengeNotNeeded}
	for _, e := range errorCodes {
		if !slices.Contains(tried, e.err) {
			t.Errorf("the error table's %v (%s) is not in TestErrorTable", e.err, e.code)
		}
	}
}

// The fakes' data for the JSON tests: ids past 2^53, which JSON numbers
// would round, and times in another zone than UTC.
var (
	shanghai  = time.FixedZone("CST", 8*3600)
	bigID     = int64(9007199254740993)
	remaining = int64(70)
	voucherA  = &seckill.VoucherView{Voucher: &seckill.Voucher{ID: bigID, Title: "券 A", Stock: 100, InitialStock: 100,
		BeginTime: fakeNow.In(shanghai), EndTime: fakeNow.Add(time.Hour).In(shanghai),
		Price: 1250, Value: 2000, Currency: "CNY", Subtitle: "一杯", Rules: "one a visit", ImageURL: "https://example.com/a.png"}, Remaining: &remaining}
	voucherB = &seckill.VoucherView{Voucher: &seckill.Voucher{ID: 2, Title: "not loaded", Stock: 5, InitialStock: 5,
		BeginTime: fakeNow, EndTime: fakeNow.Add(time.Hour), Currency: "JPY"}}
	orderA = &seckill.Order{ID: bigID + 2, VoucherID: bigID, UserID: 2, Status: seckill.OrderCreated, CreatedAt: fakeNow.In(shanghai), Amount: 1250, Currency: "CNY"}
	orderB = &seckill.Order{ID: 31, VoucherID: 2, UserID: 2, Status: seckill.OrderFailed, CreatedAt: fakeNow, Reason: "the database refused it", Currency: "JPY"}
	orderC = &seckill.Order{ID: 32, VoucherID: 2, UserID: 3, Status: seckill.OrderCreated, CreatedAt: fakeNow, Currency: "JPY"}
)

// newDataEnv is a fakeEnv with vouchers, orders and dead letters.
func newDataEnv(t *testing.T) *fakeEnv {
	t.Helper()
	e := newFakeEnv(t)
	e.vouchers.vouchers = []*seckill.VoucherView{voucherA, voucherB}
	e.vouchers.nextID = 10
	e.orders.orders = []*seckill.Order{orderA, orderB, orderC}
	e.deadLetters.entries = []seckill.DeadLetterEntry{
		{ID: "9007199254740995", DeadLetterRecord: seckill.DeadLetterRecord{EntryID: "1764590400000-0", VoucherID: bigID, OrderID: bigID + 2, UserID: 2,
			Reason: "the database refused it", At: fakeNow.In(shanghai), StockReturned: true}},
		{ID: "9007199254740993:1764590400000-1", DeadLetterRecord: seckill.DeadLetterRecord{EntryID: "1764590400000-1", VoucherID: bigID,
			Reason: "malformed", At: fakeNow.Add(time.Millisecond)}},
		{ID: "9007199254740993.12:1764590400000-1", DeadLetterRecord: seckill.DeadLetterRecord{EntryID: "1764590400000-1", VoucherID: bigID, Shard: 12,
			Reason: "malformed", At: fakeNow.Add(time.Millisecond)}},
	}
	return e
}

// TestJSONShapes: every route's successful answer, field by field, and the
// calls it made.
func TestJSONShapes(t *testing.T) {
	t.Parallel()
	const phone = "+8613800138000"
	for _, tc := range []struct {
		name                string
		method, path, token string // token: "admin", "buyer" or none
		body                any
		status              int
		want                string
		calls               []string
	}{
		{"list vouchers", "GET", "/api/vouchers", "", nil, 200, `{"vouchers":[
			{"id":"2","title":"not loaded","stock":5,"remaining":null,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":0,"value":0,"currency":"JPY","subtitle":"","rules":"","imageUrl":""},
			{"id":"9007199254740993","title":"券 A","stock":100,"remaining":70,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":1250,"value":2000,"currency":"CNY","subtitle":"一杯","rules":"one a visit","imageUrl":"https://example.com/a.png"}]}`,
			[]string{"List 100"}},
		{"list vouchers with a limit", "GET", "/api/vouchers?limit=1", "", nil, 200, `{"vouchers":[
			{"id":"2","title":"not loaded","stock":5,"remaining":null,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":0,"value":0,"currency":"JPY","subtitle":"","rules":"","imageUrl":""}]}`,
			[]string{"List 1"}},
		{"get voucher", "GET", "/api/vouchers/9007199254740993", "", nil, 200,
			`{"id":"9007199254740993","title":"券 A","stock":100,"remaining":70,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":1250,"value":2000,"currency":"CNY","subtitle":"一杯","rules":"one a visit","imageUrl":"https://example.com/a.png"}`,
			[]string{"Get 9007199254740993"}},
		{"get voucher not loaded", "GET", "/api/vouchers/2", "", nil, 200,
			`{"id":"2","title":"not loaded","stock":5,"remaining":null,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":0,"value":0,"currency":"JPY","subtitle":"","rules":"","imageUrl":""}`,
			[]string{"Get 2"}},
		{"create voucher", "POST", "/api/admin/vouchers", "admin",
			`{"title":"new","stock":5,"beginTime":"2026-12-01T20:00:00.1234567+08:00","endTime":"2026-12-01T22:00:00+08:00"}`, 201,
			`{"id":"11","title":"new","stock":5,"remaining":5,"beginTime":"2026-12-01T12:00:00.123456Z","endTime":"2026-12-01T14:00:00Z","shards":1,"payWithinSeconds":0,"rebuyAfterCancel":false,"challenge":false,"challengeLeadSeconds":0,"paused":false,"price":0,"value":0,"currency":"CNY","subtitle":"","rules":"","imageUrl":""}`,
			[]string{"Create new"}},
		{"buy", "POST", "/api/vouchers/9007199254740993/seckill", "buyer", nil, 200,
			`{"orderId":"9007199254741993","status":"pending"}`, []string{"Buy 2 9007199254740993"}},
		{"get order", "GET", "/api/orders/9007199254740995", "buyer", nil, 200,
			`{"orderId":"9007199254740995","voucherId":"9007199254740993","userId":"2","status":"created","createdAt":"2026-12-01T12:00:00Z","amount":1250,"currency":"CNY"}`,
			[]string{"Order 2 9007199254740995"}},
		{"get failed order", "GET", "/api/orders/31", "buyer", nil, 200,
			`{"orderId":"31","voucherId":"2","userId":"2","status":"failed","createdAt":"2026-12-01T12:00:00Z","reason":"the database refused it","amount":0,"currency":"JPY"}`,
			[]string{"Order 2 31"}},
		{"list orders", "GET", "/api/orders?limit=5", "buyer", nil, 200, `{"orders":[
			{"orderId":"9007199254740995","voucherId":"9007199254740993","userId":"2","status":"created","createdAt":"2026-12-01T12:00:00Z","amount":1250,"currency":"CNY"},
			{"orderId":"31","voucherId":"2","userId":"2","status":"failed","createdAt":"2026-12-01T12:00:00Z","reason":"the database refused it","amount":0,"currency":"JPY"}]}`,
			[]string{"Orders 2 5"}},
		{"list no orders", "GET", "/api/orders", "admin", nil, 200, `{"orders":[]}`, []string{"Orders 1 100"}},
		{"dead letters", "GET", "/api/admin/dlq", "admin", nil, 200, `{"deadLetters":[
			{"id":"9007199254740995","voucherId":"9007199254740993","orderId":"9007199254740995","userId":"2","reason":"the database refused it","at":"2026-12-01T12:00:00Z","stockReturned":true},
			{"id":"9007199254740993:1764590400000-1","voucherId":"9007199254740993","reason":"malformed","at":"2026-12-01T12:00:00.001Z","stockReturned":false},
			{"id":"9007199254740993.12:1764590400000-1","voucherId":"9007199254740993","shard":12,"reason":"malformed","at":"2026-12-01T12:00:00.001Z","stockReturned":false}]}`,
			[]string{"DeadLetters"}},
		{"retry dead letter", "POST", "/api/admin/dlq/9007199254740995/retry", "admin", nil, 200,
			`{"orderId":"9007199254740995","status":"pending"}`, []string{"RetryDeadLetter 9007199254740995 1"}},
		{"discard dead letter", "POST", "/api/admin/dlq/9007199254740993:1764590400000-1/discard", "admin", nil, 200,
			`{"discarded":true}`, []string{"DiscardDeadLetter 9007199254740993:1764590400000-1 1"}},
		{"discard a shard's dead letter", "POST", "/api/admin/dlq/9007199254740993.12:1764590400000-1/discard", "admin", nil, 200,
			`{"discarded":true}`, []string{"DiscardDeadLetter 9007199254740993.12:1764590400000-1 1"}},
		{"reconcile", "POST", "/api/admin/vouchers/9007199254740993/reconcile", "admin", nil, 200,
			`{"voucherId":"9007199254740993","initialStock":10,"dbStock":7,"dbOrders":3,"loaded":true,"remaining":7,"buyers":3,
			  "pending":0,"deadLetters":1,"drift":0,"buyerDrift":0,"ok":true,"repaired":false}`,
			[]string{"Reconcile 9007199254740993"}},
		{"reconcile and repair", "POST", "/api/admin/vouchers/9007199254740993/reconcile?repair=true", "admin", nil, 200,
			`{"voucherId":"9007199254740993","initialStock":10,"dbStock":7,"dbOrders":3,"loaded":true,"remaining":7,"buyers":3,
			  "pending":0,"deadLetters":1,"drift":0,"buyerDrift":0,"ok":true,"repaired":false}`,
			[]string{"Reconcile 9007199254740993 repair"}},
		{"stats", "GET", "/api/admin/stats", "admin", nil, 200, `{"time":"2026-12-01T12:00:00Z",
			"vouchers":[{"id":"9007199254740993","title":"券 A","stock":100,"initialStock":100,"remaining":70,"created":0,"failed":0,
				"pending":0,"drift":30,"awaitingPayment":0,"paid":0,"cancelled":0,"returned":0,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z","paused":false,
				"price":1250,"currency":"CNY","priceText":"12.50 CNY","revenue":0,"revenueText":"0.00 CNY",
				"stream":{"length":1,"pending":0,"lag":null,"oldestPendingSeconds":0.25,"consumers":1,"deadLetters":2},"redisNode":"10.0.0.7:6379","shards":1}],
			"admissions":[{"time":"2026-12-01T12:00:00Z","counts":{"admitted":3}}],
			"workers":{"consumer":"host-1","mode":"stream","busy":0,"allowed":4,"breaker":"closed"}}`,
			[]string{"Stats"}},
		{"send code", "POST", "/api/auth/code", "", map[string]string{"phone": "0086 138-0013-8000"}, 200, `{"sent":true,"delivery":"phone"}`,
			[]string{"IssueCode " + phone}},
		{"healthz", "GET", "/healthz", "", nil, 200, `{"status":"ok"}`, nil},
		{"readyz", "GET", "/readyz", "", nil, 200, `{"status":"ok","checks":{"db":"ok","redis":"ok"}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDataEnv(t)
			e.reconciler.rec = seckill.Reconciliation{Voucher: &seckill.Voucher{ID: bigID, Stock: 7, InitialStock: 10},
				Orders: 3, Loaded: true, Remaining: 7, Buyers: 3, DeadLetters: 1}
			lag := (*int64)(nil)
			e.stats.st = &seckill.Stats{Time: fakeNow.In(shanghai),
				Vouchers: []seckill.VoucherStats{{Voucher: voucherA.Voucher, Remaining: &remaining, Drift: 30, RedisNode: "10.0.0.7:6379",
					Stream: seckill.StreamStats{Length: 1, Lag: lag, OldestAge: 250 * time.Millisecond, Consumers: 1, DeadLetters: 2}}},
				Admissions: []seckill.AdmissionSecond{{Time: fakeNow, Counts: map[string]int64{"admitted": 3}}},
				Workers:    seckill.WorkerStats{Consumer: "host-1", Mode: seckill.ModeStream, Allowed: 4, Breaker: "closed"}}
			token := map[string]string{"admin": e.admin, "buyer": e.buyer}[tc.token]
			res := e.do(tc.method, tc.path, token, tc.body)
			if res.status != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, res.status, res.raw, tc.status)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, any(res.body)); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
			wantHeaders(t, res, map[string]string{"Content-Type": "application/json; charset=utf-8"})
			var got []string
			for _, c := range []*calls{&e.vouchers.calls, &e.orders.calls, &e.deadLetters.calls, &e.reconciler.calls, &e.stats.calls, &e.login.calls} {
				got = append(got, c.all()...)
			}
			if diff := cmp.Diff(tc.calls, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// wantHeaders checks the headers every answer has, and want.
func wantHeaders(t *testing.T, res response, want map[string]string) {
	t.Helper()
	want["X-Content-Type-Options"] = "nosniff"
	want["Cache-Control"] = "no-store"
	for k, v := range want {
		if got := res.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// TestJSONShapesMore: the answers TestJSONShapes does not cover: a
// voucher's Location, an empty list, login, a dependency down, and the
// routes that do not answer JSON.
func TestJSONShapesMore(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	if res := e.do("GET", "/api/vouchers", "", nil); res.status != 200 || string(res.raw) != "{\"vouchers\":[]}\n" {
		t.Errorf("GET /api/vouchers with none = %d %s, want an empty list", res.status, res.raw)
	}
	if res := e.do("GET", "/api/admin/dlq", e.admin, nil); res.status != 200 || string(res.raw) != "{\"deadLetters\":[]}\n" {
		t.Errorf("GET /api/admin/dlq with none = %d %s, want an empty list", res.status, res.raw)
	}
	res := e.do("POST", "/api/admin/vouchers", e.admin, map[string]any{"title": "t", "stock": 1, "beginTime": "2026-12-01T12:00:00Z", "endTime": "2026-12-02T12:00:00Z"})
	if res.status != 201 {
		t.Fatalf("create = %d %s", res.status, res.raw)
	}
	wantHeaders(t, res, map[string]string{"Location": "/api/vouchers/1"})

	// Login: the token is the new buyer's, no admin's.
	const phone = "+8613800138000"
	if res := e.do("POST", "/api/auth/code", "", map[string]string{"phone": phone}); res.status != 200 {
		t.Fatalf("code = %d %s", res.status, res.raw)
	}
	res = e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": e.login.code(phone)})
	if res.status != 200 || res.body["userId"] != "500" || len(res.body) != 2 {
		t.Fatalf("login = %d %s, want 200 with token and userId 500", res.status, res.raw)
	}
	if id, err := e.tokens.Verify(res.body["token"].(string)); err != nil || id != (auth.Identity{UserID: 500}) {
		t.Errorf("login token verifies as %+v, %v; want user 500, not admin", id, err)
	}

	// The admissions of a source that has none are the server's, per
	// second, for 5 minutes: the buy above is not among them.
	e.stats.st = &seckill.Stats{Time: fakeNow}
	res = e.do("GET", "/api/admin/stats", e.admin, nil)
	if adm, _ := res.body["admissions"].([]any); res.status != 200 || len(adm) != ringSeconds {
		t.Errorf("stats without admissions = %d, %d seconds; want %d", res.status, len(adm), ringSeconds)
	}

	// A dependency down: 503, naming it, not why.
	e.checks["redis"] = errService
	res = e.do("GET", "/readyz", "", nil)
	want := map[string]any{"code": "unavailable", "message": "not ready: a dependency does not answer", "checks": map[string]any{"db": "ok", "redis": "down"}}
	if diff := cmp.Diff(want, res.body); res.status != 503 || diff != "" {
		t.Errorf("/readyz with redis down = %d (-want +got):\n%s", res.status, diff)
	}
	wantHeaders(t, res, map[string]string{"Retry-After": "1"})

	res = e.do("GET", "/metrics", "", nil)
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain") || !strings.Contains(string(res.raw), "seckill_http_requests_total") {
		t.Errorf("/metrics = %d %q", res.status, res.header.Get("Content-Type"))
	}
	res = e.do("GET", "/admin/", "", nil)
	if res.status != 200 || res.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("/admin/ = %d %q", res.status, res.header.Get("Content-Type"))
	}
	res = e.do("GET", "/admin", "", nil)
	if res.status != 301 || res.header.Get("Location") != "/admin/" {
		t.Errorf("/admin = %d, Location %q; want a 301 to /admin/", res.status, res.header.Get("Location"))
	}
	e.wantError(e.do("GET", "/admin/nothing.js", "", nil), 404, "not_found")
}

// TestBadInput (G7): malformed bodies, ids and parameters, and bodies over
// the limit, are 400 (or 413) with a message that says what is wrong, and
// reach no service.
func TestBadInput(t *testing.T) {
	t.Parallel()
	bodies := map[string]struct{ body, want string }{
		"malformed":       {`{"phone":`, "JSON"},
		"not json":        {`phone=1`, "JSON"},
		"empty":           {``, "empty"},
		"array":           {`[1,2]`, "object"},
		"two objects":     {`{} {}`, "single"},
		"trailing":        {`{}x`, "JSON"},
		"unknown field":   {`{"discount":5}`, "discount"},
		"number for text": {`{"phone":8613800138000}`, "phone"},
	}
	ids := []string{"abc", "0", "-1", "01", "+1", "1.5", "1e3", "99999999999999999999", "%20", "%201"}
	deadLetterIDs := []string{"abc", "0", "-1", "01", "1:x", "7:1", "x:1-1", ":1-1", strings.Repeat("9", 100), "%207"}
	type request struct{ method, path, token string }
	var cases []struct {
		name string
		request
		body         any
		status       int
		code, inText string
	}
	add := func(name string, r request, body any, status int, code, inText string) {
		cases = append(cases, struct {
			name string
			request
			body         any
			status       int
			code, inText string
		}{name, r, body, status, code, inText})
	}
	big := `{"title":"` + strings.Repeat("a", 64<<10) + `"}`
	for _, r := range []request{{"POST", "/api/admin/vouchers", "admin"}, {"POST", "/api/auth/code", ""}, {"POST", "/api/auth/login", ""}} {
		for name, b := range bodies {
			add(r.path+" "+name, r, b.body, 400, "invalid_argument", b.want)
		}
		add(r.path+" too large", r, big, 413, "body_too_large", "65536 bytes")
	}
	for _, id := range ids {
		add("voucher "+id, request{"GET", "/api/vouchers/" + id, ""}, nil, 400, "invalid_argument", "voucher id")
		add("buy "+id, request{"POST", "/api/vouchers/" + id + "/seckill", "buyer"}, nil, 400, "invalid_argument", "voucher id")
		add("order "+id, request{"GET", "/api/orders/" + id, "buyer"}, nil, 400, "invalid_argument", "order id")
		add("reconcile "+id, request{"POST", "/api/admin/vouchers/" + id + "/reconcile", "admin"}, nil, 400, "invalid_argument", "voucher id")
	}
	for _, id := range deadLetterIDs {
		add("retry "+id, request{"POST", "/api/admin/dlq/" + id + "/retry", "admin"}, nil, 400, "invalid_argument", "dead letter")
		add("discard "+id, request{"POST", "/api/admin/dlq/" + id + "/discard", "admin"}, nil, 400, "invalid_argument", "dead letter")
	}
	for _, limit := range []string{"0", "-1", "x", "1001", "1e3", "1.0", ""} {
		q := "?limit=" + limit
		if limit == "" {
			q = "?limit=%20"
		}
		add("vouchers limit "+limit, request{"GET", "/api/vouchers" + q, ""}, nil, 400, "invalid_argument", "limit")
		add("orders limit "+limit, request{"GET", "/api/orders" + q, "buyer"}, nil, 400, "invalid_argument", "limit")
	}
	for _, repair := range []string{"maybe", "yes", "2"} {
		add("repair "+repair, request{"POST", "/api/admin/vouchers/7/reconcile?repair=" + repair, "admin"}, nil, 400, "invalid_argument", "repair")
	}
	add("no route", request{"GET", "/api/nothing", ""}, nil, 404, "not_found", "route")
	add("no route under an id", request{"GET", "/api/vouchers/7/nothing", ""}, nil, 404, "not_found", "route")
	add("wrong method", request{"DELETE", "/api/vouchers/7", ""}, nil, 405, "method_not_allowed", "method")
	add("wrong method, admin", request{"GET", "/api/admin/vouchers", "admin"}, nil, 405, "method_not_allowed", "method")

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t)
			token := map[string]string{"admin": e.admin, "buyer": e.buyer}[tc.token]
			res := e.do(tc.method, tc.path, token, tc.body)
			e.wantError(res, tc.status, tc.code)
			if msg := res.body["message"].(string); !strings.Contains(msg, tc.inText) {
				t.Errorf("message %q does not mention %q", msg, tc.inText)
			}
			if tc.status == 405 && res.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			e.untouched()
		})
	}
}

// TestBodyLimitConfigured: the body limit is the configured one.
func TestBodyLimitConfigured(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, fakeOptions{cfg: Config{MaxBodyBytes: 100}})
	res := e.do("POST", "/api/auth/code", "", `{"phone":"`+strings.Repeat("1", 100)+`"}`)
	e.wantError(res, 413, "body_too_large")
	if msg := res.body["message"]; msg != "request body is larger than 100 bytes" {
		t.Errorf("message %q", msg)
	}
	e.untouched()
}

// TestAccess (G8): every route but the public ones wants a valid token,
// the admin routes an admin's; refused requests reach no service, and a
// buyer reads only their own orders.
func TestAccess(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	other, err := auth.NewTokens([]byte("a different secret, also long enough"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	past, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	past.Now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	expired, err := past.Mint(auth.Identity{UserID: 1, Admin: true}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"no token":     "",
		"not bearer":   "Basic YWRtaW46YWRtaW4=",
		"no scheme":    e.admin,
		"empty bearer": "Bearer ",
		"garbage":      "Bearer abc.def.ghi",
		"forged":       "Bearer " + forged,
		"expired":      "Bearer " + expired,
		"two tokens":   "Bearer " + e.admin + " " + e.admin,
	}
	public := []string{"GET /admin", "GET /admin/", "GET /api/openapi.json", "GET /api/time", "GET /api/vouchers", "GET /api/vouchers/{id}",
		"GET /healthz", "GET /metrics", "GET /readyz", "GET /sale/", "GET /{$}", "POST /api/auth/code", "POST /api/auth/login",
		// Signed by the payment provider instead (TestPaymentWebhookRoute).
		"POST /api/payments/webhook"}
	var open []string
	for _, rt := range e.routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		path = strings.ReplaceAll(path, "{id}", "7")
		admin := strings.HasPrefix(path, "/api/admin/")
		if slices.Contains(public, rt.pattern) {
			open = append(open, rt.pattern)
			continue
		}
		for name, header := range bad {
			res := e.doHeader(method, path, header, nil)
			if res.status != 401 || res.body["code"] != "unauthorized" || res.header.Get("WWW-Authenticate") != `Bearer realm="seckill"` {
				t.Errorf("%s with %s = %d %s, WWW-Authenticate %q; want 401 unauthorized with a Bearer challenge",
					rt.pattern, name, res.status, res.raw, res.header.Get("WWW-Authenticate"))
			}
		}
		if admin {
			res := e.do(method, path, e.buyer, nil)
			if res.status != 403 || res.body["code"] != "forbidden" {
				t.Errorf("%s as a buyer = %d %s, want 403 forbidden", rt.pattern, res.status, res.raw)
			}
		}
	}
	slices.Sort(open)
	if diff := cmp.Diff(public, open); diff != "" {
		t.Errorf("public routes (-want +got):\n%s", diff)
	}
	e.untouched()

	// The scheme's case does not matter.
	if res := e.doHeader("GET", "/api/orders", "bearer "+e.buyer, nil); res.status != 200 {
		t.Errorf("GET /api/orders with scheme bearer = %d %s", res.status, res.raw)
	}
	// An admin is a buyer too.
	if res := e.do("POST", "/api/vouchers/7/seckill", e.admin, nil); res.status != 200 {
		t.Errorf("buy as an admin = %d %s", res.status, res.raw)
	}
	// Whose order is read is the token's, whatever else the request says.
	e.orders.orders = []*seckill.Order{orderA, orderC}
	e.wantError(e.do("GET", "/api/orders/32?userId=3", e.buyer, nil), 404, "order_not_found")
	if res := e.do("GET", "/api/orders/32", e.mint(auth.Identity{UserID: 3}), nil); res.status != 200 || res.body["userId"] != "3" {
		t.Errorf("the owner reads order 32 = %d %s", res.status, res.raw)
	}
	res := e.do("GET", "/api/orders?userId=3", e.buyer, nil)
	if orders, _ := res.body["orders"].([]any); res.status != 200 || len(orders) != 1 || orders[0].(map[string]any)["userId"] != "2" {
		t.Errorf("the buyer's list = %d %s, want their one order", res.status, res.raw)
	}
	want := []string{"Orders 2 100", "Buy 1 7", "Order 2 32", "Order 3 32", "Orders 2 100"}
	if diff := cmp.Diff(want, e.orders.all()); diff != "" {
		t.Errorf("order calls (-want +got):\n%s", diff)
	}
}

// TestServicesOff: a server built without a service answers its routes
// 503 with Retry-After, not a 500.
func TestServicesOff(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, fakeOptions{edit: func(s *Services) {
		s.DeadLetters, s.Stats, s.Login, s.Reconciler = nil, nil, nil, nil
	}})
	for _, r := range []struct {
		method, path, token string
		body                any
		retryAfter          string
	}{
		{"GET", "/api/admin/dlq", e.admin, nil, "1"},
		{"POST", "/api/admin/dlq/7/retry", e.admin, nil, "1"},
		{"POST", "/api/admin/dlq/7/discard", e.admin, nil, "1"},
		{"POST", "/api/admin/vouchers/7/reconcile", e.admin, nil, "1"},
		{"GET", "/api/admin/stats", e.admin, nil, "1"},
		{"POST", "/api/auth/code", "", map[string]string{"phone": "+8613800138000"}, "300"},
		{"POST", "/api/auth/login", "", map[string]string{"phone": "+8613800138000", "code": "12345678"}, "300"},
	} {
		res := e.do(r.method, r.path, r.token, r.body)
		wantError(t, res, 503, "unavailable")
		if got := res.header.Get("Retry-After"); got != r.retryAfter {
			t.Errorf("%s %s: Retry-After %q, want %q", r.method, r.path, got, r.retryAfter)
		}
	}
}

// TestServiceErrors: a service's failure is answered through the error
// table on every route that calls one, and its cause is not shown.
func TestServiceErrors(t *testing.T) {
	t.Parallel()
	for _, r := range []struct{ method, path, token string }{
		{"GET", "/api/vouchers", ""},
		{"GET", "/api/vouchers/7", ""},
		{"POST", "/api/admin/vouchers", "admin"},
		{"POST", "/api/vouchers/7/seckill", "buyer"},
		{"GET", "/api/orders/7", "buyer"},
		{"GET", "/api/orders", "buyer"},
		{"GET", "/api/admin/dlq", "admin"},
		{"POST", "/api/admin/dlq/7/retry", "admin"},
		{"POST", "/api/admin/dlq/7/discard", "admin"},
		{"POST", "/api/admin/vouchers/7/reconcile", "admin"},
		{"GET", "/api/admin/stats", "admin"},
		{"POST", "/api/auth/code", ""},
		{"POST", "/api/auth/login", ""},
	} {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				err    error
				status int
				code   string
			}{
				{errService, 500, "internal"},
				{fmt.Errorf("%w: %w", seckill.Errorf(seckill.ErrUnavailable, "try again"), errService), 503, "unavailable"},
			} {
				e := newFakeEnv(t)
				e.vouchers.err, e.orders.err, e.deadLetters.err, e.reconciler.err, e.stats.err, e.login.err = tc.err, tc.err, tc.err, tc.err, tc.err, tc.err
				var body any
				switch r.path {
				case "/api/admin/vouchers":
					body = map[string]any{"title": "t", "stock": 1, "beginTime": "2026-12-01T12:00:00Z", "endTime": "2026-12-02T12:00:00Z"}
				case "/api/auth/code":
					body = map[string]string{"phone": "+8613800138000"}
				case "/api/auth/login":
					body = map[string]string{"phone": "+8613800138000", "code": "12345678"}
				}
				token := map[string]string{"admin": e.admin, "buyer": e.buyer}[r.token]
				res := e.do(r.method, r.path, token, body)
				status, code := tc.status, tc.code
				if r.path == "/api/admin/stats" {
					status, code = 503, "unavailable" // any failure to read the stats is one to wait out
				}
				wantError(t, res, status, code)
				if strings.Contains(string(res.raw), "10.0.0.7") {
					t.Errorf("the answer shows the cause: %s", res.raw)
				}
			}
		})
	}
}
