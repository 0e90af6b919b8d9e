package auth

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newTestTokens(t *testing.T, now time.Time) *Tokens {
	t.Helper()
	tk, err := NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	tk.Now = func() time.Time { return now }
	return tk
}

// mustMint mints a token for id, lasting ttl, or fails the test.
func mustMint(t testing.TB, tk *Tokens, id Identity, ttl time.Duration) string {
	t.Helper()
	s, err := tk.Mint(id, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewTokensRefusesShortSecret(t *testing.T) {
	t.Parallel()
	if _, err := NewTokens([]byte("0123456789abcdef0123456789abcde")); err == nil {
		t.Fatal("NewTokens accepted a 31-byte secret")
	}
}

func TestMintVerify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	for _, id := range []Identity{{UserID: 1}, {UserID: 42, Admin: true}, {UserID: 1<<62 + 7}} {
		s, err := tk.Mint(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Verify(s)
		if err != nil {
			t.Fatalf("Verify(Mint(%+v)): %v", id, err)
		}
		if got != id {
			t.Errorf("Verify(Mint(%+v)) = %+v", id, got)
		}
	}
	if _, err := tk.Mint(Identity{UserID: 0}, time.Hour); err == nil {
		t.Error("Mint accepted user id 0")
	}
	if _, err := tk.Mint(Identity{UserID: 1}, 0); err == nil {
		t.Error("Mint accepted a zero lifetime")
	}
}

func TestVerifyExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	s := mustMint(t, tk, Identity{UserID: 5}, time.Minute)
	tk.Now = func() time.Time { return now.Add(59 * time.Second) }
	if _, err := tk.Verify(s); err != nil {
		t.Fatalf("Verify before expiry: %v", err)
	}
	tk.Now = func() time.Time { return now.Add(61 * time.Second) }
	if _, err := tk.Verify(s); !errors.Is(err, seckill.ErrUnauthorized) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Verify after expiry: got %v, want an expired ErrUnauthorized", err)
	}
}

// sign makes a token with arbitrary header and claims, for the hostile cases.
func sign(t *testing.T, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	exp := now.Add(time.Hour).Unix()
	good := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9", "exp": exp})
	if _, err := tk.Verify(good); err != nil {
		t.Fatalf("the control token fails: %v", err)
	}
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "9", "exp": exp, "role": "admin"})
	parts := strings.Split(good, ".")
	for name, token := range map[string]string{
		"alg none":         none,
		"alg HS512":        sign(t, jwt.SigningMethodHS512, testSecret, jwt.MapClaims{"sub": "9", "exp": exp}),
		"other secret":     sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two bytes!"), jwt.MapClaims{"sub": "9", "exp": exp}),
		"no exp":           sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9"}),
		"exp as string":    sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9", "exp": "tomorrow"}),
		"no sub":           sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"exp": exp}),
		"sub not a number": sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp}),
		"sub zero":         sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "0", "exp": exp}),
		"sub negative":     sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "-3", "exp": exp}),
		"sub leading zero": sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "09", "exp": exp}),
		"sub overflows":    sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9223372036854775808", "exp": exp}),
		"tampered claims":  parts[0] + "." + strings.TrimRight(jwtEncode(`{"sub":"1","exp":9999999999,"role":"admin"}`), "=") + "." + parts[2],
		"empty":            "",
		"garbage":          "not.a.token",
		"two parts":        parts[0] + "." + parts[1],
	} {
		t.Run(name, func(t *testing.T) {
			if id, err := tk.Verify(token); !errors.Is(err, seckill.ErrUnauthorized) {
				t.Fatalf("Verify = %+v, %v; want ErrUnauthorized", id, err)
			}
		})
	}
}

func jwtEncode(s string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// TestVerifiedTokenNotKeptWithItsHeader: a token verified as a piece of a
// longer string (its request's Authorization header, padded with spaces up
// to the header limit) is cached as a copy, so the cache does not keep the
// whole header alive.
func TestVerifiedTokenNotKeptWithItsHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	s := mustMint(t, tk, Identity{UserID: 7}, time.Hour)
	header := "Bearer " + s + strings.Repeat(" ", 16<<10)
	token := strings.TrimSpace(strings.TrimPrefix(header, "Bearer "))
	if _, err := tk.Verify(token); err != nil {
		t.Fatal(err)
	}
	lo := uintptr(unsafe.Pointer(unsafe.StringData(header)))
	hi := lo + uintptr(len(header))
	found := false
	for i := range tk.verified.slots {
		e := tk.verified.slots[i].entry.Load()
		if e == nil || e.token != s {
			continue
		}
		found = true
		if p := uintptr(unsafe.Pointer(unsafe.StringData(e.token))); p >= lo && p < hi {
			t.Error("the cached token points into its 16 KiB header")
		}
	}
	if !found {
		t.Fatal("the verified token is not in the cache")
	}
}
