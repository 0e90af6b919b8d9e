package payment

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
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
