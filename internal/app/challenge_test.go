package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// TestChallengeHammerLeavesOthersDifficulty: one buyer asking for a
// voucher's challenge as fast as 8 connections go (2,000 requests, through
// the server's handler) does not change the maxnumber another buyer is
// given, with the route's per-buyer limit and without it; more distinct
// buyers than the rate do raise it. The test steps the difficulty itself
// (its worker stopped), once the requests are in: every one of them
// counted in one window, the worst case.
func TestChallengeHammerLeavesOthersDifficulty(t *testing.T) {
	t.Parallel()
	for _, limit := range []float64{5, 0} {
		t.Run(fmt.Sprintf("limit %v", limit), func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			cfg := b.config(t, seckill.ModeStream)
			cfg.Challenge = seckill.ChallengeConfig{MinNumber: 1000, MaxNumber: 64_000, Rate: 20}
			cfg.HTTP.ChallengeRateUser, cfg.HTTP.ChallengeRateUserBurst = limit, 10
			a, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.Challenges.Stop()
			step := func() { a.Challenges.Difficulty.Step(cfg.Challenge, nil) }
			srv := httptest.NewServer(a.Handler())
			defer srv.Close()

			admin := mint(t, cfg.Tokens, auth.Identity{UserID: 1, Admin: true})
			now := time.Now().UTC()
			var v struct{ ID string }
			call(t, a, http.MethodPost, "/api/admin/vouchers", admin, map[string]any{"title": "hammered", "stock": 10,
				"challenge": true, "beginTime": now.Add(-time.Minute), "endTime": now.Add(time.Hour)}, http.StatusCreated, &v)
			path := "/api/vouchers/" + v.ID + "/challenge"
			maxNumber := func(user int64) int64 {
				t.Helper()
				var ch seckill.Challenge
				call(t, a, http.MethodGet, path, mint(t, cfg.Tokens, auth.Identity{UserID: user}), nil, http.StatusOK, &ch)
				return ch.MaxNumber
			}
			const other = 2
			quiet := maxNumber(other)
			step()
			if got := maxNumber(other); got != quiet {
				t.Fatalf("maxnumber with no one else asking: %d, then %d", quiet, got)
			}

			hammer := mint(t, cfg.Tokens, auth.Identity{UserID: 3})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			defer client.CloseIdleConnections()
			var ok, limited, othersN atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 250 {
						req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
						if err != nil {
							t.Error(err)
							return
						}
						req.Header.Set("Authorization", "Bearer "+hammer)
						res, err := client.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
						switch res.StatusCode {
						case http.StatusOK:
							ok.Add(1)
						case http.StatusTooManyRequests:
							limited.Add(1)
						default:
							othersN.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("the hammer's 2,000 requests: %d answered 200, %d 429, %d else", ok.Load(), limited.Load(), othersN.Load())
			if othersN.Load() != 0 || (limit > 0 && limited.Load() == 0) || (limit == 0 && ok.Load() != 2000) {
				t.Errorf("the hammer's answers: %d 200, %d 429, %d else; want 429s past the limit (%v), 200 without",
					ok.Load(), limited.Load(), othersN.Load(), limit)
			}
			step()
			if got := maxNumber(other); got != quiet {
				t.Errorf("another buyer's maxnumber after one buyer's 2,000 requests: %d, want %d as with no hammering", got, quiet)
			}

			// The crowd the rate is for: 21 buyers, once each, raise it.
			for user := range int64(cfg.Challenge.Rate) + 1 {
				maxNumber(100 + user)
			}
			step()
			if got := maxNumber(other); got != 2*quiet {
				t.Errorf("maxnumber after 21 buyers in a window, the rate 20: %d, want %d", got, 2*quiet)
			}
		})
	}
}
