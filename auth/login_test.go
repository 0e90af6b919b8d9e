package auth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

func TestCheckPhone(t *testing.T) {
	for phone, ok := range map[string]bool{
		"13800138000":      true,
		"+8613800138000":   true,
		"123456":           true,
		"123456789012345":  true,
		"12345":            false,
		"1234567890123456": false,
		"":                 false,
		"+":                false,
		"++8613800138000":  false,
		"138 0013 8000":    false,
		"138-0013-8000":    false,
		"１３８００１３８０００":      false,
		"admin":            false,
		"13800138000\n":    false,
	} {
		err := CheckPhone(phone)
		if ok && err != nil {
			t.Errorf("CheckPhone(%q) = %v, want nil", phone, err)
		}
		if !ok && !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Errorf("CheckPhone(%q) = %v, want ErrInvalidArgument", phone, err)
		}
	}
}

func TestNewCode(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		c, err := newCode()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkCode(c); err != nil {
			t.Fatalf("newCode made %q: %v", c, err)
		}
		seen[c] = true
	}
	// 200 draws from a million collide a little at most; a constant would not.
	if len(seen) < 190 {
		t.Errorf("200 codes hold only %d distinct values", len(seen))
	}
}

// memCodes and memUsers are in-memory stand-ins: the flow is logic; the
// Redis and SQL implementations have their own tests against real servers.
type memCodes struct{ codes map[string]string }

func (m *memCodes) IssueCode(_ context.Context, phone, code string) error {
	m.codes[phone] = code
	return nil
}

func (m *memCodes) RedeemCode(_ context.Context, phone, code string) error {
	if m.codes[phone] != code {
		return seckill.ErrUnauthorized
	}
	delete(m.codes, phone)
	return nil
}

type memUsers struct {
	mu    sync.Mutex
	users map[string]*seckill.User
}

func (m *memUsers) EnsureUser(_ context.Context, phone string) (*seckill.User, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[phone]; ok {
		return u, false, nil
	}
	u := &seckill.User{ID: int64(len(m.users) + 1), Phone: phone}
	m.users[phone] = u
	return u, true, nil
}

func (m *memUsers) User(context.Context, int64) (*seckill.User, error) {
	return nil, seckill.ErrUserNotFound
}

type lastCode struct{ phone, code string }

func (l *lastCode) SendCode(_ context.Context, phone, code string) error {
	l.phone, l.code = phone, code
	return nil
}

func TestLogin(t *testing.T) {
	sent := &lastCode{}
	tk := newTestTokens(t, time.Now())
	l := &Login{
		Codes:    &memCodes{codes: map[string]string{}},
		Sender:   sent,
		Users:    &memUsers{users: map[string]*seckill.User{}},
		Tokens:   tk,
		TokenTTL: time.Hour,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx := context.Background()
	if err := l.SendCode(ctx, "bad"); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("SendCode(bad phone) = %v, want ErrInvalidArgument", err)
	}
	if err := l.SendCode(ctx, "13800138000"); err != nil {
		t.Fatal(err)
	}
	if sent.phone != "13800138000" || len(sent.code) != CodeLen {
		t.Fatalf("sender got %+v", sent)
	}
	wrong := "000000"
	if sent.code == wrong {
		wrong = "111111"
	}
	if _, _, err := l.LogIn(ctx, "13800138000", wrong); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Fatalf("LogIn with a wrong code = %v, want ErrUnauthorized", err)
	}
	if _, _, err := l.LogIn(ctx, "13800138000", "12a456"); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("LogIn with a malformed code = %v, want ErrInvalidArgument", err)
	}
	token, u, err := l.LogIn(ctx, "13800138000", sent.code)
	if err != nil {
		t.Fatal(err)
	}
	id, err := tk.Verify(token)
	if err != nil || id != (Identity{UserID: u.ID}) {
		t.Fatalf("the login token verifies as %+v, %v; want user %d, not admin", id, err, u.ID)
	}
	// Second login of the same phone: same user.
	if err := l.SendCode(ctx, "13800138000"); err != nil {
		t.Fatal(err)
	}
	_, again, err := l.LogIn(ctx, "13800138000", sent.code)
	if err != nil || again.ID != u.ID {
		t.Fatalf("second login = user %v, %v; want user %d", again, err, u.ID)
	}
}
