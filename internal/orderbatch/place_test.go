package orderbatch

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seckill/seckill"
)

func TestRefusal(t *testing.T) {
	t.Parallel()
	begin := time.Date(2031, 3, 14, 15, 0, 0, 0, time.UTC)
	end := begin.Add(time.Hour)
	open := Sale{VoucherID: 42, Begin: begin, End: end, Stock: 3}
	with := func(f func(*Sale)) Sale {
		s := open
		f(&s)
		return s
	}
	ordered := func(s *Sale) { s.Ordered, s.OrderID = true, 7 }
	empty := func(s *Sale) { s.Stock = 0 }
	notStarted := seckill.Errorf(seckill.ErrNotStarted, "the sale of voucher 42 has not started")
	ended := seckill.Errorf(seckill.ErrEnded, "the sale of voucher 42 has ended")
	soldOut := seckill.Errorf(seckill.ErrSoldOut, "voucher 42 is sold out")
	duplicate := &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: 7}
	for _, tc := range []struct {
		name string
		sale Sale
		now  time.Time
		want *seckill.Error
	}{
		{"open", open, begin.Add(time.Minute), nil},
		{"at the begin", open, begin, nil},
		// Within the microsecond of the begin: the stores keep no finer.
		{"in the microsecond before the begin", open, begin.Add(-time.Microsecond + time.Nanosecond), notStarted},
		{"in the begin's microsecond", open, begin.Add(999 * time.Nanosecond), nil},
		{"before", open, begin.Add(-time.Microsecond), notStarted},
		{"in the last microsecond", open, end.Add(-time.Nanosecond), nil},
		{"at the end", open, end, ended},
		{"after", open, end.Add(time.Hour), ended},
		{"sold out", with(empty), begin, soldOut},
		{"sold out after the end", with(empty), end, ended},
		{"negative stock", with(func(s *Sale) { s.Stock = -1 }), begin, soldOut},
		{"ordered", with(ordered), begin, duplicate},
		{"ordered, sold out", with(func(s *Sale) { ordered(s); empty(s) }), begin, duplicate},
		{"ordered, after the end", with(ordered), end, duplicate},
		{"ordered, order id 0", with(func(s *Sale) { s.Ordered = true }), begin, &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: duplicate.Message}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Refusal(tc.sale, tc.now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Refusal = %v; want nil", err)
				}
				return
			}
			var got *seckill.Error
			if !errors.As(err, &got) {
				t.Fatalf("Refusal = %v; want %v", err, tc.want)
			}
			if diff := cmp.Diff(*tc.want, *got, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("Refusal (-want +got):\n%s", diff)
			}
		})
	}
}
