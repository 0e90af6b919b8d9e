// Package payment holds the payment providers that take an order's payment
// (seckill.PaymentProvider): Fake, which pays at once, for the embedded
// mode, the demo and the tests; and Webhook, for a real payment service that
// takes the payment on its own page and confirms it later with a signed
// webhook (Webhook.Verify), on Stripe's model.
package payment

import (
	"context"
	"strconv"

	"github.com/seckill/seckill"
)

// Fake is the provider that pays every order at once, with the reference
// "fake_" and the order's id. It does no I/O, so a second charge of an
// order is the first one again. The zero value is ready to use.
type Fake struct{}

var _ seckill.PaymentProvider = Fake{}

// Name returns "fake".
func (Fake) Name() string { return "fake" }

// Charge pays o at once.
func (Fake) Charge(_ context.Context, o *seckill.Order) (seckill.Charge, error) {
	return seckill.Charge{Paid: true, Ref: "fake_" + strconv.FormatInt(o.ID, 10)}, nil
}

var _ seckill.Refunder = Fake{}

// Refund gives back at once a payment that came after its order was
// cancelled: the fake provider took nothing, so there is nothing to wait
// for.
func (Fake) Refund(context.Context, *seckill.Order) (bool, error) { return true, nil }
