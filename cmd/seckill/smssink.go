package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/redis"
)

// defaultSinkURL is where sms-sink listens without --login-webhook-url.
const defaultSinkURL = "http://127.0.0.1:8025/"

// sinkMaxSkew is how far a signed post's timestamp may be from this
// machine's clock: older posts are replays.
const sinkMaxSkew = 5 * time.Minute

func smsSinkFlags(fs *flagSet, c *Config) {
	fs.group("Login", func(fs *flag.FlagSet) {
		fs.StringVar(&c.LoginWebhookURL, "login-webhook-url", "", "where to listen: the URL serve posts login codes to, by the same variable (default "+defaultSinkURL+"; port 0: any free port, printed)")
		fs.StringVar(&c.LoginWebhookSecret, "login-webhook-secret", "", "HMAC-SHA256 key of the webhook's signature, as serve's: with it, posts unsigned, signed otherwise or older than 5 minutes are refused (401); without it, any post is printed")
	})
}

// runSMSSink receives the login webhook (auth.WebhookSender) on this
// machine and prints each code, so that the sale page's login can be tried
// on real services, where codes are never logged.
func runSMSSink(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c Config
	fs := newFlagSet("sms-sink")
	smsSinkFlags(fs, &c)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	raw := c.LoginWebhookURL
	if raw == "" {
		raw = defaultSinkURL
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("--login-webhook-url %q: want an http:// URL on this machine, as http://127.0.0.1:8025/", raw)
	}
	if c.LoginWebhookSecret != "" && len(c.LoginWebhookSecret) < auth.MinSecretLen {
		return fmt.Errorf("--login-webhook-secret is %d bytes; serve wants at least %d", len(c.LoginWebhookSecret), auth.MinSecretLen)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		return err
	}
	u.Host = ln.Addr().String()
	sink := &smsSink{secret: []byte(c.LoginWebhookSecret), path: u.Path, out: stdout, log: stderr, now: time.Now}
	srv := &http.Server{Handler: sink, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stderr, "seckill sms-sink: listening on %s; give serve SECKILL_LOGIN_WEBHOOK_URL=%s", u, u)
	if len(sink.secret) == 0 {
		fmt.Fprint(stderr, " (no --login-webhook-secret: signatures are not checked)")
	}
	fmt.Fprintln(stderr)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// smsSink is the webhook's receiving end: one line on out for each code.
type smsSink struct {
	secret []byte
	path   string // "" or "/": any path
	now    func() time.Time

	mu       sync.Mutex // serialises the lines
	out, log io.Writer
}

func (s *smsSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST the login webhook here", http.StatusMethodNotAllowed)
		return
	}
	if p := strings.TrimSuffix(s.path, "/"); p != "" && strings.TrimSuffix(r.URL.Path, "/") != p {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		http.Error(w, "read the body", http.StatusBadRequest)
		return
	}
	if err := s.verify(r, body); err != nil {
		s.mu.Lock()
		fmt.Fprintf(s.log, "seckill sms-sink: refused a post from %s: %v\n", r.RemoteAddr, err)
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var msg struct{ Phone, Code string }
	if err := json.Unmarshal(body, &msg); err != nil || msg.Phone == "" || msg.Code == "" {
		http.Error(w, `want {"phone","code"}`, http.StatusBadRequest)
		return
	}
	// The code's lifetime starts when serve stores it, just before it posts.
	expires := s.now().Add(redis.CodeTTL).UTC().Format(time.RFC3339)
	s.mu.Lock()
	fmt.Fprintf(s.out, "phone=%s code=%s expires=%s\n", msg.Phone, msg.Code, expires)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// verify checks the signature and timestamp of a post as
// auth.WebhookSender makes them, when the sink has the secret.
func (s *smsSink) verify(r *http.Request, body []byte) error {
	if len(s.secret) == 0 {
		return nil
	}
	ts := r.Header.Get(auth.WebhookTimestampHeader)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("no %s", auth.WebhookTimestampHeader)
	}
	if d := s.now().Sub(time.Unix(sec, 0)); d > sinkMaxSkew || d < -sinkMaxSkew {
		return fmt.Errorf("signed %v from this machine's clock: a replay, or a clock off", d.Round(time.Second))
	}
	got, ok := strings.CutPrefix(r.Header.Get(auth.WebhookSignatureHeader), "sha256=")
	sig, err := hex.DecodeString(got)
	if !ok || err != nil {
		return fmt.Errorf("no %s", auth.WebhookSignatureHeader)
	}
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	if !hmac.Equal(sig, m.Sum(nil)) {
		return errors.New("the signature does not match --login-webhook-secret")
	}
	return nil
}
