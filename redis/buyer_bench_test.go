package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// BenchmarkBuyerSlot measures the read of a buyer's slot that answers a
// sold-out voucher's buyers (one HGET), from many goroutines: winners and
// others alike.
func BenchmarkBuyerSlot(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	if _, err := c.LoadVoucher(ctx, onSale(1, 1000)); err != nil {
		b.Fatal(err)
	}
	for u := int64(1); u <= 1000; u++ {
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: u}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := next.Add(1) % 2000
			id, err := c.BuyerOrder(ctx, u+1, 1)
			if err != nil || (u < 1000) != (id == u+1) {
				b.Errorf("buyer %d: %d, %v", u+1, id, err)
				return
			}
		}
	})
}

// BenchmarkSoldOutBuyerOrder is BenchmarkBuyerSlot answered as a sold-out
// voucher's buyers are since issue 12: from the instance's copy.
func BenchmarkSoldOutBuyerOrder(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	if _, err := c.LoadVoucher(ctx, onSale(1, 1000)); err != nil {
		b.Fatal(err)
	}
	for u := int64(1); u <= 1000; u++ {
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: u}); err != nil {
			b.Fatal(err)
		}
	}
	for !c.copied(1) {
		if _, err := c.SoldOutBuyerOrder(ctx, 1, 1); err != nil {
			b.Fatal(err)
		}
		time.Sleep(copyPoll)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := next.Add(1) % 2000
			id, err := c.SoldOutBuyerOrder(ctx, u+1, 1)
			if err != nil || (u < 1000) != (id == u+1) {
				b.Errorf("buyer %d: %d, %v", u+1, id, err)
				return
			}
		}
	})
}
