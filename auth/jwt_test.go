package auth

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill"
)

// TestVerifyAgreesWithGolangJWT: the hand parser accepts what golang-jwt's
// parser, set as Verify used to set it, accepts, and refuses what it
// refuses, for tokens of many shapes signed with the secret (and some
// not). Where both accept, they name the same buyer.
func TestVerifyAgreesWithGolangJWT(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	exp, past := now.Add(time.Hour).Unix(), now.Add(-time.Hour).Unix()
	hs256 := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, c) }
	withHeader := func(h map[string]any, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
		for k, v := range h {
			tok.Header[k] = v
		}
		s, err := tok.SignedString(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// raw signs a payload written by hand.
	raw := func(payload string) string {
		input := hs256Header + "." + strings.TrimRight(jwtEncode(payload), "=")
		sig, err := jwt.SigningMethodHS256.Sign(input, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		return input + "." + base64URL(sig)
	}
	tokens := map[string]string{
		"plain":                   hs256(jwt.MapClaims{"sub": "9", "exp": exp}),
		"admin":                   hs256(jwt.MapClaims{"sub": "9", "exp": exp, "role": "admin"}),
		"other role":              hs256(jwt.MapClaims{"sub": "9", "exp": exp, "role": "Admin"}),
		"all registered claims":   hs256(jwt.MapClaims{"sub": "9", "exp": exp, "iat": past, "nbf": past, "iss": "x", "aud": []string{"a", "b"}, "jti": "j"}),
		"nbf in the future":       hs256(jwt.MapClaims{"sub": "9", "exp": exp, "nbf": exp - 1}),
		"nbf now":                 hs256(jwt.MapClaims{"sub": "9", "exp": exp, "nbf": now.Unix()}),
		"nbf not a number":        hs256(jwt.MapClaims{"sub": "9", "exp": exp, "nbf": "soon"}),
		"iat not a number":        hs256(jwt.MapClaims{"sub": "9", "exp": exp, "iat": true}),
		"expired":                 hs256(jwt.MapClaims{"sub": "9", "exp": past}),
		"expires now":             hs256(jwt.MapClaims{"sub": "9", "exp": now.Unix()}),
		"exp fraction":            hs256(jwt.MapClaims{"sub": "9", "exp": float64(exp) + 0.75}),
		"exp fraction, past":      hs256(jwt.MapClaims{"sub": "9", "exp": float64(now.Unix()) + 0.75}),
		"exp exponent":            raw(fmt.Sprintf(`{"sub":"9","exp":%de0}`, exp)),
		"exp quoted":              raw(fmt.Sprintf(`{"sub":"9","exp":"%d"}`, exp)),
		"exp null":                raw(`{"sub":"9","exp":null}`),
		"exp object":              raw(`{"sub":"9","exp":{}}`),
		"exp leading zero":        raw(fmt.Sprintf(`{"sub":"9","exp":0%d}`, exp)),
		"exp twice, last expired": raw(fmt.Sprintf(`{"sub":"9","exp":%d,"exp":%d}`, exp, past)),
		"exp twice, last valid":   raw(fmt.Sprintf(`{"sub":"9","exp":%d,"exp":%d}`, past, exp)),
		"Exp in capitals":         raw(fmt.Sprintf(`{"sub":"9","Exp":%d}`, exp)),
		"SUB in capitals":         raw(fmt.Sprintf(`{"SUB":"9","exp":%d}`, exp)),
		"escaped sub":             raw(fmt.Sprintf(`{"sub":"\u0039","exp":%d}`, exp)),
		"escaped role":            raw(fmt.Sprintf(`{"sub":"9","exp":%d,"role":"adm\u0069n"}`, exp)),
		"spaces":                  raw(fmt.Sprintf(" {\n \"sub\" : \"9\" ,\t\"exp\" : %d } ", exp)),
		"sub a number":            raw(fmt.Sprintf(`{"sub":9,"exp":%d}`, exp)),
		"nested unknown claim":    raw(fmt.Sprintf(`{"sub":"9","exp":%d,"x":{"exp":1}}`, exp)),
		"trailing garbage":        raw(fmt.Sprintf(`{"sub":"9","exp":%d}x`, exp)),
		"two objects":             raw(fmt.Sprintf(`{"sub":"9","exp":%d}{}`, exp)),
		"not an object":           raw(`["sub","9"]`),
		"empty payload":           raw(``),
		"header with kid":         withHeader(map[string]any{"kid": "k1"}, jwt.MapClaims{"sub": "9", "exp": exp}),
		"header alg none":         withHeader(map[string]any{"alg": "none"}, jwt.MapClaims{"sub": "9", "exp": exp}),
		"header alg HS512":        withHeader(map[string]any{"alg": "HS512"}, jwt.MapClaims{"sub": "9", "exp": exp}),
		"header without typ":      withHeader(map[string]any{"typ": nil}, jwt.MapClaims{"sub": "9", "exp": exp}),
		"HS384":                   sign(t, jwt.SigningMethodHS384, testSecret, jwt.MapClaims{"sub": "9", "exp": exp}),
		"other secret":            sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two bytes!"), jwt.MapClaims{"sub": "9", "exp": exp}),
		"three dots":              hs256(jwt.MapClaims{"sub": "9", "exp": exp}) + ".",
	}
	good := tokens["plain"]
	parts := strings.Split(good, ".")
	tokens["signature cut"] = good[:len(good)-1]
	tokens["signature padded"] = good + "="
	tokens["payload of another"] = parts[0] + "." + strings.Split(tokens["admin"], ".")[1] + "." + parts[2]
	for name, token := range tokens {
		t.Run(name, func(t *testing.T) {
			tk := newTestTokens(t, now)
			got, err := tk.Verify(token)
			var c claims
			_, jerr := parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return testSecret, nil })
			if (err == nil) != (jerr == nil) {
				t.Fatalf("Verify = %+v, %v; golang-jwt: %v", got, err, jerr)
			}
			if err != nil {
				if !errors.Is(err, seckill.ErrUnauthorized) {
					t.Fatalf("Verify: %v, want ErrUnauthorized", err)
				}
				if errors.Is(jerr, jwt.ErrTokenExpired) != strings.Contains(err.Error(), "expired") {
					t.Errorf("Verify: %v; golang-jwt: %v", err, jerr)
				}
				return
			}
			if want := (Identity{UserID: 9, Admin: c.Role == RoleAdmin}); got != want || c.Subject != "9" {
				t.Errorf("Verify = %+v, golang-jwt's claims %+v", got, c)
			}
			// Verified again, from the cache: the same.
			if again, err := tk.Verify(token); err != nil || again != got {
				t.Errorf("Verify again = %+v, %v", again, err)
			}
		})
	}
}

func base64URL(b []byte) string { return strings.TrimRight(jwtEncode(string(b)), "=") }

// TestVerifyRefusesTamperedSignature: every one-character change of the
// signature is refused, the changes that keep the decoded bytes (the last
// character's unused bits) included.
func TestVerifyRefusesTamperedSignature(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	good := mustMint(t, tk, Identity{UserID: 9}, time.Hour)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := len(good) - sigLen; i < len(good); i++ {
		for _, c := range []byte(alphabet) {
			if c == good[i] {
				continue
			}
			bad := good[:i] + string(c) + good[i+1:]
			if id, err := tk.Verify(bad); err == nil {
				t.Fatalf("Verify(signature char %d = %q) = %+v, want refused", i, c, id)
			}
		}
	}
	if _, err := tk.Verify(good); err != nil {
		t.Fatalf("the untouched token: %v", err)
	}
}

// TestVerifyRefusesLongToken: a token beyond maxTokenLen is not decoded.
func TestVerifyRefusesLongToken(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	long := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9", "exp": now.Add(time.Hour).Unix(), "pad": strings.Repeat("x", maxTokenLen)})
	if _, err := tk.Verify(long); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Fatalf("Verify(a %d-byte token) = %v, want ErrUnauthorized", len(long), err)
	}
}

// TestVerifiedCacheExpiry: a token verified, then cached, is refused from
// its expiry on, to the second, though it is still in the cache.
func TestVerifiedCacheExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	s := mustMint(t, tk, Identity{UserID: 5}, time.Minute)
	for _, tc := range []struct {
		at time.Duration
		ok bool
	}{{0, true}, {time.Minute - time.Nanosecond, true}, {time.Minute, false}, {time.Hour, false}, {time.Second, true}} {
		tk.Now = func() time.Time { return now.Add(tc.at) }
		if _, ok := tk.verified.get(s, tk.Now()); ok != tc.ok && tc.at > 0 {
			t.Errorf("at +%v the cache answers %v, want %v", tc.at, ok, tc.ok)
		}
		if _, err := tk.Verify(s); (err == nil) != tc.ok {
			t.Errorf("Verify at +%v: %v, want ok %v", tc.at, err, tc.ok)
		}
	}
}

// TestVerifiedCacheBounded: however many tokens are verified, the cache
// holds at most its slots, and the tokens evicted still verify.
func TestVerifiedCacheBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := newTestTokens(t, now)
	const n = verifiedSets*verifiedWays + 1000
	if len(tk.verified.slots) != verifiedSets*verifiedWays {
		t.Fatalf("%d slots", len(tk.verified.slots))
	}
	first := mustMint(t, tk, Identity{UserID: 1}, time.Minute)
	for i := range n {
		// Later tokens expire later: the first is the first evicted.
		s, err := tk.Mint(Identity{UserID: int64(i + 1)}, time.Hour+time.Duration(i)*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			s = first
		}
		if _, err := tk.Verify(s); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for i := range tk.verified.slots {
		if tk.verified.slots[i].entry.Load() != nil {
			held++
		}
	}
	if held > verifiedSets*verifiedWays {
		t.Errorf("the cache holds %d tokens", held)
	}
	if id, err := tk.Verify(first); err != nil || id.UserID != 1 {
		t.Errorf("Verify(the first token, perhaps evicted) = %+v, %v", id, err)
	}
}

// TestVerifyConcurrent: buyers verified on many goroutines at once, each
// token seen first and again, all get their own identity (run with -race).
func TestVerifyConcurrent(t *testing.T) {
	t.Parallel()
	tk, err := NewTokens(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, 200)
	for i := range tokens {
		if tokens[i], err = tk.Mint(Identity{UserID: int64(i + 1)}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for r := range 5 {
				for i := range tokens {
					j := (i*7 + g + r) % len(tokens)
					if id, err := tk.Verify(tokens[j]); err != nil || id.UserID != int64(j+1) {
						t.Errorf("Verify(token of %d) = %+v, %v", j+1, id, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// FuzzClaims: where the fast reader of the claims reads a payload, it
// reads what encoding/json does.
func FuzzClaims(f *testing.F) {
	for _, s := range []string{
		`{"sub":"9","exp":1700000000}`,
		`{"sub":"9","exp":1700000000,"iat":1690000000,"role":"admin"}`,
		` { "sub" : "12" , "exp" : -5 , "nbf" : 0 } `,
		`{"sub":"9","exp":1.5}`,
		`{"sub":"9","exp":"1"}`,
		`{"aud":"x","jti":"y","n":-0.5e+3}`,
		`{}`,
		`{"Exp":1}`,
		`{"sub":"\u0039"}`,
		`{"exp":01}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := fastClaims(b)
		if !ok {
			return
		}
		slow, err := slowClaims(b)
		if err != nil {
			t.Fatalf("fast read %q as %+v; encoding/json: %v", b, fast, err)
		}
		if fast.sub != slow.sub || fast.role != slow.role || fast.hasExp != slow.hasExp || fast.hasNbf != slow.hasNbf ||
			!fast.exp.Equal(slow.exp) || !fast.nbf.Equal(slow.nbf) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", b, fast, slow)
		}
	})
}
