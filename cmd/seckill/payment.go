package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/seckill/seckill"
	sechttp "github.com/seckill/seckill/http"
	"github.com/seckill/seckill/payment"
)

func (c *Config) paymentFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PaymentProvider, "payment-provider", "fake", "who takes orders' payments: fake (pays at once: the embedded default, the demo, tests) or webhook (a payment service that confirms on POST /api/payments/webhook, signed; see docs/configuration.md)")
	fs.StringVar(&c.PaymentURL, "payment-url", "", "the webhook provider's API: a payment is started with a POST to its /payments")
	fs.StringVar(&c.PaymentAPIKey, "payment-api-key", "", "the bearer token the webhook provider's API takes, if any")
	fs.StringVar(&c.PaymentWebhookSecret, "payment-webhook-secret", "", "HMAC-SHA256 key of the webhook provider's signatures, at least 32 bytes")
	fs.DurationVar(&c.SweepEvery, "sweep-every", time.Second, "how often unpaid orders past their deadline are cancelled and their units put back on sale")
	fs.StringVar(&c.Currency, "currency", seckill.DefaultCurrency, "ISO 4217 code of the currency of vouchers created without one, and of those made before prices (price 0): one of "+strings.Join(seckill.Currencies(), ", "))
	fs.DurationVar(&c.PaymentGrace, "payment-grace", seckill.DefaultPaymentGrace, "how long after its payBy an order whose payment was started before it waits for the provider's confirmation before it is cancelled")
}

// newPayments returns the configured payment provider, and the checker of
// its webhooks' signatures (nil for the fake provider, which sends none).
func newPayments(c *Config) (seckill.PaymentProvider, sechttp.PaymentWebhook, error) {
	switch c.PaymentProvider {
	case "", "fake":
		if c.PaymentURL != "" || c.PaymentWebhookSecret != "" {
			return nil, nil, errors.New("--payment-url and --payment-webhook-secret need --payment-provider webhook")
		}
		return payment.Fake{}, nil, nil
	case "webhook":
		w, err := payment.New(payment.Config{BaseURL: c.PaymentURL, Secret: []byte(c.PaymentWebhookSecret), APIKey: c.PaymentAPIKey})
		if err != nil {
			return nil, nil, fmt.Errorf("--payment-provider webhook: %w (set SECKILL_PAYMENT_URL and SECKILL_PAYMENT_WEBHOOK_SECRET)", err)
		}
		return w, w, nil
	}
	return nil, nil, fmt.Errorf("--payment-provider %q: want fake or webhook", c.PaymentProvider)
}

// failpointVar names the crash tests' failpoint: set to a crash point of
// a cancellation (seckill.CrashBeforeReturn, CrashBeforeMark), the process
// kills itself with SIGKILL the first time it gets there. Not a setting:
// no flag, and nothing but the crash tests sets it.
const failpointVar = "SECKILL_TEST_FAILPOINT"

// failpoint returns the cancellations' crash hook that failpointVar asks
// for, or nil.
func failpoint(logger *slog.Logger) func(string) {
	at := os.Getenv(failpointVar)
	if at == "" {
		return nil
	}
	logger.Warn("a crash test's failpoint is set: this process will kill itself", "at", at)
	return func(point string) {
		if point == at {
			killSelf()
		}
	}
}
