package http

import (
	"strconv"
	"testing"

	"github.com/seckill/seckill/auth"
)

func TestLogin(t *testing.T) {
	e := newEnv(t)
	const phone = "13800138000"
	res := e.do("POST", "/api/auth/code", "", map[string]string{"phone": phone})
	if res.status != 200 {
		t.Fatalf("POST /api/auth/code = %d %s", res.status, res.raw)
	}
	code := e.codes.last(phone)
	if len(code) != 6 {
		t.Fatalf("sent code %q", code)
	}
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	e.wantError(e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": wrong}), 401, "unauthorized")

	res = e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": code})
	if res.status != 200 {
		t.Fatalf("login = %d %s", res.status, res.raw)
	}
	token, _ := res.body["token"].(string)
	userID, _ := res.body["userId"].(string)
	id, err := e.tokens.Verify(token)
	if err != nil || strconv.FormatInt(id.UserID, 10) != userID || id.Admin {
		t.Fatalf("login token verifies as %+v, %v; want user %s, not admin", id, err, userID)
	}
	// A used code does not log in twice.
	e.wantError(e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": code}), 401, "unauthorized")
	// The buyer's token is no admin's.
	e.wantError(e.do("POST", "/api/admin/vouchers", token, e.validVoucher()), 403, "forbidden")

	// Another phone is another user.
	other := e.loginAs(t, "+8613900139000")
	if other.UserID == id.UserID {
		t.Errorf("two phones got one user id %d", id.UserID)
	}
}

// loginAs logs phone in through the API and returns the token's identity.
func (e *env) loginAs(t *testing.T, phone string) auth.Identity {
	t.Helper()
	if res := e.do("POST", "/api/auth/code", "", map[string]string{"phone": phone}); res.status != 200 {
		t.Fatalf("code for %s = %d %s", phone, res.status, res.raw)
	}
	res := e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": e.codes.last(phone)})
	if res.status != 200 {
		t.Fatalf("login %s = %d %s", phone, res.status, res.raw)
	}
	id, err := e.tokens.Verify(res.body["token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSendCodeRateLimited(t *testing.T) {
	e := newEnv(t)
	body := map[string]string{"phone": "13700137000"}
	if res := e.do("POST", "/api/auth/code", "", body); res.status != 200 {
		t.Fatalf("first code = %d %s", res.status, res.raw)
	}
	first := e.codes.last("13700137000")
	res := e.do("POST", "/api/auth/code", "", body)
	e.wantError(res, 429, "rate_limited")
	if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q, want 1..60 seconds", res.header.Get("Retry-After"))
	}
	if e.codes.last("13700137000") != first {
		t.Error("a rate-limited request sent a new code")
	}
}

func TestAuthBadInput(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		path string
		body any
	}{
		"code: bad phone":      {"/api/auth/code", map[string]string{"phone": "12-34"}},
		"code: no phone":       {"/api/auth/code", `{}`},
		"code: phone a number": {"/api/auth/code", `{"phone":13800138000}`},
		"code: unknown field":  {"/api/auth/code", `{"phone":"13800138000","x":1}`},
		"code: malformed":      {"/api/auth/code", `{"phone":`},
		"login: bad phone":     {"/api/auth/login", map[string]string{"phone": "abc", "code": "123456"}},
		"login: short code":    {"/api/auth/login", map[string]string{"phone": "13800138000", "code": "12345"}},
		"login: code letters":  {"/api/auth/login", map[string]string{"phone": "13800138000", "code": "12345a"}},
		"login: empty body":    {"/api/auth/login", ``},
	} {
		t.Run(name, func(t *testing.T) {
			e.wantError(e.do("POST", tc.path, "", tc.body), 400, "invalid_argument")
		})
	}
	// Five wrong codes void the code: the right one then fails too.
	const phone = "13600136000"
	if res := e.do("POST", "/api/auth/code", "", map[string]string{"phone": phone}); res.status != 200 {
		t.Fatal(res.status)
	}
	code := e.codes.last(phone)
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	for range 5 {
		e.wantError(e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": wrong}), 401, "unauthorized")
	}
	e.wantError(e.do("POST", "/api/auth/login", "", map[string]string{"phone": phone, "code": code}), 401, "unauthorized")
}
