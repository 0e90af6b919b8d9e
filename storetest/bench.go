package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"

	seckill "github.com/seckill/seckill"
)

// saveBatchSizes are the batch sizes BenchmarkSaveOrders compares: one
// order at a time, then 100 to 2,000, around the stream workers' default
// (worker.DefaultBatchSize).
var saveBatchSizes = []int{1, 100, 250, 500, 1000, 2000}

// BenchmarkSaveOrders measures [seckill.Store.SaveOrders] of new orders of
// one voucher, in batches of each of saveBatchSizes: from one saver, and
// (but for batches of one) from several savers at once, as the stream
// workers of one or more instances write a voucher's backlog. Each reports
// orders/s besides the time per batch.
func BenchmarkSaveOrders(b *testing.B, newDB NewDatabase) {
	for _, size := range saveBatchSizes {
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
	for _, size := range saveBatchSizes[1:] {
		b.Run(fmt.Sprintf("batch=%d/parallel", size), func(b *testing.B) {
			st, v := benchStore(b, newDB)
			var users atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := int64(size)
					batch := orders(size, users.Add(n)-n+1, v.ID)
					if _, err := saveRetrying(b.Context(), st, batch); err != nil {
						b.Errorf("SaveOrders: %v", err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "orders/s")
		})
	}
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
