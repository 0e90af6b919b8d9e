package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"

	seckill "github.com/seckill/seckill"
)

// BenchmarkSaveOrders measures [seckill.Store.SaveOrders] of new orders of
// one voucher: batches of 1 and of 100 from one saver, and batches of 100
// from several savers at once, as the stream workers of several instances
// write them. Each reports orders/s besides the time per batch.
func BenchmarkSaveOrders(b *testing.B, newDB NewDatabase) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			st, v := benchStore(b, newDB)
			var user int64
			b.ReportAllocs()
			for b.Loop() {
				batch := orders(size, user+1, v.ID)
				user += int64(size)
				if _, err := st.SaveOrders(b.Context(), batch); err != nil {
					b.Fatalf("SaveOrders: %v", err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "orders/s")
		})
	}
	b.Run("batch=100/parallel", func(b *testing.B) {
		const size = 100
		st, v := benchStore(b, newDB)
		var users atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				batch := orders(size, users.Add(size)-size+1, v.ID)
				if _, err := saveRetrying(b.Context(), st, batch); err != nil {
					b.Errorf("SaveOrders: %v", err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "orders/s")
	})
}

// BenchmarkPlaceOrder measures [seckill.Store.PlaceOrder] of new buyers of
// one voucher, the sync mode's whole admission: from one caller, and from
// several at once, as requests of a sale arrive. Each reports orders/s.
func BenchmarkPlaceOrder(b *testing.B, newDB NewDatabase) {
	b.Run("serial", func(b *testing.B) {
		st, v := benchStore(b, newDB)
		var user int64
		b.ReportAllocs()
		for b.Loop() {
			user++
			if err := st.PlaceOrder(b.Context(), order(user, v.ID), open); err != nil {
				b.Fatalf("PlaceOrder: %v", err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	})
	b.Run("parallel", func(b *testing.B) {
		st, v := benchStore(b, newDB)
		var users atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := placeRetrying(b.Context(), st, order(users.Add(1), v.ID), open); err != nil {
					b.Errorf("PlaceOrder: %v", err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	})
}

// benchStore returns a migrated store with a voucher whose stock outlasts
// any benchmark.
func benchStore(b *testing.B, newDB NewDatabase) (seckill.Store, *seckill.Voucher) {
	b.Helper()
	st := newDB(b)(b)
	if err := st.Migrate(b.Context()); err != nil {
		b.Fatalf("Migrate: %v", err)
	}
	return st, newVoucher(b, st, 1<<50)
}
