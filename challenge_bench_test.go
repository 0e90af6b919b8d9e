package seckill_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// BenchmarkNewChallenge is the cost of issuing one, beside
// BenchmarkVerifySolution's of checking one: the salt and the number
// drawn from crypto/rand, one hash, one HMAC.
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

// BenchmarkChallengeCheck is the server's whole check of a buy's solution,
// as the buy route runs it before the admission: the voucher's row from
// memory, the sold-out memory, the header's parse, the verification, and
// the spend, one SET NX in Redis (the test Redis). Each iteration spends a
// fresh solution, issued and solved outside the timer.
func BenchmarkChallengeCheck(b *testing.B) {
	vs, store, _ := services(b, "")
	ctx := context.Background()
	cs := &seckill.ChallengeService{Key: seckill.ChallengeKey([]byte("a token secret of thirty-two bytes or more")),
		Vouchers: vs, Answers: redisLedger(orderService(vs, store, 9000)), Spent: ledgerOf(vs).Cache.(seckill.ChallengeSpender), Logger: vs.Logger,
		Config: seckill.ChallengeConfig{MinNumber: 1000, MaxNumber: 1000}}
	v := onSale("check benchmark", 10)
	v.Challenge, v.ChallengeLead = true, time.Minute
	if _, err := vs.Create(ctx, v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ch, err := cs.Issue(ctx, 1_000_001, v.ID)
		if err != nil {
			b.Fatal(err)
		}
		sol, err := seckill.SolveChallenge(ctx, ch)
		if err != nil {
			b.Fatal(err)
		}
		header := sol.Header()
		b.StartTimer()
		if err := cs.Check(ctx, 1_000_001, v.ID, header); err != nil {
			b.Fatal(err)
		}
	}
}
