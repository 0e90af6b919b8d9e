package seckill_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/redisledger"
)

// firstOrder returns l's first order, by id.
func (l *lifecycle) firstOrder() *seckill.Order {
	var first *seckill.Order
	for _, o := range l.orders {
		if first == nil || o.ID < first.ID {
			first = o
		}
	}
	return first
}

// TestPayAsksForTheAmount: an order owes its voucher's price, in its
// currency, as it is read, and pay asks the provider for that.
func TestPayAsksForTheAmount(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 1250)
	charges := &payment.FakeCharges{}
	l.payments.Provider = payment.Fake{Charges: charges}
	o := l.firstOrder()
	got, err := l.payments.Orders.Order(t.Context(), o.UserID, o.ID)
	if err != nil || got.Amount != 1250 || got.Currency != "CNY" {
		t.Fatalf("Order = %+v, %v; want it to owe 1250 CNY", got, err)
	}
	res, err := l.payments.Pay(t.Context(), o.UserID, o.ID)
	if err != nil || res.Order.Status != seckill.OrderPaid {
		t.Fatalf("Pay = %+v, %v; want paid", res, err)
	}
	want := []payment.FakeCharge{{OrderID: o.ID, Amount: 1250, Currency: "CNY"}}
	if got := charges.List(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("the provider was asked for %+v; want %+v", got, want)
	}
}

// failingProvider fails the test if asked to charge.
type failingProvider struct{ t *testing.T }

func (failingProvider) Name() string { return "failing" }

func (p failingProvider) Charge(_ context.Context, o *seckill.Order) (seckill.Charge, error) {
	p.t.Errorf("the provider was asked to charge order %d, which owes %d", o.ID, o.Amount)
	return seckill.Charge{}, seckill.Errorf(seckill.ErrUnavailable, "no")
}

// TestPayFreeOrderWithoutProvider: a free voucher's order is paid at once
// when its buyer pays, and the provider is not asked; paying it again
// answers it as it is.
func TestPayFreeOrderWithoutProvider(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 0)
	l.payments.Provider = failingProvider{t}
	o := l.firstOrder()
	for range 2 {
		res, err := l.payments.Pay(t.Context(), o.UserID, o.ID)
		if err != nil {
			t.Fatalf("Pay: %v", err)
		}
		if res.Started || res.Order.Status != seckill.OrderPaid || res.Order.PaymentRef != "free_"+strconv.FormatInt(o.ID, 10) || res.Order.Amount != 0 {
			t.Fatalf("Pay = %+v (order %+v); want paid now, free", res, res.Order)
		}
	}
}

// TestConfirmRefusesAnotherAmount: a payment event that took another
// amount or currency than its order owes, or does not say, is refused: the
// order is not paid, the event is recorded once and counted once (a
// replay neither), and the order is answered as it stands. The right
// event then pays it.
func TestConfirmRefusesAnotherAmount(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 1250)
	ctx := t.Context()
	l.payments.Provider = laterProvider{}
	o := l.firstOrder()
	for _, tc := range []struct {
		ev     seckill.PaymentEvent
		reason string
	}{
		{seckill.PaymentEvent{ID: "evt_less", Amount: took(1000), Currency: "CNY"}, seckill.RefusedAmount},
		{seckill.PaymentEvent{ID: "evt_less", Amount: took(1000), Currency: "CNY"}, seckill.RefusedAmount}, // a replay
		{seckill.PaymentEvent{ID: "evt_more", Amount: took(1251), Currency: "CNY"}, seckill.RefusedAmount},
		{seckill.PaymentEvent{ID: "evt_usd", Amount: took(1250), Currency: "USD"}, seckill.RefusedCurrency},
		{seckill.PaymentEvent{ID: "evt_unsaid"}, seckill.RefusedUnsaid},
		{seckill.PaymentEvent{ID: "evt_no_currency", Amount: took(1250)}, seckill.RefusedUnsaid},
	} {
		ev := tc.ev
		ev.Type, ev.OrderID, ev.Ref = seckill.PaymentSucceeded, o.ID, "pay_"+ev.ID
		got, err := l.payments.Confirm(ctx, ev)
		if err != nil || got.Status != seckill.OrderCreated {
			t.Fatalf("Confirm(%s) = %+v, %v; want the order as it stands, created", ev.ID, got, err)
		}
		if st, err := l.store.Order(ctx, o.ID); err != nil || st.Status != seckill.OrderCreated || st.PaymentRef != "" {
			t.Fatalf("the order after %s = %+v, %v; want it unpaid", ev.ID, st, err)
		}
	}
	if n := l.payments.Refused(); n != 5 {
		t.Errorf("Refused() = %d; want 5 (the replay not counted)", n)
	}
	refused, err := l.payments.RefusedPayments(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, r := range refused {
		reasons[r.EventID] = r.Reason
		if r.OrderID != o.ID || r.ExpectedAmount != 1250 || r.ExpectedCurrency != "CNY" || r.Ref != "pay_"+r.EventID {
			t.Errorf("refused %+v; want order %d expecting 1250 CNY", r, o.ID)
		}
	}
	want := map[string]string{"evt_less": seckill.RefusedAmount, "evt_more": seckill.RefusedAmount, "evt_usd": seckill.RefusedCurrency,
		"evt_unsaid": seckill.RefusedUnsaid, "evt_no_currency": seckill.RefusedUnsaid}
	if len(reasons) != len(want) {
		t.Errorf("refused events %v; want %v", reasons, want)
	}
	for id, r := range want {
		if reasons[id] != r {
			t.Errorf("event %s refused for %q; want %q", id, reasons[id], r)
		}
	}

	paid, err := l.payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_right", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_right",
		Amount: took(1250), Currency: "CNY", At: time.Now()})
	if err != nil || paid.Status != seckill.OrderPaid || paid.PaymentRef != "pay_right" {
		t.Fatalf("Confirm(the right amount) = %+v, %v; want paid", paid, err)
	}
}

// TestPendingOrderShowsThePrice: an order admitted but not yet written
// shows its voucher's price and currency, what it owes once written.
func TestPendingOrderShowsThePrice(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	in := onSale("pending, priced", 10)
	in.Price, in.Currency, in.PayWithin = 1200, "JPY", time.Minute
	v, err := vs.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger},
		Store: store, Vouchers: vs, IDs: &counter{n: 900}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	const user = 8
	o, err := s.Buy(ctx, user, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Order(ctx, user, o.ID)
	if err != nil || got.Status != seckill.OrderPending || got.Amount != 1200 || got.Currency != "JPY" {
		t.Fatalf("Order = %+v, %v; want pending, owing 1200 JPY", got, err)
	}
	list, err := s.Orders(ctx, user, 10)
	if err != nil || len(list) != 1 || list[0].Amount != 1200 || list[0].Currency != "JPY" {
		t.Fatalf("Orders = %v, %v; want the pending order owing 1200 JPY", list, err)
	}
}

// noPriceRows reads orders as an instance of a version before prices
// wrote them: owing 0, in no currency.
type noPriceRows struct{ seckill.Store }

func (s noPriceRows) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	o, err := s.Store.Order(ctx, id)
	if o != nil {
		o.Amount, o.Currency = 0, ""
	}
	return o, err
}

// TestOrderWrittenWithoutPriceOwesTheVouchers: an order of a priced
// voucher written with no price (by an instance of a version before
// prices, in a rolling upgrade) owes its voucher's price: an event that
// took nothing is refused, and one that took the price pays it.
func TestOrderWrittenWithoutPriceOwesTheVouchers(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 1250)
	l.payments.Store = noPriceRows{l.store}
	l.payments.Provider = laterProvider{}
	o := l.firstOrder()
	got, err := l.payments.Confirm(t.Context(), seckill.PaymentEvent{ID: "evt_nothing", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_0",
		Amount: took(0), Currency: "CNY"})
	if err != nil || got.Status != seckill.OrderCreated {
		t.Fatalf("Confirm(0 CNY) = %+v, %v; want refused, the order created", got, err)
	}
	got, err = l.payments.Confirm(t.Context(), seckill.PaymentEvent{ID: "evt_price", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_1",
		Amount: took(1250), Currency: "CNY"})
	if err != nil || got.Status != seckill.OrderPaid {
		t.Fatalf("Confirm(1250 CNY) = %+v, %v; want paid", got, err)
	}
}

// TestRefusedEventIDNeverPays: an event id refused for its amount stays
// refused when it comes again with the right one: the order is not paid
// by it, and nothing more is recorded nor counted. The id is what the
// provider sends again, so another body under it is not a new event.
func TestRefusedEventIDNeverPays(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 1250)
	l.payments.Provider = laterProvider{}
	o := l.firstOrder()
	ctx := t.Context()
	ev := seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_1", Amount: took(1000), Currency: "CNY"}
	if got, err := l.payments.Confirm(ctx, ev); err != nil || got.Status != seckill.OrderCreated {
		t.Fatalf("Confirm(1000 CNY) = %+v, %v; want refused, the order created", got, err)
	}
	ev.Amount = took(1250)
	if got, err := l.payments.Confirm(ctx, ev); err != nil || got.Status != seckill.OrderCreated {
		t.Errorf("Confirm(evt_1 again, 1250 CNY) = %+v, %v; want it still refused, the order created", got, err)
	}
	if st, err := l.store.Order(ctx, o.ID); err != nil || st.Status != seckill.OrderCreated || st.PaymentRef != "" {
		t.Errorf("the order after evt_1 came twice = %+v, %v; want it unpaid", st, err)
	}
	rs, err := l.payments.RefusedPayments(ctx, 10)
	if err != nil || len(rs) != 1 || *rs[0].ReceivedAmount != 1000 || l.payments.Refused() != 1 {
		t.Errorf("refused %v, %v, counted %d; want evt_1 once, as it first came (1000)", rs, err, l.payments.Refused())
	}
}

// TestPaidEventReplayNotRefused: an event that paid its order, replayed
// with other data (no amount, another amount), is a replay: answered with
// the order as it stands, paid by it, and neither refused nor counted.
func TestPaidEventReplayNotRefused(t *testing.T) {
	t.Parallel()
	l := pricedLifecycle(t, 1, false, 1250)
	l.payments.Provider = laterProvider{}
	o := l.firstOrder()
	ctx := t.Context()
	ev := seckill.PaymentEvent{ID: "evt_1", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_1", Amount: took(1250), Currency: "CNY"}
	if got, err := l.payments.Confirm(ctx, ev); err != nil || got.Status != seckill.OrderPaid {
		t.Fatalf("Confirm(1250 CNY) = %+v, %v; want paid", got, err)
	}
	for _, amount := range []*int64{nil, took(1000)} {
		ev.Amount = amount
		got, err := l.payments.Confirm(ctx, ev)
		if err != nil || got.Status != seckill.OrderPaid || got.PaymentRef != "pay_1" {
			t.Errorf("Confirm(evt_1 again, amount %v) = %+v, %v; want the order paid by pay_1", amount, got, err)
		}
	}
	rs, err := l.payments.RefusedPayments(ctx, 10)
	if err != nil || len(rs) != 0 || l.payments.Refused() != 0 {
		t.Errorf("refused %v, %v, counted %d; want none: replays of an event acted on", rs, err, l.payments.Refused())
	}
}
