package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill"
)

// The headers of a webhook request.
const (
	// WebhookTimestampHeader carries when the request was signed, in Unix
	// seconds.
	WebhookTimestampHeader = "X-Seckill-Timestamp"
	// WebhookSignatureHeader carries "sha256=" and the hex HMAC-SHA256,
	// keyed with the shared secret, of the timestamp, ".", and the body.
	WebhookSignatureHeader = "X-Seckill-Signature"
)

// WebhookSender sends login codes to an HTTP endpoint of the operator's
// (an SMS gateway, or a service in front of one): a JSON POST of
// {"phone","code"}, signed so that the endpoint can tell it comes from
// seckill and, by the timestamp, that it is not a replay.
type WebhookSender struct {
	url    string
	host   string
	secret []byte
	client *http.Client
	// Now returns the current time; tests replace it.
	Now func() time.Time
}

// webhookBody is what a WebhookSender posts.
type webhookBody struct {
	Phone string `json:"phone"`
	Code  string `json:"code"`
}

// NewWebhookSender returns a sender that posts to rawURL (http or https),
// signing with secret (at least MinSecretLen bytes). A send gives up after
// timeout.
func NewWebhookSender(rawURL string, secret []byte, timeout time.Duration) (*WebhookSender, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("auth: the webhook URL must be an absolute http:// or https:// URL")
	}
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("auth: the webhook secret is %d bytes; it must be at least %d", len(secret), MinSecretLen)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("auth: webhook timeout %v is not positive", timeout)
	}
	return &WebhookSender{
		url:    rawURL,
		host:   u.Host,
		secret: secret,
		client: &http.Client{
			Timeout: timeout,
			// A redirect would carry the code elsewhere: it is an answer
			// other than 2xx, so an error.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		Now: time.Now,
	}, nil
}

// SendCode posts the phone and code. A failed connection, a timeout or an
// answer other than 2xx is an error; it wraps seckill.ErrCodeUnsent when
// the request was surely not written whole (no connection, a name that did
// not resolve, a TLS handshake that failed), since only then can the
// gateway not have the code. Errors name the endpoint's host, not its URL
// (which may hold a token) and never the code.
func (s *WebhookSender) SendCode(ctx context.Context, phone, code string) error {
	body, err := json.Marshal(webhookBody{Phone: phone, Code: code})
	if err != nil {
		return fmt.Errorf("login webhook: %w: %w", seckill.ErrCodeUnsent, err)
	}
	// The transport tells when a request was written whole; until it has,
	// the gateway cannot act on it.
	var written atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			written.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("login webhook %s: %w: %w", s.host, seckill.ErrCodeUnsent, err)
	}
	ts := strconv.FormatInt(s.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(WebhookTimestampHeader, ts)
	req.Header.Set(WebhookSignatureHeader, "sha256="+signWebhook(s.secret, ts, body))
	res, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if !written.Load() {
			return fmt.Errorf("login webhook %s: %w: %w", s.host, seckill.ErrCodeUnsent, err)
		}
		return fmt.Errorf("login webhook %s: %w", s.host, err)
	}
	defer res.Body.Close()
	// Read a little of the answer so the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		// The gateway had the request: a proxy's 502 or 504 may come after
		// the SMS went out, so the code is not taken back.
		return fmt.Errorf("login webhook %s: answered %s", s.host, res.Status)
	}
	return nil
}

// signWebhook is the hex HMAC-SHA256 of ts, ".", and body, keyed with
// secret. The timestamp is signed with the body so that a receiver that
// refuses old timestamps refuses replays.
func signWebhook(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
