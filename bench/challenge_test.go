package bench

import (
	"context"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func runChallengeFake(t *testing.T, shop *fakeShop, cfg Config) (*Report, error) {
	t.Helper()
	srv := httptest.NewServer(shop.handler())
	defer srv.Close()
	cfg.URL, cfg.Label, cfg.Challenge = srv.URL, "fake", true
	cfg.Token = func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil }
	cfg.ReferenceFor, cfg.DrainTimeout = -1, time.Second
	return Run(context.Background(), cfg)
}

// TestChallengeSale: with Challenge, the sale's voucher asks for a
// challenge, every buy carries a fresh solution of its buyer's, which the
// shop verifies and takes once, and the books balance; the sold-out
// answers need none; the start rounds alternate a plain voucher and a
// challenge one, each offered the same buys.
func TestChallengeSale(t *testing.T) {
	t.Parallel()
	shop := &fakeShop{challenges: newFakeChallenges(2000)}
	r, err := runChallengeFake(t, shop, Config{Users: 100, Repeat: 2, Stock: 20, Concurrency: 8,
		SoldOutFor: 200 * time.Millisecond, StartRounds: 1, StartFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Admitted != 20 || r.Created != 20 || r.ChallengeErrors != 0 || !r.Challenge {
		t.Fatalf("a correct shop with challenges: %+v\n%s", r, Verdict(r))
	}
	if c := shop.vouchers[0].challenge; c == nil || !*c {
		t.Errorf("the sale's voucher was created with challenge %v, want true", c)
	}
	// Every buy carried a solution: those before the sell-out were
	// verified by the shop, one each, and the bench solved one per buy.
	s := r.Solves
	if s == nil || s.Solved != r.Requests || s.P50 <= 0 || s.Max < s.P99 || s.HashesMax > 2001 || s.HashesMean <= 0 {
		t.Fatalf("solves %+v for %d buys", s, r.Requests)
	}
	if want := map[int64]int64{2000: r.Requests}; len(s.MaxNumbers) != 1 || s.MaxNumbers[2000] != r.Requests {
		t.Errorf("maxnumbers seen %v, want %v", s.MaxNumbers, want)
	}
	if p := r.phase("sold-out"); p == nil || p.Requests == 0 || p.Errors != 0 {
		t.Errorf("the sold-out phase, without solutions: %+v", p)
	}

	st := r.Start
	if st == nil || len(st.Rounds) != 2 || st.Rounds[0].Challenge || !st.Rounds[1].Challenge || st.Planned != 200 {
		t.Fatalf("start rounds %+v", st)
	}
	for _, round := range st.Rounds {
		v := shop.vouchers[round.Voucher-1]
		if asked := v.challenge != nil && *v.challenge; asked != round.Challenge {
			t.Errorf("round of voucher %d: challenge asked %v, want %v", round.Voucher, asked, round.Challenge)
		}
		var sum int64
		for _, n := range round.Buckets {
			sum += n
		}
		// Every buy offered was sent, within the round's 5 s, and each is
		// counted in one bucket.
		if round.Sent != 200 || sum+round.After != round.Sent || round.After != 0 || len(round.Buckets) != 50 || round.Peak <= 0 {
			t.Errorf("round %+v: want all 200 buys sent, in 50 buckets", round)
		}
		if round.Answers["ok"] != 20 || round.Errors != 0 {
			t.Errorf("round answers %v, errors %d: want 20 admitted", round.Answers, round.Errors)
		}
		if round.Challenge != (round.Solves != nil) || round.Challenge != (round.Verified > 0) {
			t.Errorf("round (challenge %v): solves %+v, verified %d", round.Challenge, round.Solves, round.Verified)
		}
	}
	if st.Plain.Rounds != 1 || st.Challenge.Rounds != 1 || st.PeakRatio <= 0 || st.Errors != 0 || st.ChallengeErrors != 0 {
		t.Errorf("start summary: plain %+v, challenge %+v, ratio %v", st.Plain, st.Challenge, st.PeakRatio)
	}
	var b strings.Builder
	Table(&b, []*Report{r})
	b.WriteString(Verdict(r))
	for _, want := range []string{"Challenges, solved in Go", "maxnumber seen", "arrivals of buy requests per 100 ms", "the challenge's peak ÷ the plain peak",
		"ok   no buy refused for its challenge", "ok   the 2 start rounds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestChallengeRefused: a shop that refuses every solution admits nobody,
// and the books say why.
func TestChallengeRefused(t *testing.T) {
	t.Parallel()
	shop := &fakeShop{challenges: newFakeChallenges(100)}
	shop.challenges.refuse = true
	r, err := runChallengeFake(t, shop, Config{Users: 30, Repeat: 1, Stock: 3, Concurrency: 4, SoldOutFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.ChallengeErrors != 30 || r.Answers["challenge_invalid"] != 30 {
		t.Fatalf("a shop refusing every solution: OK %v, challenge errors %d, answers %v", r.OK(), r.ChallengeErrors, r.Answers)
	}
	if v := Verdict(r); !strings.Contains(v, "FAIL 30 buys refused for their challenge") {
		t.Errorf("the verdict does not say so:\n%s", v)
	}
}

// TestChallengeSoldOutRefused: the sold-out phase's buys carry no
// solution; a server that asks for one then is counted by its answer.
func TestChallengeSoldOutRefused(t *testing.T) {
	t.Parallel()
	shop := &fakeShop{challenges: newFakeChallenges(100)}
	shop.challenges.forgetSoldOut = true
	r, err := runChallengeFake(t, shop, Config{Users: 30, Repeat: 1, Stock: 3, Concurrency: 4, SoldOutFor: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := r.phase("sold-out")
	if !r.OK() || p == nil || p.Errors == 0 || r.SoldOutOther["challenge_required"] != p.Errors {
		t.Fatalf("OK %v, the sold-out phase %+v, its other answers %v: want every one challenge_required", r.OK(), p, r.SoldOutOther)
	}
	var b strings.Builder
	Table(&b, []*Report{r})
	if want := "once sold out, answers other than sold_out: " + thousands(float64(p.Errors)) + " challenge_required"; !strings.Contains(b.String(), want) {
		t.Errorf("the notes do not tell them:\n%s", b.String())
	}
}

// TestChallengeNotIssued: a server that issues no challenge stops the run
// before its sale, saying so.
func TestChallengeNotIssued(t *testing.T) {
	t.Parallel()
	_, err := runChallengeFake(t, &fakeShop{}, Config{Users: 10, Repeat: 1, SoldOutFor: -1})
	if err == nil || !strings.Contains(err.Error(), "issues no challenge") {
		t.Fatalf("Run against a shop without challenges: %v", err)
	}
}

// TestPlainSaleSendsNoChallenge: without Challenge no voucher is asked
// for one and no buy carries a solution, as before challenges.
func TestPlainSaleSendsNoChallenge(t *testing.T) {
	t.Parallel()
	shop := &fakeShop{challenges: newFakeChallenges(100)}
	srv := httptest.NewServer(shop.handler())
	defer srv.Close()
	r, err := Run(context.Background(), Config{URL: srv.URL, Label: "fake", Users: 30, Repeat: 2, Stock: 5, Concurrency: 4,
		Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		ReferenceFor: -1, SoldOutFor: -1, DrainTimeout: time.Second, StartRounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Solves != nil || r.Start != nil || r.Challenge || shop.challenges.verified != 0 {
		t.Errorf("a plain sale: OK %v, solves %+v, start %+v, solutions verified %d", r.OK(), r.Solves, r.Start, shop.challenges.verified)
	}
	for _, v := range shop.vouchers {
		if v.challenge != nil {
			t.Errorf("a plain sale's voucher was sent challenge %v", *v.challenge)
		}
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	a := newArrivals(start, 100*time.Millisecond, 950*time.Millisecond)
	for _, at := range []time.Duration{-time.Millisecond, 0, 99 * time.Millisecond, 100 * time.Millisecond, 350 * time.Millisecond,
		360 * time.Millisecond, 370 * time.Millisecond, 999 * time.Millisecond, time.Second, 5 * time.Second} {
		a.note(start.Add(at))
	}
	got := a.buckets()
	if want := []int64{3, 1, 0, 3, 0, 0, 0, 0, 0, 1}; !slices.Equal(got, want) || a.after.Load() != 2 {
		t.Errorf("buckets %v, after %d; want %v, 2", got, a.after.Load(), want)
	}
	if n, at := peak(got); n != 3 || at != 0 {
		t.Errorf("peak %d at %d, want 3 at 0 (the first of equals)", n, at)
	}
}

// TestStartSummary: each kind's rounds are averaged, bucket by bucket,
// and the server's CPU is over the buys and the verified solutions.
func TestStartSummary(t *testing.T) {
	t.Parallel()
	s := &Start{Rounds: []StartRound{
		{Challenge: false, Sent: 400, Buckets: []int64{300, 100}, Peak: 300, FirstSecond: 400, ServerCPU: 0.004},
		{Challenge: true, Sent: 100, Buckets: []int64{20, 80}, Peak: 80, PeakAt: 1, FirstSecond: 100, Verified: 50, ServerCPU: 0.002,
			Answers: map[string]int64{"ok": 40, "duplicate_order": 10}},
		{Challenge: true, Sent: 100, Buckets: []int64{40, 60}, Peak: 60, PeakAt: 1, FirstSecond: 100, Verified: 50, ServerCPU: 0.002,
			Answers: map[string]int64{"challenge_invalid": 1}},
		{Challenge: false, Sent: 400, Buckets: []int64{100, 300}, Peak: 300, PeakAt: 1, FirstSecond: 400, ServerCPU: 0.004},
	}}
	s.summarize(false)
	if p := s.Plain; p.Rounds != 2 || p.Peak != 300 || !slices.Equal(p.Buckets, []float64{200, 200}) || p.ServerUsPerBuy != 10 || p.ServerUsPerVerified != 0 {
		t.Errorf("plain %+v", p)
	}
	if c := s.Challenge; c.Rounds != 2 || c.Peak != 70 || !slices.Equal(c.Buckets, []float64{30, 70}) || c.ServerUsPerBuy != 20 || c.ServerUsPerVerified != 40 {
		t.Errorf("challenge %+v", c)
	}
	if s.PeakRatio != 70.0/300 || s.ChallengeErrors != 1 {
		t.Errorf("peak ratio %v, challenge errors %d", s.PeakRatio, s.ChallengeErrors)
	}
	// A round whose server CPU was not read leaves its kind unmeasured.
	s.Rounds[0].ServerCPU = -1
	s.summarize(false)
	if s.Plain.ServerUsPerBuy != 0 || s.Challenge.ServerUsPerBuy != 20 {
		t.Errorf("unmeasured plain round: plain %v µs, challenge %v µs per buy", s.Plain.ServerUsPerBuy, s.Challenge.ServerUsPerBuy)
	}
}
