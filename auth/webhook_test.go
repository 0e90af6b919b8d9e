package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

var webhookSecret = []byte("webhook-secret-0123456789abcdef-0123")

// receiver is a webhook endpoint as docs/configuration.md tells an operator to write
// one: it checks the signature and the timestamp's age before it believes
// the body.
type receiver struct {
	secret []byte
	now    time.Time

	mu          sync.Mutex
	phone, code string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Phone, Code string }
	raw, err := rc.verify(r)
	if err == nil {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	rc.phone, rc.code = body.Phone, body.Code
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) verify(r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		return nil, fmt.Errorf("got %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
	if err != nil {
		return nil, err
	}
	ts := r.Header.Get("X-Seckill-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || rc.now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return nil, fmt.Errorf("timestamp %q is not within 5 minutes of %v", ts, rc.now)
	}
	sig, ok := strings.CutPrefix(r.Header.Get("X-Seckill-Signature"), "sha256=")
	got, err := hex.DecodeString(sig)
	m := hmac.New(sha256.New, rc.secret)
	m.Write([]byte(ts + "." + string(raw)))
	if !ok || err != nil || !hmac.Equal(got, m.Sum(nil)) {
		return nil, errors.New("bad signature")
	}
	return raw, nil
}

func (rc *receiver) got() (phone, code string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.phone, rc.code
}

func newTestWebhook(t *testing.T, url string, now time.Time) *WebhookSender {
	t.Helper()
	s, err := NewWebhookSender(url, webhookSecret, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Now = func() time.Time { return now }
	return s
}

func TestWebhookSenderSigns(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rc := &receiver{secret: webhookSecret, now: now}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	s := newTestWebhook(t, srv.URL+"/sms?token=t0ps3cret", now)
	if err := s.SendCode(context.Background(), "+8613800138000", "012345"); err != nil {
		t.Fatalf("SendCode to a receiver that verifies: %v", err)
	}
	if phone, code := rc.got(); phone != "+8613800138000" || code != "012345" {
		t.Errorf("receiver got phone %q code %q", phone, code)
	}

	// The receiver's checks can fail: another secret, or a stale timestamp.
	other := &receiver{secret: []byte("another-secret-of-at-least-32-bytes!"), now: now}
	stale := &receiver{secret: webhookSecret, now: now.Add(6 * time.Minute)}
	for name, rc := range map[string]*receiver{"other secret": other, "stale": stale} {
		srv := httptest.NewServer(rc)
		err := newTestWebhook(t, srv.URL, now).SendCode(context.Background(), "+8613800138000", "012345")
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("%s: SendCode = %v, want the receiver's 401 as an error", name, err)
		}
		if phone, _ := rc.got(); phone != "" {
			t.Errorf("%s: the receiver believed a request it should not have", name)
		}
	}
}

func TestWebhookSenderNot2xx(t *testing.T) {
	t.Parallel()
	const code = "987654"
	for _, status := range []int{http.StatusInternalServerError, http.StatusNotFound, http.StatusTooManyRequests, http.StatusFound} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var followed atomic.Bool
			mux := http.NewServeMux()
			mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Store(true) })
			mux.HandleFunc("/sms", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", "/elsewhere")
				http.Error(w, "no: "+code, status)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			err := newTestWebhook(t, srv.URL+"/sms?token=t0ps3cret", time.Now()).SendCode(context.Background(), "+8613800138000", code)
			if err == nil || !strings.Contains(err.Error(), strconv.Itoa(status)) {
				t.Fatalf("SendCode = %v, want an error naming %d", err, status)
			}
			if strings.Contains(err.Error(), code) || strings.Contains(err.Error(), "t0ps3cret") {
				t.Errorf("the error %q carries the code or the URL's token", err)
			}
			if followed.Load() {
				t.Error("the sender followed a redirect")
			}
			if errors.Is(err, seckill.ErrCodeUnsent) {
				t.Errorf("an answer %d is %v, want it not ErrCodeUnsent: the gateway had the code", status, err)
			}
		})
	}
}

func TestWebhookSenderTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the sender gave up
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	s, err := NewWebhookSender(srv.URL+"/sms?token=t0ps3cret", webhookSecret, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendCode(context.Background(), "+8613800138000", "987654")
	var timeout interface{ Timeout() bool }
	if !errors.As(err, &timeout) || !timeout.Timeout() {
		t.Fatalf("SendCode to an endpoint that does not answer = %v, want a timeout", err)
	}
	// The endpoint had the request: the code may be on its way.
	if errors.Is(err, seckill.ErrCodeUnsent) {
		t.Errorf("a timeout after the request was written is %v, want it not ErrCodeUnsent", err)
	}
	if strings.Contains(err.Error(), "987654") || strings.Contains(err.Error(), "t0ps3cret") {
		t.Errorf("the error %q carries the code or the URL's token", err)
	}
}

// TestWebhookSenderUnsent: a request that never reached the endpoint whole
// (nothing listens, the TLS handshake fails, the send was cancelled before
// it began) is ErrCodeUnsent.
func TestWebhookSenderUnsent(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: one just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/sms"
	ln.Close()
	// An https URL to a plain HTTP server: the handshake fails.
	var reached atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer plain.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		url string
		ctx context.Context
	}{
		"refused":   {refused, context.Background()},
		"tls":       {strings.Replace(plain.URL, "http://", "https://", 1) + "/sms", context.Background()},
		"cancelled": {plain.URL + "/sms", cancelled},
	} {
		err := newTestWebhook(t, tc.url, time.Now()).SendCode(tc.ctx, "+8613800138000", "98765432")
		if !errors.Is(err, seckill.ErrCodeUnsent) {
			t.Errorf("%s: SendCode = %v, want ErrCodeUnsent", name, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the endpoint was reached %d times", n)
	}
}

func TestNewWebhookSenderRejects(t *testing.T) {
	t.Parallel()
	if _, err := NewWebhookSender("https://sms.example/send", webhookSecret[:MinSecretLen], time.Second); err != nil {
		t.Fatalf("a %d-byte secret: %v", MinSecretLen, err)
	}
	for name, tc := range map[string]struct {
		url     string
		secret  []byte
		timeout time.Duration
	}{
		"short secret": {"https://sms.example/send", webhookSecret[:MinSecretLen-1], time.Second},
		"no secret":    {"https://sms.example/send", nil, time.Second},
		"no URL":       {"", webhookSecret, time.Second},
		"relative URL": {"/send", webhookSecret, time.Second},
		"no scheme":    {"sms.example:8080/send", webhookSecret, time.Second},
		"no host":      {"https:///send", webhookSecret, time.Second},
		"ftp":          {"ftp://sms.example/send", webhookSecret, time.Second},
		"zero timeout": {"https://sms.example/send", webhookSecret, 0},
	} {
		if _, err := NewWebhookSender(tc.url, tc.secret, tc.timeout); err == nil {
			t.Errorf("%s: NewWebhookSender accepted it", name)
		}
	}
}
