// Package payment holds the payment providers that take an order's payment
// (seckill.PaymentProvider): Fake, which pays at once, for the embedded
// mode, the demo and the tests; and Webhook, for a real payment service that
// takes the payment on its own page and confirms it later with a signed
// webhook (Webhook.Verify), on Stripe's model.
package payment

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/seckill/seckill"
)

// Fake is the provider that pays every order at once, with the reference
// "fake_" and the order's id, whatever it owes. It does no I/O, so a
// second charge of an order is the first one again. The zero value is
// ready to use.
type Fake struct {
	// Charges, if set, records each charge asked for: what tests read
	// of the amounts the service asked the provider to take.
	Charges *FakeCharges
}

// FakeCharges records the charges a Fake was asked for; safe for
// concurrent use.
type FakeCharges struct {
	mu   sync.Mutex
	list []FakeCharge
}

// FakeCharge is one charge a Fake was asked for: the order and what it
// owes, in its currency's minor units.
type FakeCharge struct {
	OrderID  int64
	Amount   int64
	Currency string
}

// List returns the charges asked for, in order.
func (c *FakeCharges) List() []FakeCharge {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

var _ seckill.PaymentProvider = Fake{}

// Name returns "fake".
func (Fake) Name() string { return "fake" }

// Charge pays o at once.
func (f Fake) Charge(_ context.Context, o *seckill.Order) (seckill.Charge, error) {
	if f.Charges != nil {
		f.Charges.mu.Lock()
		f.Charges.list = append(f.Charges.list, FakeCharge{OrderID: o.ID, Amount: o.Amount, Currency: o.Currency})
		f.Charges.mu.Unlock()
	}
	return seckill.Charge{Paid: true, Ref: "fake_" + strconv.FormatInt(o.ID, 10)}, nil
}

var _ seckill.Refunder = Fake{}

// Refund gives back at once a payment that came after its order was
// cancelled: the fake provider took nothing, so there is nothing to wait
// for.
func (Fake) Refund(context.Context, *seckill.Order) (bool, error) { return true, nil }
