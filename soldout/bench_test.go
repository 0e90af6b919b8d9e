package soldout_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/soldout"
)

// BenchmarkSoldOutBuyerOrder is redis' BenchmarkBuyerSlot answered as a
// sold-out voucher's buyers are: from the instance's copy. It sells
// voucher 1 out to 1,000 buyers, waits for the copy, then times the
// answers to them and to as many others, from 16 goroutines per core,
// checking each.
func BenchmarkSoldOutBuyerOrder(b *testing.B) {
	ctx := context.Background()
	c, err := redis.Open(ctx, redis.Config{URL: testenv.RedisURL(b), Prefix: testenv.RedisPrefix(b)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	arm(b, c)
	s := soldout.New(c, soldout.Config{}, nil)
	b.Cleanup(s.Close)
	if _, err := c.LoadVoucher(ctx, onSale(1, 1000)); err != nil {
		b.Fatal(err)
	}
	for u := int64(1); u <= 1000; u++ {
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: u}); err != nil {
			b.Fatal(err)
		}
	}
	for !s.Copied(1) {
		if _, err := s.SoldOutBuyerOrder(ctx, 1, 1); err != nil {
			b.Fatal(err)
		}
		time.Sleep(soldout.Poll)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := next.Add(1) % 2000
			id, err := s.SoldOutBuyerOrder(ctx, u+1, 1)
			if err != nil || (u < 1000) != (id == u+1) {
				b.Errorf("buyer %d: %d, %v", u+1, id, err)
				return
			}
		}
	})
}
