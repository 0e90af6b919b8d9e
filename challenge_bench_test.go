package seckill_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// BenchmarkVerifySolution is the server's cost of checking one buy's
// solution, alone: parse the X-Altcha header, hash the salt and number
// once, the HMAC of the signature, read the claims. The work is the same
// whatever the maxnumber: the buyer searched, the server hashes once.
// The sale-level cost per verified solution is seckill bench
// --challenge's (docs/BENCHMARKS.md).
func BenchmarkVerifySolution(b *testing.B) {
	key := seckill.ChallengeKey([]byte("0123456789abcdef0123456789abcdef0123"))
	now := time.Now()
	ch, err := seckill.NewChallenge(key, seckill.ChallengeClaims{UserID: 1_000_001, VoucherID: 42, Expires: now.Add(time.Minute)}, 50_000, nil)
	if err != nil {
		b.Fatal(err)
	}
	sol, err := seckill.SolveChallenge(context.Background(), ch)
	if err != nil {
		b.Fatal(err)
	}
	header := sol.Header()
	b.ReportAllocs()
	for b.Loop() {
		s, err := seckill.ParseSolution(header)
		if err != nil {
			b.Fatal(err)
		}
		c, err := seckill.VerifySolution(key, s, now)
		if err != nil || c.UserID != 1_000_001 || c.VoucherID != 42 {
			b.Fatalf("claims %+v, %v", c, err)
		}
	}
}

// BenchmarkNewChallenge is the cost of issuing one: the salt and the
// number drawn from crypto/rand, one hash, one HMAC.
func BenchmarkNewChallenge(b *testing.B) {
	key := seckill.ChallengeKey([]byte("0123456789abcdef0123456789abcdef0123"))
	claims := seckill.ChallengeClaims{UserID: 1_000_001, VoucherID: 42, Expires: time.Now().Add(time.Minute)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := seckill.NewChallenge(key, claims, 50_000, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolveChallenge is a buyer's work at one maxnumber, in Go on
// one core: on average half the numbers are tried.
func BenchmarkSolveChallenge(b *testing.B) {
	key := seckill.ChallengeKey([]byte("0123456789abcdef0123456789abcdef0123"))
	claims := seckill.ChallengeClaims{UserID: 1_000_001, VoucherID: 42, Expires: time.Now().Add(time.Minute)}
	var hashes int64
	for b.Loop() {
		b.StopTimer()
		ch, err := seckill.NewChallenge(key, claims, 50_000, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		sol, err := seckill.SolveChallenge(context.Background(), ch)
		if err != nil {
			b.Fatal(err)
		}
		hashes += sol.Number + 1
	}
	b.ReportMetric(float64(hashes)/float64(b.N), "hashes/op")
}
