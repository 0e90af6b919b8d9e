package auth

import (
	"sync/atomic"
	"testing"
	"time"
)

// benchTokens mints the tokens of n buyers, from user first+1 on.
func benchTokens(b *testing.B, tk *Tokens, first, n int) []string {
	b.Helper()
	out := make([]string, n)
	for i := range out {
		s, err := tk.Mint(Identity{UserID: int64(first + i + 1)}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = s
	}
	return out
}

// BenchmarkVerify measures the check of a buyer's token on every buy:
// "first" is a token this process has not seen (each buyer's first
// click), "repeat" one it verified before (every click after), and
// "repeat-parallel" that on all cores at once.
func BenchmarkVerify(b *testing.B) {
	b.Run("first", func(b *testing.B) {
		// Batches of tokens, each verified by a fresh verifier; a batch
		// is minted with the timer stopped, the first before the loop
		// whatever b.N (so that instruction counts of two b.N differ by
		// the verifications alone).
		const batch = 8192
		var tk *Tokens
		var tokens []string
		fresh := func(i int) {
			var err error
			if tk, err = NewTokens(testSecret); err != nil {
				b.Fatal(err)
			}
			tokens = benchTokens(b, tk, i, batch)
		}
		fresh(0)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%batch == 0 && i > 0 {
				b.StopTimer()
				fresh(i)
				b.StartTimer()
			}
			if _, err := tk.Verify(tokens[i%batch]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("repeat", func(b *testing.B) {
		tk, err := NewTokens(testSecret)
		if err != nil {
			b.Fatal(err)
		}
		tokens := benchTokens(b, tk, 0, 4096)
		for _, s := range tokens {
			if _, err := tk.Verify(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := tk.Verify(tokens[i%len(tokens)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("repeat-parallel", func(b *testing.B) {
		tk, err := NewTokens(testSecret)
		if err != nil {
			b.Fatal(err)
		}
		tokens := benchTokens(b, tk, 0, 4096)
		for _, s := range tokens {
			if _, err := tk.Verify(s); err != nil {
				b.Fatal(err)
			}
		}
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1) * 7919)
			for pb.Next() {
				i++
				if _, err := tk.Verify(tokens[i%len(tokens)]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkVerifyRejected measures a forged token: a valid one with its
// signature's last character changed, never cached.
func BenchmarkVerifyRejected(b *testing.B) {
	tk, err := NewTokens(testSecret)
	if err != nil {
		b.Fatal(err)
	}
	s := benchTokens(b, tk, 0, 1)[0]
	// A character in the middle of the signature, changed.
	i := len(s) - 20
	c := byte('A')
	if s[i] == c {
		c = 'B'
	}
	forged := s[:i] + string(c) + s[i+1:]
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := tk.Verify(forged); err == nil {
			b.Fatal("a forged token verified")
		}
	}
}
