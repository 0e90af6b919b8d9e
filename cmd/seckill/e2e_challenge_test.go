package main

// The challenge before buying, from outside: a serve on
// MariaDB, buyers who solve their challenges in Go as any ALTCHA client
// would, and those who try to get around them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// TestChallengeFromOutside is the check: a voucher with
// "challenge": true refuses a buy without a solution, with another
// buyer's, with a forged one, and with one already used (also on another
// voucher), and admits with a fresh one; 50 buyers each solving their own
// are all admitted; a voucher without a challenge buys as before.
func TestChallengeFromOutside(t *testing.T) {
	env := serveEnv(testenv.RedisURL(t), testenv.RedisPrefix(t), testenv.MySQLURL(t))
	env["SECKILL_RATE_USER"] = "0" // one buyer tries many ways in a row
	client := newClient(t)
	srv := startServe(t, "serve", env)
	ctx := t.Context()
	now := time.Now().UTC()
	create := func(body string) int64 {
		t.Helper()
		status, out, err := do(ctx, client, "POST", srv.url+"/api/admin/vouchers", mint(t, adminUser, true), body)
		if err != nil || status != 201 {
			t.Fatalf("create voucher %s = %d %v %v", body, status, out, err)
		}
		var id int64
		fmt.Sscan(fmt.Sprint(out["id"]), &id)
		return id
	}
	window := fmt.Sprintf(`"beginTime":"%s","endTime":"%s"`, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	a := create(`{"title":"with a challenge","stock":100,"challenge":true,` + window + `}`)
	b := create(`{"title":"another with a challenge","stock":10,"challenge":true,` + window + `}`)
	plain := create(`{"title":"without","stock":5,` + window + `}`)
	later := create(fmt.Sprintf(`{"title":"later","stock":5,"challenge":true,"challengeLeadSeconds":60,"beginTime":"%s","endTime":"%s"}`,
		now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)))

	// The voucher's JSON says so, with the default lead.
	status, out, err := do(ctx, client, "GET", fmt.Sprintf("%s/api/vouchers/%d", srv.url, a), "", "")
	if err != nil || status != 200 || out["challenge"] != true || out["challengeLeadSeconds"] != float64(60) {
		t.Fatalf("GET voucher %d = %d %v %v; want challenge true, challengeLeadSeconds 60", a, status, out, err)
	}

	solve := func(user, voucher int64) seckill.Solution {
		t.Helper()
		ch, res := getChallenge(ctx, t, client, srv.url, user, voucher)
		if res.status != 200 {
			t.Fatalf("GET challenge of voucher %d for %d = %d %s", voucher, user, res.status, res.raw)
		}
		if cc := res.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("challenge's Cache-Control = %q, want no-store", cc)
		}
		sol, err := seckill.SolveChallenge(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		return sol
	}
	buy := func(user, voucher int64, header string) apiAnswer {
		t.Helper()
		return buyWith(ctx, t, client, srv.url, user, voucher, header)
	}
	want := func(what string, got apiAnswer, status int, code string) {
		t.Helper()
		if got.status != status || got.code != code {
			t.Errorf("%s = %d %s; want %d %s", what, got.status, got.raw, status, code)
		}
	}

	const buyer, other = 1001, 1002
	want("a buy without a solution", buy(buyer, a, ""), 403, "challenge_required")
	want("a buy with garbage", buy(buyer, a, "not base64!"), 403, "challenge_invalid")
	want("a buy with a huge header", buy(buyer, a, strings.Repeat("A", 4000)), 403, "challenge_invalid")

	theirs := solve(other, a)
	want("a buy with another buyer's solution", buy(buyer, a, theirs.Header()), 403, "challenge_invalid")
	// Their salt rewritten to name this buyer: the hash no longer matches.
	spliced := theirs
	spliced.Salt = strings.Replace(theirs.Salt, fmt.Sprintf("user=%d&", other), fmt.Sprintf("user=%d&", buyer), 1)
	want("a buy with another buyer's solution made out to this one", buy(buyer, a, spliced.Header()), 403, "challenge_invalid")

	// A challenge made with another key: solved, well formed, not ours.
	forged, err := seckill.NewChallenge(seckill.ChallengeKey([]byte("not the service's secret, 32 bytes or more")),
		seckill.ChallengeClaims{UserID: buyer, VoucherID: a, Expires: time.Now().Add(time.Minute)}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	forgedSol, err := seckill.SolveChallenge(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	want("a buy with a forged solution", buy(buyer, a, forgedSol.Header()), 403, "challenge_invalid")

	onB := solve(buyer, b)
	want("a buy with another voucher's solution", buy(buyer, a, onB.Header()), 403, "challenge_invalid")

	mine := solve(buyer, a)
	want("a buy with a fresh solution", buy(buyer, a, mine.Header()), 200, "")
	want("a buy with the solution used", buy(buyer, a, mine.Header()), 403, "challenge_invalid")
	want("a buy of another voucher with the solution used", buy(buyer, b, mine.Header()), 403, "challenge_invalid")
	// Used on its voucher B by its buyer, then tried on A.
	want("a buy of B with B's solution", buy(buyer, b, onB.Header()), 200, "")
	want("a buy of A with B's solution, used", buy(buyer, a, onB.Header()), 403, "challenge_invalid")
	// The buyer holds an order: a duplicate needs a solution too.
	want("a second buy without a solution", buy(buyer, a, ""), 403, "challenge_required")
	want("a second buy with a fresh solution", buy(buyer, a, solve(buyer, a).Header()), 409, "duplicate_order")

	// Outside the window, and without a challenge, no solution is asked.
	_, res := getChallenge(ctx, t, client, srv.url, buyer, later)
	if res.status != 409 || res.code != "not_started" || res.header.Get("Retry-After") == "" {
		t.Errorf("a challenge before the lead = %d %s (Retry-After %q); want 409 not_started with Retry-After", res.status, res.raw, res.header.Get("Retry-After"))
	}
	want("a buy before the start", buy(buyer, later, ""), 409, "not_started")
	_, res = getChallenge(ctx, t, client, srv.url, buyer, plain)
	want("a challenge of a voucher without one", res, 409, "challenge_not_needed")
	_, res = getChallenge(ctx, t, client, srv.url, buyer, 999_999_999)
	want("a challenge of no voucher", res, 404, "voucher_not_found")
	want("a buy without a challenge", buy(buyer, plain, ""), 200, "")
	want("a buy without a challenge, with a header", buy(other, plain, "whatever"), 200, "")

	// 50 buyers, each solving their own, at once: all admitted.
	crowd := buyers(50)
	for i := range crowd {
		crowd[i] += 10_000
	}
	var wg sync.WaitGroup
	got := make([]apiAnswer, len(crowd))
	for i, u := range crowd {
		wg.Go(func() {
			ch, res := getChallenge(ctx, t, client, srv.url, u, a)
			if res.status != 200 {
				got[i] = res
				return
			}
			sol, err := seckill.SolveChallenge(ctx, ch)
			if err != nil {
				got[i] = apiAnswer{raw: err.Error()}
				return
			}
			got[i] = buyWith(ctx, t, client, srv.url, u, a, sol.Header())
		})
	}
	wg.Wait()
	for i, g := range got {
		if g.status != 200 {
			t.Errorf("buyer %d solving their own = %d %s; want 200", crowd[i], g.status, g.raw)
		}
	}

	// The metrics count them.
	mres, err := client.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	for _, m := range []string{`seckill_challenge_checks_total{result="passed"} 53`, `seckill_challenge_checks_total{result="required"} 2`,
		`seckill_challenge_checks_total{result="invalid"} 9`, "seckill_challenges_issued_total 54", "seckill_challenge_maxnumber "} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

// apiAnswer is an API answer: its status, error code, headers and body.
type apiAnswer struct {
	status int
	code   string
	header http.Header
	raw    string
}

// apiCall sends a request as the user, with the solution header if any.
func apiCall(ctx context.Context, t *testing.T, c *http.Client, method, url string, user int64, solution string) apiAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+mint(t, user, false))
	if solution != "" {
		req.Header.Set("X-Altcha", solution)
	}
	res, err := c.Do(req)
	if err != nil {
		return apiAnswer{raw: err.Error()}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var body struct {
		Code string `json:"code"`
	}
	json.Unmarshal(raw, &body)
	return apiAnswer{status: res.StatusCode, code: body.Code, header: res.Header, raw: strings.TrimSpace(string(raw))}
}

// getChallenge asks a challenge of the voucher for the user.
func getChallenge(ctx context.Context, t *testing.T, c *http.Client, base string, user, voucher int64) (seckill.Challenge, apiAnswer) {
	t.Helper()
	res := apiCall(ctx, t, c, "GET", fmt.Sprintf("%s/api/vouchers/%d/challenge", base, voucher), user, "")
	var ch seckill.Challenge
	if res.status == 200 {
		if err := json.Unmarshal([]byte(res.raw), &ch); err != nil {
			t.Fatalf("challenge %s: %v", res.raw, err)
		}
	}
	return ch, res
}

// buyWith buys the voucher as the user with the X-Altcha header.
func buyWith(ctx context.Context, t *testing.T, c *http.Client, base string, user, voucher int64, header string) apiAnswer {
	t.Helper()
	return apiCall(ctx, t, c, "POST", fmt.Sprintf("%s/api/vouchers/%d/seckill", base, voucher), user, header)
}

// TestChallengeModes: the queue and sync modes check and spend solutions
// as the stream mode does (the sync mode too has Redis, and spends there).
func TestChallengeModes(t *testing.T) {
	for _, mode := range []string{"queue", "sync"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			env := serveEnv(testenv.RedisURL(t), testenv.RedisPrefix(t), testenv.MySQLURL(t))
			env["SECKILL_MODE"] = mode
			client := newClient(t)
			srv := startServe(t, "serve "+mode, env)
			ctx := t.Context()
			now := time.Now().UTC()
			status, out, err := do(ctx, client, "POST", srv.url+"/api/admin/vouchers", mint(t, adminUser, true),
				fmt.Sprintf(`{"title":"%s","stock":10,"challenge":true,"beginTime":"%s","endTime":"%s"}`, mode,
					now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)))
			if err != nil || status != 201 {
				t.Fatalf("create voucher = %d %v %v", status, out, err)
			}
			var v int64
			fmt.Sscan(fmt.Sprint(out["id"]), &v)
			plain := createVoucher(t, client, srv.url, 10)
			if res := buyWith(ctx, t, client, srv.url, 1001, v, ""); res.status != 403 || res.code != "challenge_required" {
				t.Errorf("a buy without a solution = %d %s, want 403 challenge_required", res.status, res.raw)
			}
			ch, res := getChallenge(ctx, t, client, srv.url, 1001, v)
			if res.status != 200 {
				t.Fatalf("challenge = %d %s", res.status, res.raw)
			}
			sol, err := seckill.SolveChallenge(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			if res := buyWith(ctx, t, client, srv.url, 1001, v, sol.Header()); res.status != 200 {
				t.Errorf("a buy with a fresh solution = %d %s, want 200", res.status, res.raw)
			}
			if res := buyWith(ctx, t, client, srv.url, 1002, v, sol.Header()); res.status != 403 || res.code != "challenge_invalid" {
				t.Errorf("another buyer with the used solution = %d %s, want 403 challenge_invalid", res.status, res.raw)
			}
			if res := buyWith(ctx, t, client, srv.url, 1001, v, sol.Header()); res.status != 403 || res.code != "challenge_invalid" {
				t.Errorf("the used solution again = %d %s, want 403 challenge_invalid", res.status, res.raw)
			}
			if res := buyWith(ctx, t, client, srv.url, 1001, plain, ""); res.status != 200 {
				t.Errorf("a buy of a voucher without a challenge = %d %s, want 200", res.status, res.raw)
			}
		})
	}
}
