package seckill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redisledger"
)

// TestLostAnswerOtherOrder: an admission whose answer was lost, for a
// buyer whose slot holds another order, is that order: the script refused
// it, if it ran. A buy and a dead letter's retry settle it alike.
func TestLostAnswerOtherOrder(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(5)
	b.deadLetter(v.ID, 1, 101, "r")
	b.admit(v.ID, 1, 202) // the buyer bought again since

	lost := *b.svc
	lost.Cache = &lostAdmit{Client: b.cache}
	lost.Admitter = admitter(b.vouchers, lost.Cache.(*lostAdmit))
	_, err := lost.RetryDeadLetter(ctx, "101", 1)
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != 202 {
		t.Errorf("retry with the answer lost = %v; want ErrDuplicateOrder with order 202", err)
	}
	if _, ok := b.list()["101"]; !ok {
		t.Error("the refused retry removed its dead letter")
	}

	buy := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: &lostAdmit{Client: b.cache}, SoldOut: soldOutReader(t, b.vouchers), Vouchers: b.vouchers, Fence: ledgerOf(b.vouchers).Fence, Logger: b.vouchers.Logger}, Store: b.store, Vouchers: b.vouchers, IDs: &counter{n: 300}, Logger: b.svc.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	if _, err := buy.Buy(ctx, 1, v.ID); !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != 202 {
		t.Errorf("buy with the answer lost = %v; want ErrDuplicateOrder with order 202", err)
	}
	if got := b.slot(v.ID, 1); got != 202 {
		t.Errorf("buyer 1 holds %d, want 202", got)
	}
}
