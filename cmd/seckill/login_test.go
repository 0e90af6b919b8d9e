package main

import (
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// TestNewLogin: the log sender only on the embedded default; on real
// services the webhook, or no login and a warning that says how to turn it
// on; configuration mistakes refuse to start.
func TestNewLogin(t *testing.T) {
	const secret = "webhook-secret-0123456789abcdef-0123"
	for _, tc := range []struct {
		name     string
		embedded bool
		args     []string
		sender   string // "log", "webhook" or "" for no login
		warn     bool
	}{
		{"embedded", true, nil, "log", false},
		{"real services", false, nil, "", true},
		{"real services with a webhook", false, []string{"--login-webhook-url=https://sms.example/send", "--login-webhook-secret=" + secret}, "webhook", false},
		{"embedded with a webhook", true, []string{"--login-webhook-url=https://sms.example/send", "--login-webhook-secret=" + secret}, "webhook", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, logs := loginConfig(t, tc.args...)
			l, err := newLogin(c, tc.embedded, nil, nil, nil, slog.New(slog.NewTextHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			var sender string
			switch {
			case l == nil:
			case isLogSender(l):
				sender = "log"
			default:
				if _, ok := l.Sender.(*auth.WebhookSender); ok {
					sender = "webhook"
				}
			}
			if sender != tc.sender {
				t.Errorf("sender %q (%T), want %q", sender, l, tc.sender)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "SECKILL_LOGIN_WEBHOOK_URL")
			if warned != tc.warn {
				t.Errorf("warned %v, want %v; log:\n%s", warned, tc.warn, logs)
			}
		})
	}
}

func isLogSender(l *auth.Login) bool {
	_, ok := l.Sender.(auth.LogSender)
	return ok
}

func TestNewLoginCountryCode(t *testing.T) {
	c, logs := loginConfig(t, "--login-country-code=+86")
	l, err := newLogin(c, true, nil, nil, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil || l.CountryCode != "86" {
		t.Fatalf("newLogin = %+v, %v; want country code 86", l, err)
	}
}

// TestNewLoginGuesses: the allowances of wrong codes are on by default,
// per hour, and set by flags.
func TestNewLoginGuesses(t *testing.T) {
	c, logs := loginConfig(t)
	l, err := newLogin(c, true, nil, nil, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil || l.Guesses != auth.DefaultGuesses || !l.Guesses.On() {
		t.Fatalf("newLogin = %+v, %v; want the default allowances %+v", l, err, auth.DefaultGuesses)
	}
	c, logs = loginConfig(t, "--login-wrong-addr=0", "--login-wrong-global=500")
	l, err = newLogin(c, true, nil, nil, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if want := (seckill.GuessLimits{Global: 500, Window: time.Hour}); err != nil || l.Guesses != want {
		t.Fatalf("newLogin = %+v, %v; want the allowances %+v", l, err, want)
	}
}

func TestNewLoginRefuses(t *testing.T) {
	const secret = "webhook-secret-0123456789abcdef-0123"
	for name, args := range map[string][]string{
		"URL without secret": {"--login-webhook-url=https://sms.example/send"},
		"short secret":       {"--login-webhook-url=https://sms.example/send", "--login-webhook-secret=" + secret[:31]},
		"secret without URL": {"--login-webhook-secret=" + secret},
		"not a URL":          {"--login-webhook-url=sms.example", "--login-webhook-secret=" + secret},
		"zero timeout":       {"--login-webhook-url=https://sms.example/send", "--login-webhook-secret=" + secret, "--login-webhook-timeout=0s"},
		"bad country code":   {"--login-country-code=086"},
		"negative wrong":     {"--login-wrong-global=-1"},
	} {
		t.Run(name, func(t *testing.T) {
			c, logs := loginConfig(t, args...)
			if l, err := newLogin(c, false, nil, nil, nil, slog.New(slog.NewTextHandler(logs, nil))); err == nil {
				t.Fatalf("newLogin = %+v, want an error", l)
			}
		})
	}
}

// loginConfig returns the login settings of args over the defaults, and a
// buffer for the log.
func loginConfig(t *testing.T, args ...string) (*Config, *strings.Builder) {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.loginFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, &strings.Builder{}
}
