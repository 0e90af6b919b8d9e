package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
)

// Defaults and limits of a Webhook provider.
const (
	// MinSecretLen is the shortest signing secret New accepts: an HMAC-SHA256
	// key shorter than the hash gives less than its strength.
	MinSecretLen = 32
	// DefaultTolerance is Config.Tolerance's default: how far a webhook's
	// timestamp may be from now. Stripe's default, long enough for a retry
	// queue and clock skew, short enough that a captured request soon stops
	// being accepted (a replay within it is caught by the event's id).
	DefaultTolerance = 5 * time.Minute
	// DefaultTimeout bounds a charge request with the default Config.Client.
	DefaultTimeout = 10 * time.Second
	// MaxRefLen is the longest payment reference or event id accepted from
	// the provider, so that a store can keep them in a bounded column.
	MaxRefLen = 255
)

// maxAnswer bounds the provider's answer to a charge that is read: it is a
// small JSON object.
const maxAnswer = 64 << 10

// Config configures a Webhook provider.
type Config struct {
	// BaseURL is the provider's API, an absolute http or https URL: a
	// charge is a POST to its path joined with "payments" (its query, as
	// a token, kept). Required.
	BaseURL string
	// Secret is the signing secret shared with the provider, at least
	// MinSecretLen bytes: the provider signs its webhooks with it. Required.
	Secret []byte
	// APIKey, if set, is sent with each charge as "Authorization: Bearer
	// APIKey": how the provider tells that a charge comes from this shop.
	APIKey string
	// Tolerance is how far a webhook's signed timestamp may be from now,
	// either way, for Verify to accept it. Default DefaultTolerance.
	Tolerance time.Duration
	// Client makes the requests to the provider. Default: a client that
	// gives up after DefaultTimeout and follows no redirects (a redirect of
	// a POST would carry the API key and the charge elsewhere).
	Client *http.Client
	// Now returns the current time; tests replace it. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Timeout:       DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("payment: Config.BaseURL must be an absolute http:// or https:// URL"))
	}
	if len(c.Secret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("payment: Config.Secret is %d bytes; it must be at least %d", len(c.Secret), MinSecretLen))
	}
	if c.Tolerance < 0 {
		errs = append(errs, fmt.Errorf("payment: Config.Tolerance %v is negative", c.Tolerance))
	}
	return errors.Join(errs...)
}

// Webhook is the provider for a real payment service: Charge asks the
// service to start a payment and returns where the buyer pays; the service
// confirms the payment later with a signed POST to the webhook route, which
// Verify checks.
type Webhook struct {
	url       string
	host      string
	secret    []byte
	apiKey    string
	tolerance time.Duration
	client    *http.Client
	now       func() time.Time
}

var _ seckill.PaymentProvider = (*Webhook)(nil)

// New returns a Webhook provider configured by c, or an error if c lacks
// a BaseURL or a long enough Secret.
func New(c Config) (*Webhook, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(c.BaseURL)
	return &Webhook{
		url:       u.JoinPath("payments").String(),
		host:      u.Host,
		secret:    bytes.Clone(c.Secret),
		apiKey:    c.APIKey,
		tolerance: c.Tolerance,
		client:    c.Client,
		now:       c.Now,
	}, nil
}

// Name returns "webhook".
func (w *Webhook) Name() string { return "webhook" }

// chargeRequest is the body of a charge. Ids are decimal strings: they do
// not fit a JSON number's exact range.
type chargeRequest struct {
	OrderID   string `json:"orderId"`
	UserID    string `json:"userId"`
	VoucherID string `json:"voucherId"`
	// Amount is what the order owes, in Currency's minor units (fen,
	// cents): what the provider is asked to take. Neither is sent for an
	// order of a voucher made before prices, which has none.
	Amount   *int64 `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
}

// chargeAnswer is the provider's answer to a charge.
type chargeAnswer struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// errUnavailable is what a client is told when the provider fails: it is
// not theirs to fix, and the order is still there to pay.
var errUnavailable = &seckill.Error{
	Kind:    seckill.ErrUnavailable,
	Message: "the payment service cannot take the payment now; try again",
}

// Charge asks the provider to start the payment of o, and returns the
// provider's reference and where the buyer pays. The order's id is the
// request's Idempotency-Key, so a second charge of one order (a retry, a
// buyer who pays twice) is answered with the first one's payment and
// charges nothing more. Every failure (no answer, an answer other than 200
// or 201, an answer that is not a payment) wraps seckill.ErrUnavailable:
// the buyer may try again. Errors name the provider's host, not its URL.
func (w *Webhook) Charge(ctx context.Context, o *seckill.Order) (seckill.Charge, error) {
	id := strconv.FormatInt(o.ID, 10)
	charge := chargeRequest{
		OrderID:   id,
		UserID:    strconv.FormatInt(o.UserID, 10),
		VoucherID: strconv.FormatInt(o.VoucherID, 10),
	}
	if o.Currency != "" {
		charge.Amount, charge.Currency = &o.Amount, o.Currency
	}
	body, err := json.Marshal(charge)
	if err != nil {
		return seckill.Charge{}, w.fail(o, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return seckill.Charge{}, w.fail(o, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", id)
	if w.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+w.apiKey)
	}
	res, err := w.client.Do(req)
	if err != nil {
		// A *url.Error names the whole URL, which may hold a token.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return seckill.Charge{}, w.fail(o, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return seckill.Charge{}, w.fail(o, fmt.Errorf("reading the answer: %w", err))
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		return seckill.Charge{}, w.fail(o, fmt.Errorf("answered %s", res.Status))
	}
	if len(raw) > maxAnswer {
		return seckill.Charge{}, w.fail(o, fmt.Errorf("answered more than %d bytes", maxAnswer))
	}
	var a chargeAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return seckill.Charge{}, w.fail(o, fmt.Errorf("answered %s with a body that is not a payment: %w", res.Status, err))
	}
	if !validRef(a.ID) {
		return seckill.Charge{}, w.fail(o, fmt.Errorf("answered %s with payment id %.64q: not 1 to %d printable ASCII bytes", res.Status, a.ID, MaxRefLen))
	}
	// The buyer's client is sent to the URL: only a web page will do.
	if a.URL != "" {
		if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return seckill.Charge{}, w.fail(o, fmt.Errorf("answered payment %s with a URL that is not an absolute http(s) URL", a.ID))
		}
	}
	return seckill.Charge{Ref: a.ID, URL: a.URL}, nil
}

// fail wraps the cause of a failed charge of o.
func (w *Webhook) fail(o *seckill.Order, cause error) error {
	return fmt.Errorf("payment provider %s: charging order %d: %w: %w", w.host, o.ID, errUnavailable, cause)
}

// validRef reports whether s is an acceptable payment reference or event
// id: 1 to MaxRefLen bytes of printable ASCII, no space.
func validRef(s string) bool {
	if s == "" || len(s) > MaxRefLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

var _ seckill.Refunder = (*Webhook)(nil)

// Refund asks the provider to give back o's payment (o.PaymentRef): one
// that came after o was cancelled. It POSTs to the payment's refunds, with
// an Idempotency-Key of "refund_" and the order's id, so that asking again
// refunds once. The provider confirms with a RefundSucceeded event: done is
// false. A failure wraps seckill.ErrUnavailable; the order stays
// refunding, and seckill.RefundRequester asks again after a backoff.
func (w *Webhook) Refund(ctx context.Context, o *seckill.Order) (bool, error) {
	if !validRef(o.PaymentRef) {
		return false, fmt.Errorf("payment provider %s: refunding order %d: no payment reference to refund", w.host, o.ID)
	}
	u := strings.TrimSuffix(w.url, "/") + "/" + url.PathEscape(o.PaymentRef) + "/refunds"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"orderId":"`+strconv.FormatInt(o.ID, 10)+`"}`))
	if err != nil {
		return false, w.refundFailed(o, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "refund_"+strconv.FormatInt(o.ID, 10))
	if w.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+w.apiKey)
	}
	res, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return false, w.refundFailed(o, err)
	}
	defer res.Body.Close()
	io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswer))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return false, w.refundFailed(o, fmt.Errorf("answered %s", res.Status))
	}
	return false, nil
}

// refundFailed wraps the cause of a failed refund of o.
func (w *Webhook) refundFailed(o *seckill.Order, cause error) error {
	return fmt.Errorf("payment provider %s: refunding order %d: %w: %w", w.host, o.ID, errUnavailable, cause)
}
