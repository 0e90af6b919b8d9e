package seckill

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// The protocol's vectors. The hashes are those of ALTCHA's own libraries'
// tests (altcha-lib-go v1, solveChallenge: the SHA-256 of "salt123", and
// of "salt1234567" for a number beyond maxnumber); the HMAC is RFC 4231's
// test case 2, the MAC the signature is.
func TestChallengeVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		salt   string
		number int64
		want   string
	}{
		{"salt", 123, "c2fc6c6adf8ba0f575a35f48df52c0968a3dcd3c577c2769dc2f1035943b975e"},
		{"salt", 1234567, "751a512dc299d1193434e6d7065f64d90e5bef33ab45ab841fb7231ecef3fa5a"},
	} {
		if got := challengeHash(v.salt, v.number); got != v.want {
			t.Errorf("challengeHash(%q, %d) = %s, want %s", v.salt, v.number, got, v.want)
		}
	}
	if got, want := challengeSignature([]byte("Jefe"), "what do ya want for nothing?"), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"; got != want {
		t.Errorf("challengeSignature (RFC 4231 case 2) = %s, want %s", got, want)
	}
	ctx := t.Context()
	// The client's side: the number found by counting up from 0.
	sol, err := SolveChallenge(ctx, Challenge{Algorithm: "SHA-256", Challenge: "c2fc6c6adf8ba0f575a35f48df52c0968a3dcd3c577c2769dc2f1035943b975e", Salt: "salt", MaxNumber: 100_000})
	if err != nil || sol.Number != 123 {
		t.Errorf("SolveChallenge of salt123 = %+v, %v; want number 123", sol, err)
	}
	// 1234567 lies beyond maxnumber: no solution.
	if _, err := SolveChallenge(ctx, Challenge{Algorithm: "SHA-256", Challenge: "751a512dc299d1193434e6d7065f64d90e5bef33ab45ab841fb7231ecef3fa5a", Salt: "salt", MaxNumber: 100_000}); err == nil {
		t.Error("SolveChallenge of a number beyond maxnumber found one")
	}
	if _, err := SolveChallenge(ctx, Challenge{Algorithm: "SHA-999", Challenge: "c2fc6c6adf8ba0f575a35f48df52c0968a3dcd3c577c2769dc2f1035943b975e", Salt: "salt", MaxNumber: 100_000}); err == nil {
		t.Error("SolveChallenge of an unknown algorithm answered")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := SolveChallenge(cancelled, Challenge{Algorithm: "SHA-256", Challenge: strings.Repeat("0", 64), Salt: "salt", MaxNumber: MaxChallengeNumber}); !errors.Is(err, context.Canceled) {
		t.Errorf("SolveChallenge cancelled = %v, want context.Canceled", err)
	}
}

var (
	testKey    = ChallengeKey([]byte("a token secret of thirty-two bytes or more"))
	testClaims = ChallengeClaims{UserID: 1001, VoucherID: 7, Expires: time.Unix(1_800_000_000, 0)}
	testNow    = testClaims.Expires.Add(-time.Minute)
)

// solved makes a challenge for the claims and solves it.
func solved(t *testing.T, key []byte, c ChallengeClaims) (Challenge, Solution) {
	t.Helper()
	ch, err := NewChallenge(key, c, 2000, nil)
	if err != nil {
		t.Fatal(err)
	}
	sol, err := SolveChallenge(t.Context(), ch)
	if err != nil {
		t.Fatal(err)
	}
	return ch, sol
}

// TestChallengeRoundTrip: a challenge made, solved, sent as the header and
// read back verifies, with its claims; its salt is ALTCHA's, params closed
// by "&", and its JSON ALTCHA's names.
func TestChallengeRoundTrip(t *testing.T) {
	t.Parallel()
	ch, sol := solved(t, testKey, testClaims)
	if !strings.HasSuffix(ch.Salt, "?expires=1800000000&user=1001&voucher=7&") || len(ch.Salt) != 24+len("?expires=1800000000&user=1001&voucher=7&") {
		t.Errorf("salt %q: want 24 hex digits, then the claims closed by &", ch.Salt)
	}
	b, _ := json.Marshal(ch)
	var fields map[string]any
	json.Unmarshal(b, &fields)
	for _, f := range []string{"algorithm", "challenge", "maxnumber", "salt", "signature"} {
		if _, ok := fields[f]; !ok || len(fields) != 5 {
			t.Errorf("challenge JSON %s: want exactly algorithm, challenge, maxnumber, salt, signature", b)
		}
	}
	got, err := ParseSolution(sol.Header())
	if err != nil || got != sol {
		t.Fatalf("ParseSolution(Header()) = %+v, %v; want %+v", got, err, sol)
	}
	claims, err := VerifySolution(testKey, got, testNow)
	if err != nil || claims != testClaims {
		t.Fatalf("VerifySolution = %+v, %v; want %+v", claims, err, testClaims)
	}
	// As the ALTCHA widget sends it: with "took", without padding.
	widget, _ := json.Marshal(map[string]any{"algorithm": sol.Algorithm, "challenge": sol.Challenge, "number": sol.Number, "salt": sol.Salt, "signature": sol.Signature, "took": 812})
	if got, err := ParseSolution(base64.RawStdEncoding.EncodeToString(widget)); err != nil || got != sol {
		t.Errorf("ParseSolution of the widget's payload = %+v, %v; want %+v", got, err, sol)
	}
	// Numbers drawn cover the range, never above it.
	for i := range 50 {
		c, err := NewChallenge(testKey, testClaims, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := SolveChallenge(t.Context(), c)
		if err != nil || s.Number > 3 {
			t.Fatalf("challenge %d of maxnumber 3: %+v, %v", i, s, err)
		}
	}
	for _, n := range []int64{0, -1, MaxChallengeNumber + 1} {
		if _, err := NewChallenge(testKey, testClaims, n, nil); err == nil {
			t.Errorf("NewChallenge with maxnumber %d made one", n)
		}
	}
}

// TestChallengeRefused: every way a solution can be wrong is
// ErrChallengeInvalid (ErrChallengeRequired for none), never another
// error, never claims.
func TestChallengeRefused(t *testing.T) {
	t.Parallel()
	_, sol := solved(t, testKey, testClaims)
	_, other := solved(t, ChallengeKey([]byte("another secret of thirty-two bytes, or more")), testClaims)
	// A number's leading digit moved into the salt: "…&1" + "23" hashes
	// as "…&" + "123" (ALTCHA's own splicing test). The salt must end in
	// "&", or a salt ending in its expiry would take the digit and expire
	// ten times later.
	salt := "0123456789abcdef01234567?expires=1800000000&user=1001&voucher=7&"
	whole := challengeHash(salt, 123)
	spliced := Solution{Algorithm: "SHA-256", Challenge: whole, Number: 23, Salt: salt + "1", Signature: challengeSignature(testKey, whole)}
	if challengeHash(spliced.Salt, spliced.Number) != whole {
		t.Fatal("the splice does not hash as the original: the test is wrong")
	}
	if _, err := VerifySolution(testKey, Solution{Algorithm: "SHA-256", Challenge: whole, Number: 123, Salt: salt, Signature: spliced.Signature}, testNow); err != nil {
		t.Fatalf("the unspliced solution: %v, want verified", err)
	}
	mod := func(f func(*Solution)) Solution { s := sol; f(&s); return s }
	for _, tc := range []struct {
		name string
		sol  Solution
		now  time.Time
	}{
		{"forged signature", mod(func(s *Solution) { s.Signature = strings.Repeat("ab", 32) }), testNow},
		{"signed with another key", other, testNow},
		{"wrong number", mod(func(s *Solution) { s.Number = (s.Number + 1) % 2001 }), testNow},
		{"another salt", mod(func(s *Solution) { s.Salt = strings.Replace(s.Salt, "user=1001", "user=1002", 1) }), testNow},
		{"spliced salt digits", spliced, testNow},
		{"another algorithm", mod(func(s *Solution) { s.Algorithm = "SHA-1" }), testNow},
		{"negative number", mod(func(s *Solution) { s.Number = -1 }), testNow},
		{"huge number", mod(func(s *Solution) { s.Number = 1 << 62 }), testNow},
		{"short challenge", mod(func(s *Solution) { s.Challenge = s.Challenge[:10] }), testNow},
		{"expired", sol, testClaims.Expires},
		{"expired long ago", sol, testClaims.Expires.Add(time.Hour)},
		{"no claims in the salt", func() Solution {
			c := Challenge{Algorithm: "SHA-256", Salt: "salt", Challenge: challengeHash("salt", 5)}
			c.Signature = challengeSignature(testKey, c.Challenge)
			return Solution{Algorithm: c.Algorithm, Challenge: c.Challenge, Number: 5, Salt: c.Salt, Signature: c.Signature}
		}(), testNow},
	} {
		if claims, err := VerifySolution(testKey, tc.sol, tc.now); !errors.Is(err, ErrChallengeInvalid) || claims != (ChallengeClaims{}) {
			t.Errorf("%s: VerifySolution = %+v, %v; want ErrChallengeInvalid", tc.name, claims, err)
		}
	}
	if _, err := VerifySolution(testKey, sol, testClaims.Expires.Add(-time.Second)); err != nil {
		t.Errorf("a second before its expiry: %v, want verified", err)
	}

	huge := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 4096))
	for _, tc := range []struct {
		name, header string
		want         error
	}{
		{"none", "", ErrChallengeRequired},
		{"bad base64", "not base64!", ErrChallengeInvalid},
		{"not JSON", base64.StdEncoding.EncodeToString([]byte("number=5")), ErrChallengeInvalid},
		{"JSON of another shape", base64.StdEncoding.EncodeToString([]byte(`{"number":"five"}`)), ErrChallengeInvalid},
		{"huge header", huge, ErrChallengeInvalid},
	} {
		if _, err := ParseSolution(tc.header); !errors.Is(err, tc.want) {
			t.Errorf("ParseSolution(%s) = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzParseSolution: no header makes the parser or the verifier panic or
// answer anything but a verified solution or the challenge's two errors.
func FuzzParseSolution(f *testing.F) {
	f.Add("")
	f.Add("e30=")
	f.Add(Solution{Algorithm: "SHA-256", Challenge: strings.Repeat("a", 64), Signature: strings.Repeat("b", 64), Salt: "x?expires=1&user=1&voucher=1&"}.Header())
	f.Fuzz(func(t *testing.T, header string) {
		s, err := ParseSolution(header)
		if err == nil {
			_, err = VerifySolution(testKey, s, testNow)
		}
		if err != nil && !errors.Is(err, ErrChallengeInvalid) && !errors.Is(err, ErrChallengeRequired) {
			t.Fatalf("header %q: %v", header, err)
		}
	})
}

// BenchmarkVerifySolution is the server's CPU per solution checked (but
// the spend's round trip): a SHA-256, an HMAC and the salt's parse.
func BenchmarkVerifySolution(b *testing.B) {
	ch, err := NewChallenge(testKey, testClaims, 1000, nil)
	if err != nil {
		b.Fatal(err)
	}
	sol, err := SolveChallenge(b.Context(), ch)
	if err != nil {
		b.Fatal(err)
	}
	header := sol.Header()
	b.ReportAllocs()
	for b.Loop() {
		s, err := ParseSolution(header)
		if err == nil {
			_, err = VerifySolution(testKey, s, testNow)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolveChallenge is a buyer's work in Go, in hashes a second: a
// challenge of maxnumber 1,000,000 whose number is the last one tried.
func BenchmarkSolveChallenge(b *testing.B) {
	const n = 1_000_000
	salt := "0123456789abcdef01234567?expires=1800000000&user=1001&voucher=7&"
	ch := Challenge{Algorithm: ChallengeAlgorithm, Challenge: challengeHash(salt, n), MaxNumber: n, Salt: salt}
	for b.Loop() {
		if _, err := SolveChallenge(b.Context(), ch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "hashes/s")
}

// BenchmarkCheckWithoutChallenge is what the check costs a buy of a
// voucher that takes no challenge: one lookup of its row in memory.
func BenchmarkCheckWithoutChallenge(b *testing.B) {
	vs := &VoucherService{}
	vs.rows.remember(&Voucher{ID: 7, BeginTime: testNow.Add(-time.Hour), EndTime: testNow.Add(time.Hour)})
	cs := &ChallengeService{Vouchers: vs, Clock: func() time.Time { return testNow }}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if err := cs.Check(ctx, 1001, 7, ""); err != nil {
			b.Fatal(err)
		}
	}
}
