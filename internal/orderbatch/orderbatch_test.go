package orderbatch

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	stored := []Key{{ID: 1, UserID: 10, VoucherID: 100, Holds: true}, {ID: 2, UserID: 20, VoucherID: 100, Holds: true},
		{ID: 7, UserID: 70, VoucherID: 100}} // cancelled, its buyer free to buy again
	orders := []*seckill.Order{
		{ID: 1, UserID: 10, VoucherID: 100}, // redelivery
		{ID: 2, UserID: 99, VoucherID: 100}, // id of another buyer
		{ID: 3, UserID: 20, VoucherID: 100}, // buyer has order 2
		{ID: 4, UserID: 20, VoucherID: 200}, // same buyer, other voucher: new
		{ID: 5, UserID: 30, VoucherID: 100}, // new
		{ID: 5, UserID: 30, VoucherID: 100}, // the one before, again in the batch
		{ID: 6, UserID: 30, VoucherID: 100}, // buyer of order 5, earlier in the batch
		{ID: 4, UserID: 40, VoucherID: 200}, // id of order 4, earlier in the batch
		{ID: 7, UserID: 70, VoucherID: 100}, // redelivery of a cancelled order
		{ID: 8, UserID: 70, VoucherID: 100}, // its buyer's next order: new
	}
	outcomes, inserts := Classify(orders, stored)
	want := []seckill.SaveOutcome{
		seckill.AlreadySaved, seckill.IDConflict, seckill.BuyerConflict, seckill.Saved,
		seckill.Saved, seckill.AlreadySaved, seckill.BuyerConflict, seckill.IDConflict,
		seckill.AlreadySaved, seckill.Saved,
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*seckill.Order{orders[3], orders[4], orders[9]}, inserts); diff != "" {
		t.Errorf("inserts (-want +got):\n%s", diff)
	}
}

func TestTakes(t *testing.T) {
	t.Parallel()
	orders := []*seckill.Order{{VoucherID: 7}, {VoucherID: 3}, {VoucherID: 7}, {VoucherID: 5}, {VoucherID: 7}}
	want := []Take{{3, 1}, {5, 1}, {7, 3}}
	if diff := cmp.Diff(want, Takes(orders)); diff != "" {
		t.Errorf("Takes (-want +got):\n%s", diff)
	}
	if got := Takes(nil); len(got) != 0 {
		t.Errorf("Takes(nil) = %v", got)
	}
}
