package redis

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill"
)

// BenchmarkBuyerSlot measures the read of a buyer's slot that answered a
// sold-out voucher's buyers before their copies (one HGET), from many
// goroutines: winners and others alike (soldout's
// BenchmarkSoldOutBuyerOrder is the same answered from a copy).
func BenchmarkBuyerSlot(b *testing.B) {
	c := benchClient(b)
	benchSlotReads(b, c, c.BuyerOrder, nil)
}

// benchSlotReads sells voucher 1 out to 1,000 buyers, runs warm (if not
// nil), then times read on them and on as many others, from 16 goroutines
// per core, checking each answer.
func benchSlotReads(b *testing.B, c *Client, read func(ctx context.Context, userID, voucherID int64) (int64, error), warm func()) {
	ctx := context.Background()
	if _, err := c.LoadVoucher(ctx, onSale(1, 1000)); err != nil {
		b.Fatal(err)
	}
	for u := int64(1); u <= 1000; u++ {
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: u}); err != nil {
			b.Fatal(err)
		}
	}
	if warm != nil {
		warm()
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := next.Add(1) % 2000
			id, err := read(ctx, u+1, 1)
			if err != nil || (u < 1000) != (id == u+1) {
				b.Errorf("buyer %d: %d, %v", u+1, id, err)
				return
			}
		}
	})
}
