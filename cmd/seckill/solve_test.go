package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// TestSolve: seckill solve gets the buyer's challenge with the buyer's
// token and prints a header that the server's key verifies, bound to that
// buyer and voucher; a refusal is the command's error, with the server's
// answer.
func TestSolve(t *testing.T) {
	t.Parallel()
	key := seckill.ChallengeKey([]byte("a token secret of thirty-two bytes or more"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer buyer-42":
			http.Error(w, `{"code":"unauthorized"}`, http.StatusUnauthorized)
		case r.URL.Path == "/api/vouchers/3/challenge":
			ch, err := seckill.NewChallenge(key, seckill.ChallengeClaims{UserID: 42, VoucherID: 3, Expires: time.Now().Add(time.Minute)}, 20_000, nil)
			if err != nil {
				t.Error(err)
			}
			writeTestJSON(w, ch)
		default:
			http.Error(w, `{"code":"challenge_not_needed"}`, http.StatusConflict)
		}
	}))
	defer srv.Close()

	code, out, errOut := runCmd(environ{}, "solve", "--url", srv.URL, "--voucher", "3", "--token", "buyer-42")
	if code != 0 {
		t.Fatalf("solve = %d, stderr %q", code, errOut)
	}
	sol, err := seckill.ParseSolution(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("the printed header %q: %v", out, err)
	}
	claims, err := seckill.VerifySolution(key, sol, time.Now())
	if err != nil || claims.UserID != 42 || claims.VoucherID != 3 {
		t.Errorf("the printed solution verifies as %+v, %v; want buyer 42, voucher 3", claims, err)
	}
	if !strings.Contains(errOut, "solved in") {
		t.Errorf("stderr %q does not say how long the solve took", errOut)
	}

	code, _, errOut = runCmd(environ{}, "solve", "--url", srv.URL, "--voucher", "4", "--token", "buyer-42")
	if code != 1 || !strings.Contains(errOut, "challenge_not_needed") {
		t.Errorf("solve of a voucher without a challenge = %d, stderr %q; want 1 with the server's answer", code, errOut)
	}
	if code, _, _ := runCmd(environ{}, "solve", "--url", srv.URL, "--voucher", "3"); code != 2 {
		t.Errorf("solve without a token = %d, want 2", code)
	}
}

func writeTestJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		panic(err)
	}
}
