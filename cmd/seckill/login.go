package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

func (c *Config) loginFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.LoginWebhookURL, "login-webhook-url", "", "URL that login codes are posted to, signed (see docs/configuration.md); with real services and no URL, login is off")
	fs.StringVar(&c.LoginWebhookSecret, "login-webhook-secret", "", "HMAC-SHA256 key of the login webhook's signature, at least 32 bytes")
	fs.DurationVar(&c.LoginWebhookTimeout, "login-webhook-timeout", 3*time.Second, "how long a login webhook request may take before the code route answers 503")
	fs.StringVar(&c.LoginCountryCode, "login-country-code", "", "country calling code (as 86) of phone numbers written without one (empty: a number must carry its country code)")
	fs.Float64Var(&c.LoginRateAddr, "login-rate-addr", 2, "requests a second each client address may make to each login route (0: no limit)")
	fs.IntVar(&c.LoginRateAddrBurst, "login-rate-addr-burst", 10, "login requests an address may make at once above --login-rate-addr")
	fs.Float64Var(&c.LoginRateGlobal, "login-rate-global", 100, "requests a second all clients together may make to each login route: a bound on the codes sent (0: no limit)")
	fs.IntVar(&c.LoginRateGlobalBurst, "login-rate-global-burst", 1000, "login requests all clients may make at once above --login-rate-global")
	fs.Int64Var(&c.LoginWrongAddr, "login-wrong-addr", auth.DefaultGuesses.PerClient, "wrong login codes an hour each client address may try, on all instances together (0: no limit)")
	fs.Int64Var(&c.LoginWrongGlobal, "login-wrong-global", auth.DefaultGuesses.Global, "wrong login codes an hour all clients together may try, on all instances: the bound on guessing codes (0: no limit)")
}

// newLogin returns the phone-code login of c, or nil (login off) on real
// services with no code sender: the log sender, which writes every code to
// the log, is for trying seckill out on the embedded default only.
func newLogin(c *Config, embedded bool, codes seckill.LoginCodes, users seckill.UserStore, tokens *auth.Tokens, logger *slog.Logger) (*auth.Login, error) {
	country, err := auth.ParseCountryCode(c.LoginCountryCode)
	if err != nil {
		return nil, fmt.Errorf("--login-country-code: %w", err)
	}
	if c.LoginWrongAddr < 0 || c.LoginWrongGlobal < 0 {
		return nil, errors.New("--login-wrong-addr and --login-wrong-global must not be negative")
	}
	sender, err := codeSender(c, embedded, logger)
	if err != nil || sender == nil {
		return nil, err
	}
	return &auth.Login{
		Codes:       codes,
		Sender:      sender,
		Users:       users,
		Tokens:      tokens,
		TokenTTL:    c.TokenTTL,
		CountryCode: country,
		// Past the webhook's own timeout, so that it is the one that ends
		// a slow send.
		SendTimeout: c.LoginWebhookTimeout + time.Second,
		Guesses:     seckill.GuessLimits{PerClient: c.LoginWrongAddr, Global: c.LoginWrongGlobal, Window: auth.DefaultGuesses.Window},
		Logger:      logger,
	}, nil
}

// codeSender returns the configured sender of login codes: the webhook,
// else the log on the embedded default, else none (nil), which it warns of.
func codeSender(c *Config, embedded bool, logger *slog.Logger) (seckill.CodeSender, error) {
	switch {
	case c.LoginWebhookURL != "":
		s, err := auth.NewWebhookSender(c.LoginWebhookURL, []byte(c.LoginWebhookSecret), c.LoginWebhookTimeout)
		if err != nil {
			return nil, fmt.Errorf("login webhook: %w", err)
		}
		return s, nil
	case c.LoginWebhookSecret != "":
		return nil, errors.New("SECKILL_LOGIN_WEBHOOK_SECRET is set but SECKILL_LOGIN_WEBHOOK_URL is not: set both to send login codes")
	case embedded:
		return auth.LogSender{Logger: logger}, nil
	}
	logger.Warn("login is off: no login code sender is configured, so POST /api/auth/code and /api/auth/login answer 503; " +
		"to turn it on, set SECKILL_LOGIN_WEBHOOK_URL and SECKILL_LOGIN_WEBHOOK_SECRET (see docs/configuration.md); to try it on this machine, seckill sms-sink prints the codes")
	return nil, nil
}
