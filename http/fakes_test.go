package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// The fakes stand in for the services behind the handlers, so that the
// error table, the JSON shapes, bad input and access are tested in
// milliseconds without Redis or a database. Each holds fixed data, records
// the calls that reach it, and answers err, when set, to every call.

// fakeNow is the fakes' clock.
var fakeNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// calls records the calls that reached a fake, as "Method arg…".
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, call)
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// fakeVouchers is a VoucherService of fixed vouchers, newest last.
type fakeVouchers struct {
	calls
	err      error
	vouchers []*seckill.VoucherView
	nextID   int64
	keys     map[string]bool // AddStock's keys
}

var _ VoucherService = (*fakeVouchers)(nil)

func (f *fakeVouchers) Create(_ context.Context, v *seckill.Voucher) (*seckill.VoucherView, error) {
	f.add("Create " + v.Title)
	if f.err != nil {
		return nil, f.err
	}
	// As the real service: the rules are checked here, on its clock.
	if err := v.Validate(fakeNow); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	v.ID, v.InitialStock = f.nextID, v.Stock
	if v.Currency == "" {
		v.Currency = seckill.DefaultCurrency
	}
	view := &seckill.VoucherView{Voucher: v, Remaining: &v.Stock}
	f.vouchers = append(f.vouchers, view)
	return view, nil
}

func (f *fakeVouchers) Get(_ context.Context, id int64) (*seckill.VoucherView, error) {
	f.add("Get " + itoa(id))
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.vouchers {
		if v.ID == id {
			return v, nil
		}
	}
	return nil, seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", id)
}

func (f *fakeVouchers) List(_ context.Context, limit int) ([]*seckill.VoucherView, error) {
	f.add("List " + itoa(int64(limit)))
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.vouchers)
	slices.Reverse(out)
	return out[:min(limit, len(out))], nil
}

// Pause sets the voucher's Paused, as the real service does.
func (f *fakeVouchers) Pause(ctx context.Context, id int64, paused bool) (*seckill.VoucherView, error) {
	f.add("Pause " + itoa(id) + " " + strconv.FormatBool(paused))
	return f.change(id, func(v *seckill.Voucher) { v.Paused = paused })
}

// End moves the voucher's end to fakeNow.
func (f *fakeVouchers) End(ctx context.Context, id int64) (*seckill.VoucherView, error) {
	f.add("End " + itoa(id))
	return f.change(id, func(v *seckill.Voucher) { v.EndTime = fakeNow })
}

// AddStock adds the units once per key.
func (f *fakeVouchers) AddStock(ctx context.Context, id int64, key string, units int64) (*seckill.VoucherView, error) {
	f.add("AddStock " + itoa(id) + " " + key + " " + itoa(units))
	f.mu.Lock()
	seen := f.keys[key]
	if f.keys == nil {
		f.keys = map[string]bool{}
	}
	f.keys[key] = true
	f.mu.Unlock()
	return f.change(id, func(v *seckill.Voucher) {
		if !seen {
			v.Stock += units
			v.InitialStock += units
		}
	})
}

// change applies fn to a copy of the voucher with the id and keeps it.
func (f *fakeVouchers) change(id int64, fn func(v *seckill.Voucher)) (*seckill.VoucherView, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, view := range f.vouchers {
		if view.ID == id {
			v := *view.Voucher
			fn(&v)
			f.vouchers[i] = &seckill.VoucherView{Voucher: &v, Remaining: &v.Stock}
			return f.vouchers[i], nil
		}
	}
	return nil, seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", id)
}

// fakeOrders is an OrderService of fixed orders: a buyer sees only their
// own, as with the real one.
type fakeOrders struct {
	calls
	err    error
	orders []*seckill.Order
	// bought is the answer of Buy: an order pending with id 1000 + the
	// voucher's id when nil.
	bought *seckill.Order
}

var _ OrderService = (*fakeOrders)(nil)

func (f *fakeOrders) Buy(_ context.Context, userID, voucherID int64) (*seckill.Order, error) {
	f.add("Buy " + itoa(userID) + " " + itoa(voucherID))
	if f.err != nil {
		return nil, f.err
	}
	if f.bought != nil {
		return f.bought, nil
	}
	return &seckill.Order{ID: 1000 + voucherID, UserID: userID, VoucherID: voucherID, Status: seckill.OrderPending, CreatedAt: fakeNow}, nil
}

func (f *fakeOrders) Order(_ context.Context, userID, id int64) (*seckill.Order, error) {
	f.add("Order " + itoa(userID) + " " + itoa(id))
	if f.err != nil {
		return nil, f.err
	}
	for _, o := range f.orders {
		if o.ID == id && o.UserID == userID {
			return o, nil
		}
	}
	return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found", id)
}

func (f *fakeOrders) Orders(_ context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	f.add("Orders " + itoa(userID) + " " + itoa(int64(limit)))
	if f.err != nil {
		return nil, f.err
	}
	var out []*seckill.Order
	for _, o := range f.orders {
		if o.UserID == userID && len(out) < limit {
			out = append(out, o)
		}
	}
	return out, nil
}

// fakeDeadLetters is a DeadLetterAdmin of fixed dead letters.
type fakeDeadLetters struct {
	calls
	err     error
	entries []seckill.DeadLetterEntry
}

var _ DeadLetterAdmin = (*fakeDeadLetters)(nil)

func (f *fakeDeadLetters) DeadLetters(context.Context) ([]seckill.DeadLetterEntry, error) {
	f.add("DeadLetters")
	return f.entries, f.err
}

func (f *fakeDeadLetters) find(id string) (*seckill.DeadLetterEntry, error) {
	if f.err != nil {
		return nil, f.err
	}
	for i := range f.entries {
		if f.entries[i].ID == id {
			return &f.entries[i], nil
		}
	}
	return nil, seckill.Errorf(seckill.ErrDeadLetterNotFound, "no dead letter %s", id)
}

func (f *fakeDeadLetters) RetryDeadLetter(_ context.Context, id string, adminID int64) (*seckill.Order, error) {
	f.add("RetryDeadLetter " + id + " " + itoa(adminID))
	e, err := f.find(id)
	if err != nil {
		return nil, err
	}
	return &seckill.Order{ID: e.OrderID, UserID: e.UserID, VoucherID: e.VoucherID, Status: seckill.OrderPending, CreatedAt: fakeNow}, nil
}

func (f *fakeDeadLetters) DiscardDeadLetter(_ context.Context, id string, adminID int64) error {
	f.add("DiscardDeadLetter " + id + " " + itoa(adminID))
	_, err := f.find(id)
	return err
}

// fakeReconciler answers rec, or err.
type fakeReconciler struct {
	calls
	err error
	rec seckill.Reconciliation
}

var _ Reconciler = (*fakeReconciler)(nil)

func (f *fakeReconciler) Reconcile(_ context.Context, voucherID int64, repair bool) (*seckill.Reconciliation, error) {
	call := "Reconcile " + itoa(voucherID)
	if repair {
		call += " repair"
	}
	f.add(call)
	if f.err != nil {
		return nil, f.err
	}
	rec := f.rec
	return &rec, nil
}

// fakeStats answers st, or err.
type fakeStats struct {
	calls
	err error
	st  *seckill.Stats
}

var _ StatsSource = (*fakeStats)(nil)

func (f *fakeStats) Stats(context.Context) (*seckill.Stats, error) {
	f.add("Stats")
	return f.st, f.err
}

// fakeLogin is the login's code store, sender and user store: it keeps
// one code per phone and makes user 500 + the phone's users so far.
type fakeLogin struct {
	calls
	err   error // of IssueCode and RedeemCode
	codes map[string]string
	users map[string]int64
}

func (f *fakeLogin) IssueCode(_ context.Context, phone, code string) (bool, error) {
	f.add("IssueCode " + phone)
	if f.err != nil {
		return false, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[phone] = code
	return true, nil
}

func (f *fakeLogin) RedeemCode(_ context.Context, phone, code string) error {
	f.add("RedeemCode " + phone)
	if f.err != nil {
		return f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want, ok := f.codes[phone]; !ok || want != code {
		return seckill.Errorf(seckill.ErrUnauthorized, "wrong or expired code")
	}
	delete(f.codes, phone)
	return nil
}

func (f *fakeLogin) WithdrawCode(context.Context, string, string) error { return nil }

func (f *fakeLogin) SpendGuess(context.Context, string, seckill.GuessLimits) error { return nil }

func (f *fakeLogin) RefundGuess(context.Context, string) error { return nil }

func (f *fakeLogin) SendCode(context.Context, string, string) error { return nil }

func (f *fakeLogin) code(phone string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.codes[phone]
}

func (f *fakeLogin) EnsureUser(_ context.Context, phone string, _ ...string) (*seckill.User, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.users[phone]
	if !ok {
		id = 500 + int64(len(f.users))
		f.users[phone] = id
	}
	return &seckill.User{ID: id, Phone: phone, CreatedAt: fakeNow}, !ok, nil
}

func (f *fakeLogin) User(context.Context, int64) (*seckill.User, error) {
	return nil, seckill.ErrUserNotFound
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// fakeEnv is a server on fakes, called in process. Every answer it gets is
// checked against the OpenAPI document.
type fakeEnv struct {
	t           *testing.T
	handler     http.Handler
	routes      []route
	tokens      *auth.Tokens
	admin       string // user 1's token, an admin's
	buyer       string // user 2's token
	vouchers    *fakeVouchers
	orders      *fakeOrders
	deadLetters *fakeDeadLetters
	reconciler  *fakeReconciler
	stats       *fakeStats
	login       *fakeLogin
	// checks are /readyz's, by name: nil is up.
	checks map[string]error
}

// fakeOptions change a fakeEnv's server before it is made.
type fakeOptions struct {
	cfg Config
	// edit, if set, changes the services the server gets.
	edit func(*Services)
}

func newFakeEnv(t *testing.T, opts ...fakeOptions) *fakeEnv {
	t.Helper()
	var opt fakeOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	tokens, err := auth.NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnv{
		t:           t,
		tokens:      tokens,
		vouchers:    &fakeVouchers{},
		orders:      &fakeOrders{},
		deadLetters: &fakeDeadLetters{},
		reconciler:  &fakeReconciler{},
		stats:       &fakeStats{st: &seckill.Stats{Time: fakeNow}},
		login:       &fakeLogin{codes: map[string]string{}, users: map[string]int64{}},
		checks:      map[string]error{"redis": nil, "db": nil},
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	check := func(name string) Check {
		return func(context.Context) error { return e.checks[name] }
	}
	svc := Services{
		Vouchers:    e.vouchers,
		Orders:      e.orders,
		Login:       &auth.Login{Codes: e.login, Sender: e.login, Users: e.login, Tokens: tokens, TokenTTL: time.Hour, Logger: logger},
		Tokens:      tokens,
		Checks:      map[string]Check{"redis": check("redis"), "db": check("db")},
		DeadLetters: e.deadLetters,
		Stats:       e.stats,
		Reconciler:  e.reconciler,
	}
	if opt.edit != nil {
		opt.edit(&svc)
	}
	srv, err := New(opt.cfg, svc, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	e.handler, e.routes = srv.Handler(), srv.routes
	e.admin = e.mint(auth.Identity{UserID: 1, Admin: true})
	e.buyer = e.mint(auth.Identity{UserID: 2})
	return e
}

func (e *fakeEnv) mint(id auth.Identity) string {
	e.t.Helper()
	token, err := e.tokens.Mint(id, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return token
}

// do sends a request with body (a string sent as is, or a value encoded as
// JSON) and token (none if empty), and checks the answer against the
// OpenAPI document.
func (e *fakeEnv) do(method, path, token string, body any) response {
	e.t.Helper()
	header := ""
	if token != "" {
		header = "Bearer " + token
	}
	return e.doHeader(method, path, header, body)
}

// doHeader is do with an Authorization header as given.
func (e *fakeEnv) doHeader(method, path, authorization string, body any) response {
	e.t.Helper()
	return e.send(method, path, map[string]string{"Authorization": authorization}, body)
}

// doSigned posts body to path with a payment provider's signature header.
func (e *fakeEnv) doSigned(path, signature, body string) response {
	e.t.Helper()
	return e.send(http.MethodPost, path, map[string]string{"Payment-Signature": signature}, body)
}

// send is do with the headers given (an empty one is not sent).
func (e *fakeEnv) send(method, path string, headers map[string]string, body any) response {
	e.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		raw = j
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(raw))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, req)
	res := response{status: w.Code, header: w.Result().Header, raw: w.Body.Bytes()}
	if ct := res.header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") && method != http.MethodHead {
		var v any
		if err := json.Unmarshal(res.raw, &v); err != nil {
			e.t.Fatalf("%s %s: answer is not JSON: %v\n%s", method, path, err, res.raw)
		}
		res.body, _ = v.(map[string]any)
	}
	// The request as sent, for the validator (the handler consumed it).
	sent := httptest.NewRequest(method, path, bytes.NewReader(raw))
	sent.Header = req.Header.Clone()
	checkOpenAPI(e.t, sent, raw, res)
	return res
}

// wantError checks that res is the error answer status with code.
func (e *fakeEnv) wantError(res response, status int, code string) {
	e.t.Helper()
	wantError(e.t, res, status, code)
}

func wantError(t *testing.T, res response, status int, code string) {
	t.Helper()
	if res.status != status || res.body["code"] != code {
		t.Fatalf("got %d %s, want %d with code %q", res.status, res.raw, status, code)
	}
	if msg, _ := res.body["message"].(string); msg == "" {
		t.Errorf("error answer %s has no message", res.raw)
	}
	if !strings.HasPrefix(res.header.Get("Content-Type"), "application/json") {
		t.Errorf("error answer has Content-Type %q", res.header.Get("Content-Type"))
	}
}

// untouched checks that no request reached a service.
func (e *fakeEnv) untouched() {
	e.t.Helper()
	for name, c := range map[string]*calls{
		"vouchers": &e.vouchers.calls, "orders": &e.orders.calls, "dead letters": &e.deadLetters.calls,
		"reconciler": &e.reconciler.calls, "stats": &e.stats.calls, "login": &e.login.calls,
	} {
		if got := c.all(); len(got) > 0 {
			e.t.Errorf("refused requests reached the %s: %q", name, got)
		}
	}
}

// errService is an error a service answers with: its details are not for
// clients.
var errService = errors.New("dial tcp 10.0.0.7:3306: connect: connection refused")
