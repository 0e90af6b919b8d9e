package http

import (
	"net/http"
	"testing"

	"github.com/seckill/seckill"
)

// BenchmarkWriteError measures the error answers of a buy: sold_out is
// most of a flash sale's answers, duplicate_order a winner asking again.
func BenchmarkWriteError(b *testing.B) {
	for _, bc := range []struct {
		name string
		err  error
	}{
		{"sold_out", seckill.Errorf(seckill.ErrSoldOut, "voucher %d is sold out", 7)},
		{"duplicate_order", &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: 1 << 60}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for range b.N {
				clear(w.h)
				writeError(w, bc.err)
			}
		})
	}
}
