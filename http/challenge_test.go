package http

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// fakeChallenges is a ChallengeService that answers as told and records
// what it was asked, with the header the buy carried.
type fakeChallenges struct {
	calls
	issueErr, checkErr error
}

var _ ChallengeService = (*fakeChallenges)(nil)

func (f *fakeChallenges) Issue(_ context.Context, userID, voucherID int64) (seckill.Challenge, error) {
	f.add("Issue(" + itoa(userID) + ", " + itoa(voucherID) + ")")
	if f.issueErr != nil {
		return seckill.Challenge{}, f.issueErr
	}
	return seckill.Challenge{Algorithm: "SHA-256", Challenge: strings.Repeat("a", 64), MaxNumber: 10_000,
		Salt: "0123456789abcdef01234567?expires=1800000000&user=2&voucher=5&", Signature: strings.Repeat("b", 64)}, nil
}

func (f *fakeChallenges) Check(_ context.Context, userID, voucherID int64, header string) error {
	f.add("Check " + itoa(userID) + " " + itoa(voucherID) + " " + header)
	return f.checkErr
}

func (f *fakeChallenges) Stats() seckill.ChallengeStats {
	return seckill.ChallengeStats{Issued: 3, Passed: 2, Invalid: 1, MaxNumber: 20_000}
}

// TestChallengeRoutes: the challenge route answers the service's
// challenge, never cached, or its error; the buy asks the check first
// with the X-Altcha header, and a refusal never reaches the order
// service. Every answer is checked against the OpenAPI document.
func TestChallengeRoutes(t *testing.T) {
	t.Parallel()
	ch := &fakeChallenges{}
	e := newFakeEnv(t, fakeOptions{edit: func(s *Services) { s.Challenges = ch }})

	res := e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil)
	if res.status != 200 || res.body["algorithm"] != "SHA-256" || res.body["maxnumber"] != float64(10_000) {
		t.Fatalf("GET challenge = %d %s", res.status, res.raw)
	}
	if cc := res.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	e.wantError(e.do("GET", "/api/vouchers/5/challenge", "", nil), 401, "unauthorized")
	e.wantError(e.do("GET", "/api/vouchers/x/challenge", e.buyer, nil), 400, "invalid_argument")
	ch.issueErr = seckill.ErrChallengeNotNeeded
	e.wantError(e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil), 409, "challenge_not_needed")
	ch.issueErr = &seckill.Error{Kind: seckill.ErrNotStarted, Message: "later", RetryAfter: 90 * time.Second}
	res = e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil)
	e.wantError(res, 409, "not_started")
	if got := res.header.Get("Retry-After"); got != "90" {
		t.Errorf("Retry-After = %q, want 90", got)
	}
	if got, want := ch.all(), []string{"Issue(2, 5)", "Issue(2, 5)", "Issue(2, 5)"}; !slices.Equal(got, want) {
		t.Errorf("Issue calls %q, want %q", got, want)
	}

	buy := func(solution string) response {
		t.Helper()
		return e.send("POST", "/api/vouchers/5/seckill", map[string]string{"Authorization": "Bearer " + e.buyer, "X-Altcha": solution}, nil)
	}
	ch.checkErr = seckill.Errorf(seckill.ErrChallengeRequired, "solve one")
	e.wantError(buy(""), 403, "challenge_required")
	ch.checkErr = seckill.Errorf(seckill.ErrChallengeInvalid, "used")
	e.wantError(buy("c29sdXRpb24="), 403, "challenge_invalid")
	if n := len(e.orders.all()); n != 0 {
		t.Errorf("refused buys reached the order service %d times", n)
	}
	ch.checkErr = nil
	if res := buy("c29sdXRpb24="); res.status != 200 {
		t.Errorf("a buy the check passes = %d %s, want 200", res.status, res.raw)
	}
	if got, want := ch.all()[3:], []string{"Check 2 5 ", "Check 2 5 c29sdXRpb24=", "Check 2 5 c29sdXRpb24="}; !slices.Equal(got, want) {
		t.Errorf("Check calls %q, want %q", got, want)
	}
	if got := e.orders.all(); !slices.Equal(got, []string{"Buy 2 5"}) {
		t.Errorf("order service calls %q, want one buy", got)
	}

	// The metrics read the service's counts.
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	metrics, _ := io.ReadAll(w.Body)
	for _, m := range []string{"seckill_challenges_issued_total 3", `seckill_challenge_checks_total{result="passed"} 2`,
		`seckill_challenge_checks_total{result="invalid"} 1`, `seckill_challenge_checks_total{result="required"} 0`, "seckill_challenge_maxnumber 20000"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

// TestChallengeRouteWithoutService: a server without a challenge service
// answers the route challenge_not_needed, and buys as before.
func TestChallengeRouteWithoutService(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	e.wantError(e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil), 409, "challenge_not_needed")
	if res := e.send("POST", "/api/vouchers/5/seckill", map[string]string{"Authorization": "Bearer " + e.buyer, "X-Altcha": "anything"}, nil); res.status != 200 {
		t.Errorf("buy = %d %s, want 200", res.status, res.raw)
	}
}

// TestDecodeVoucherChallenge: "challenge" and "challengeLeadSeconds" are
// read, the lead defaulting to 60 for a voucher with a challenge alone,
// and bounded before it is multiplied.
func TestDecodeVoucherChallenge(t *testing.T) {
	t.Parallel()
	base := `"title":"t","stock":5,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z"`
	for _, tc := range []struct {
		fields    string
		challenge bool
		lead      time.Duration
		bad       bool
	}{
		{"", false, 0, false},
		{`,"challenge":true`, true, seckill.DefaultChallengeLead, false},
		{`,"challenge":true,"challengeLeadSeconds":0`, true, 0, false},
		{`,"challenge":true,"challengeLeadSeconds":3600`, true, time.Hour, false},
		{`,"challenge":false,"challengeLeadSeconds":30`, false, 30 * time.Second, false},
		{`,"challenge":true,"challengeLeadSeconds":3601`, false, 0, true},
		{`,"challenge":true,"challengeLeadSeconds":-1`, false, 0, true},
		{`,"challenge":true,"challengeLeadSeconds":9223372036854775807`, false, 0, true},
		{`,"challenge":"yes"`, false, 0, true},
	} {
		v, err := decodeVoucher(strings.NewReader("{" + base + tc.fields + "}"))
		if tc.bad {
			if !errors.Is(err, seckill.ErrInvalidArgument) {
				t.Errorf("%s: decodeVoucher = %v, want ErrInvalidArgument", tc.fields, err)
			}
			continue
		}
		if err != nil || v.Challenge != tc.challenge || v.ChallengeLead != tc.lead {
			t.Errorf("%s: decodeVoucher = %+v, %v; want challenge %v, lead %v", tc.fields, v, err, tc.challenge, tc.lead)
		}
	}
}

// TestChallengeRateLimit: a buyer's requests for challenges pass a bucket
// of their own: over it 429 rate_limited with Retry-After, before the
// service is asked; another buyer, and the same buyer's buys, are not
// held back by it.
func TestChallengeRateLimit(t *testing.T) {
	t.Parallel()
	ch := &fakeChallenges{}
	// A token every ~17 minutes: none comes back during the test.
	e := newFakeEnv(t, fakeOptions{cfg: Config{ChallengeRateUser: 0.001, ChallengeRateUserBurst: 3},
		edit: func(s *Services) { s.Challenges = ch }})
	for i := range 3 {
		if res := e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil); res.status != 200 {
			t.Fatalf("challenge %d of the burst = %d %s, want 200", i+1, res.status, res.raw)
		}
	}
	res := e.do("GET", "/api/vouchers/5/challenge", e.buyer, nil)
	e.wantError(res, 429, "rate_limited")
	if n, _ := strconv.Atoi(res.header.Get("Retry-After")); n < 1 {
		t.Errorf("Retry-After = %q, want whole seconds", res.header.Get("Retry-After"))
	}
	if n := len(ch.all()); n != 3 {
		t.Errorf("the service was asked %d times, want the burst's 3", n)
	}
	if res := e.do("GET", "/api/vouchers/5/challenge", e.mint(auth.Identity{UserID: 3}), nil); res.status != 200 {
		t.Errorf("another buyer's challenge = %d %s, want 200", res.status, res.raw)
	}
	if res := e.do("POST", "/api/vouchers/5/seckill", e.buyer, nil); res.status != 200 {
		t.Errorf("the limited buyer's buy = %d %s, want 200", res.status, res.raw)
	}
}
