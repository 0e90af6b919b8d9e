package seckill_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redisledger"
)

// askedProvider starts each payment for the provider to confirm later, and
// keeps the orders it was asked to charge, as they were asked.
type askedProvider struct {
	mu    sync.Mutex
	asked []seckill.Order
}

func (*askedProvider) Name() string { return "asked" }

func (p *askedProvider) Charge(_ context.Context, o *seckill.Order) (seckill.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, *o)
	return seckill.Charge{Ref: "pay_" + strconv.FormatInt(o.ID, 10)}, nil
}

// TestVoucherMadeBeforePricesChargedAsBefore: a voucher made before prices
// (stored with no currency) has no price, not a price of 0. A payment its
// buyer started before the upgrade is not taken for free: pay asks the
// provider again, with no amount, and the provider's confirmation of what
// it took pays the order rather than being refused.
func TestVoucherMadeBeforePricesChargedAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vs, store, _ := services(t, "")
	before := onSale("made before prices", 1)
	before.InitialStock, before.PayWithin = 1, time.Hour
	if err := store.CreateVoucher(ctx, before); err != nil {
		t.Fatal(err)
	}
	o := &seckill.Order{ID: 70_000, UserID: 7001, VoucherID: before.ID, CreatedAt: time.Now()}
	if _, err := store.SaveOrders(ctx, []*seckill.Order{o}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.StartPayment(ctx, o.ID, time.Now()); err != nil { // by the version before prices
		t.Fatal(err)
	}
	provider := &askedProvider{}
	orders := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger},
		Store: store, Vouchers: vs, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	payments := &seckill.PaymentService{Store: store, Ledger: cacheOf(vs), Orders: orders, Vouchers: vs, Provider: provider, Logger: vs.Logger}

	res, err := payments.Pay(ctx, o.UserID, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Started || res.Order.Status != seckill.OrderCreated {
		t.Fatalf("pay of an order of a voucher made before prices = %s (started %v); want its payment started with the provider", res.Order.Status, res.Started)
	}
	if len(provider.asked) != 1 || provider.asked[0].Currency != "" || provider.asked[0].Amount != 0 {
		t.Fatalf("the provider was asked %+v; want one charge with no amount or currency", provider.asked)
	}
	took := int64(990)
	got, err := payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_before", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_70000", Amount: &took, Currency: "CNY"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != seckill.OrderPaid || got.PaymentRef != "pay_70000" || payments.Refused() != 0 {
		t.Errorf("the provider's confirmation = %s, ref %q, %d refused; want paid by pay_70000, none refused", got.Status, got.PaymentRef, payments.Refused())
	}
}
