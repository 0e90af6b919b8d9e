package storetest

import (
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

// sweepHistory is how many ended vouchers with a deadline BenchmarkSweep
// puts beside a new sale: a deployment's history.
const sweepHistory = 3000

// sweepSettled is how many settled orders each ended voucher holds in
// BenchmarkSweep's heaviest history: 600,000 in all beside a new sale.
const sweepSettled = 200

// BenchmarkSweep measures one [seckill.Sweeper.Sweep] while a new sale's
// order is not yet due, with and without sweepHistory ended vouchers with
// a deadline whose orders are all settled (one paid, the others cancelled
// and their units back on sale): what history adds to every sweep, with
// two orders per ended voucher and with sweepSettled, which a sweep must
// not read.
func BenchmarkSweep(b *testing.B, newDB NewDatabase) {
	for _, h := range []struct{ ended, each int }{{0, 0}, {sweepHistory, 2}, {sweepHistory, sweepSettled}} {
		b.Run(fmt.Sprintf("ended=%d/orders=%d", h.ended, h.each), func(b *testing.B) {
			st := newDB(b)(b)
			ctx := b.Context()
			if err := st.Migrate(ctx); err != nil {
				b.Fatalf("Migrate: %v", err)
			}
			settledVouchers(b, st, h.ended, h.each)
			v := deadlineVoucher(b, st, 10, false)
			save(b, st, order(1, v.ID))
			s := &seckill.Sweeper{Store: st, Logger: slog.New(slog.DiscardHandler)}
			for b.Loop() {
				c, r, err := s.Sweep(ctx)
				if err != nil || c != 0 || r != 0 {
					b.Fatalf("Sweep = %d cancelled, %d returned, %v; want none, no error", c, r, err)
				}
			}
		})
	}
}

// settledVouchers creates n ended vouchers with a deadline, each with each
// (at least 2) orders: one paid, the others cancelled (CancelDue, one call
// per voucher) with their units marked back in the cache.
func settledVouchers(tb testing.TB, st seckill.Store, n, each int) {
	tb.Helper()
	ctx := tb.Context()
	var (
		vs []*seckill.Voucher
		os []*seckill.Order
	)
	for range n {
		v := &seckill.Voucher{Title: "ended", Stock: int64(each), InitialStock: int64(each), BeginTime: base.Add(-2 * time.Hour),
			EndTime: base.Add(-time.Hour), PayWithin: payWithin}
		if err := st.CreateVoucher(ctx, v); err != nil {
			tb.Fatalf("CreateVoucher: %v", err)
		}
		vs = append(vs, v)
		os = append(os, orders(each, 1, v.ID)...)
	}
	for chunk := range slices.Chunk(os, 500) {
		save(tb, st, chunk...)
	}
	var cancelled []int64
	for i, v := range vs {
		if _, err := st.PayOrder(ctx, os[i*each].ID, seckill.Payment{Ref: "paid", At: base}); err != nil {
			tb.Fatalf("PayOrder: %v", err)
		}
		// Written at base (CreatedAt, later than now): all due after it.
		due, err := st.CancelDue(ctx, v.ID, base.Add(time.Second), base.Add(time.Second), base, each)
		if err != nil || len(due) != each-1 {
			tb.Fatalf("CancelDue = %d orders, %v; want %d", len(due), err, each-1)
		}
		for _, o := range due {
			cancelled = append(cancelled, o.ID)
		}
	}
	if err := st.MarkReturned(ctx, cancelled); err != nil {
		tb.Fatalf("MarkReturned: %v", err)
	}
}
