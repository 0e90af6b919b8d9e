package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/seckill"
)

// Solves is what the buyers of a sale or a round solved: challenges got
// from GET /api/vouchers/{id}/challenge and solved in Go as a buyer's
// client does (seckill.SolveChallenge), before each buy.
type Solves struct {
	// Solved is how many challenges were solved, one per buy sent.
	Solved int64 `json:"solved"`
	// Mean, P50, P99 and Max are the wall time of a solve on this
	// machine, where every simulated buyer shares the bench's cores: the
	// time a buyer waits, not the work a phone does.
	Mean time.Duration `json:"solveMeanNs"`
	P50  time.Duration `json:"solveP50Ns"`
	P99  time.Duration `json:"solveP99Ns"`
	Max  time.Duration `json:"solveMaxNs"`
	// HashesMean, HashesP99 and HashesMax are the numbers tried per solve
	// (the solution's number + 1): the work itself, whatever the device.
	HashesMean float64 `json:"hashesMean"`
	HashesP99  int64   `json:"hashesP99"`
	HashesMax  int64   `json:"hashesMax"`
	// FetchP50 and FetchP99 are the latencies of the GET of a challenge.
	FetchP50 time.Duration `json:"fetchP50Ns"`
	FetchP99 time.Duration `json:"fetchP99Ns"`
	// MaxNumbers counts the challenges by the maxnumber the server asked
	// for: more than one value when the difficulty rose with the load.
	MaxNumbers map[int64]int64 `json:"maxNumbers"`
}

// solver collects the solves of a sale or a round. A solve takes
// milliseconds: a lock per solve costs nothing beside it, and keeps every
// value for exact quantiles.
type solver struct {
	mu         sync.Mutex
	fetch      []time.Duration
	solve      []time.Duration
	hashes     []int64
	maxNumbers map[int64]int64
}

func (s *solver) add(fetch, solve time.Duration, number, maxNumber int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetch = append(s.fetch, fetch)
	s.solve = append(s.solve, solve)
	s.hashes = append(s.hashes, number+1)
	if s.maxNumbers == nil {
		s.maxNumbers = map[int64]int64{}
	}
	s.maxNumbers[maxNumber]++
}

// stats summarizes the solves; nil when there were none.
func (s *solver) stats() *Solves {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.solve) == 0 {
		return nil
	}
	solve, fetch, hashes := slices.Clone(s.solve), slices.Clone(s.fetch), slices.Clone(s.hashes)
	slices.Sort(solve)
	slices.Sort(fetch)
	slices.Sort(hashes)
	var sum time.Duration
	var work int64
	for i := range solve {
		sum += solve[i]
		work += hashes[i]
	}
	n := len(solve)
	return &Solves{
		Solved: int64(n),
		Mean:   sum / time.Duration(n), P50: rank(solve, 0.5), P99: rank(solve, 0.99), Max: solve[n-1],
		HashesMean: float64(work) / float64(n), HashesP99: rank(hashes, 0.99), HashesMax: hashes[n-1],
		FetchP50: rank(fetch, 0.5), FetchP99: rank(fetch, 0.99),
		MaxNumbers: maps.Clone(s.maxNumbers),
	}
}

// rank returns the value below which a fraction q of sorted lies.
func rank[T any](sorted []T, q float64) T {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// challengeCodes are the buy's answers that refuse its challenge, and
// the bench's own failure to solve one: with a fresh solution of the
// buyer's own in every buy, each is a fault, counted against the books.
var challengeCodes = []string{"challenge_required", "challenge_invalid", unsolvable}

// unsolvable is the answer key of a challenge the bench could not solve.
const unsolvable = "unsolvable_challenge"

// challengeAnswer is the key of an answer of the challenge route other
// than a challenge: the buy is not sent.
func challengeAnswer(code string) string { return "challenge:" + code }

// solve gets a challenge for the voucher with the buyer's token and solves
// it, as the buyer's page does before a buy: it returns the X-Altcha
// header, or, with no header, the answer key of what the challenge route
// said instead.
func (r *run) solve(ctx context.Context, s *solver, voucherID int64, token string) (header, key string, err error) {
	start := time.Now()
	var a struct {
		seckill.Challenge
		Code string `json:"code"`
	}
	path := "/api/vouchers/" + strconv.FormatInt(voucherID, 10) + "/challenge"
	rep, err := r.send(ctx, r.client, "", "GET", path, token, nil, &a)
	if err != nil {
		return "", "", err
	}
	if rep.status != http.StatusOK {
		code := a.Code
		if code == "" {
			code = strconv.Itoa(rep.status)
		}
		return "", challengeAnswer(code), nil
	}
	fetched := time.Now()
	sol, err := seckill.SolveChallenge(ctx, a.Challenge)
	if err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return "", unsolvable, nil
	}
	s.add(fetched.Sub(start), time.Since(fetched), sol.Number, a.MaxNumber)
	return sol.Header(), "", nil
}

// probeChallenge checks, before the sale, that the server issues
// challenges for the voucher: a server without them would refuse every
// buy, and the run would measure nothing.
func (r *run) probeChallenge(ctx context.Context, voucherID int64) error {
	var a struct {
		seckill.Challenge
		Code string `json:"code"`
	}
	path := "/api/vouchers/" + strconv.FormatInt(voucherID, 10) + "/challenge"
	status, err := r.request(ctx, "GET", path, r.tokens[0], nil, &a)
	if err != nil || status != http.StatusOK || a.Algorithm != seckill.ChallengeAlgorithm {
		return fmt.Errorf("bench: the server issues no challenge for voucher %d (GET %s answered %d %q, %v): does it run a version with challenges?", voucherID, path, status, a.Code, err)
	}
	return nil
}
