package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill"
)

func TestNormalizePhone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		phone, country, want string // want "" for ErrInvalidArgument
	}{
		{"+8613800138000", "", "+8613800138000"},
		{"+86 138 0013 8000", "", "+8613800138000"},
		{"+86-138-0013-8000", "", "+8613800138000"},
		{"+86.138.0013.8000", "", "+8613800138000"},
		{"+86 (138) 0013-8000", "", "+8613800138000"},
		{"0086 138 0013 8000", "", "+8613800138000"},
		{"  +8613800138000\n", "", "+8613800138000"},
		{"+86\u00a0138\u00a000138000", "", "+8613800138000"},
		{"+44 (0)20 7946 0000", "", "+442079460000"},
		{"+1 (415) 555-0100", "", "+14155550100"},
		{"+683 4002", "", "+6834002"},
		{"+123456789012345", "", "+123456789012345"},
		// Without a country code: the configured one, the trunk 0 dropped.
		{"138 0013 8000", "86", "+8613800138000"},
		{"020 7946 0000", "44", "+442079460000"},
		{"(0)20 7946 0000", "44", "+442079460000"},
		{"+33 6 12 34 56 78", "44", "+33612345678"},
		{"0033 6 12 34 56 78", "44", "+33612345678"},
		{"13800138000", "", ""},
		{"020 7946 0000", "", ""},
		{"+1234567890123456", "", ""},
		{"12345678901234", "86", ""},
		{"+683 400", "", ""},
		{"+0 86 138", "", ""},
		{"+0086 13800138000", "", ""},
		{"000 86 13800138000", "", ""},
		{"", "", ""},
		{"+", "", ""},
		{"++8613800138000", "", ""},
		{"+86 138 0013 8000 ext 1", "", ""},
		{"+86/138/0013/8000", "", ""},
		{"+８６１３８００１３８０００", "", ""},
		{"admin", "", ""},
		{"admin", "86", ""},
		{"+86" + strings.Repeat(" ", 60) + "13800138000", "", ""},
	} {
		got, err := NormalizePhone(tc.phone, tc.country)
		switch {
		case tc.want == "" && !errors.Is(err, seckill.ErrInvalidArgument):
			t.Errorf("NormalizePhone(%q, %q) = %q, %v; want ErrInvalidArgument", tc.phone, tc.country, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("NormalizePhone(%q, %q) = %q, %v; want %q", tc.phone, tc.country, got, err, tc.want)
		}
	}
	// The refusal of a number without its country code says what is missing.
	if _, err := NormalizePhone("13800138000", ""); err == nil || !strings.Contains(err.Error(), "country code") {
		t.Errorf("NormalizePhone without a country code: %v, want it to name the country code", err)
	}
}

func TestParseCountryCode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", " ": "", "86": "86", "+44": "44", "1": "1", "+358": "358"} {
		if got, err := ParseCountryCode(in); err != nil || got != want {
			t.Errorf("ParseCountryCode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"+", "0", "086", "1234", "8a", "+-86", "++86"} {
		if got, err := ParseCountryCode(in); err == nil {
			t.Errorf("ParseCountryCode(%q) = %q, want an error", in, got)
		}
	}
}

func TestNewCode(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		c, err := newCode()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkCode(c); err != nil {
			t.Fatalf("newCode made %q: %v", c, err)
		}
		seen[c] = true
	}
	// 200 draws from a million collide a little at most; a constant would not.
	if len(seen) < 190 {
		t.Errorf("200 codes hold only %d distinct values", len(seen))
	}
}

// memCodes and memUsers are in-memory stand-ins: the flow is logic; the
// Redis and SQL implementations have their own tests against real servers.
type memCodes struct {
	mu        sync.Mutex
	codes     map[string]string
	withdrawn []string
	// cooldown, when set, keeps a phone from a new code until its code is
	// withdrawn, as Redis does for a minute.
	cooldown bool
	waiting  map[string]bool
	// spent and refunded count SpendGuess and RefundGuess calls; refuse
	// makes SpendGuess return it.
	spent, refunded int
	refuse          error
	// unchecked, when set, is what RedeemCode answers, having counted a
	// try: a check whose answer was lost (a client that hung up).
	unchecked error
}

func (m *memCodes) IssueCode(_ context.Context, phone, code string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiting[phone] {
		return false, nil
	}
	if m.cooldown {
		if m.waiting == nil {
			m.waiting = map[string]bool{}
		}
		m.waiting[phone] = true
	}
	m.codes[phone] = code
	return true, nil
}

func (m *memCodes) RedeemCode(_ context.Context, phone, code string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unchecked != nil {
		return m.unchecked
	}
	if m.codes[phone] != code {
		return seckill.ErrUnauthorized
	}
	delete(m.codes, phone)
	return nil
}

func (m *memCodes) WithdrawCode(_ context.Context, phone, code string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.codes[phone] == code {
		delete(m.codes, phone)
		delete(m.waiting, phone)
		m.withdrawn = append(m.withdrawn, phone)
	}
	return nil
}

func (m *memCodes) SpendGuess(context.Context, string, seckill.GuessLimits) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse != nil {
		return m.refuse
	}
	m.spent++
	return nil
}

func (m *memCodes) RefundGuess(context.Context, string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refunded++
	return nil
}

type memUsers struct {
	mu    sync.Mutex
	users map[string]*seckill.User
	// legacy is what the last call was given as legacy forms.
	legacy []string
}

func (m *memUsers) EnsureUser(_ context.Context, phone string, legacy ...string) (*seckill.User, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.legacy = legacy
	if u, ok := m.users[phone]; ok {
		return u, false, nil
	}
	u := &seckill.User{ID: int64(len(m.users) + 1), Phone: phone}
	m.users[phone] = u
	return u, true, nil
}

func (m *memUsers) User(context.Context, int64) (*seckill.User, error) {
	return nil, seckill.ErrUserNotFound
}

type lastCode struct {
	phone, code string
	err         error // what SendCode returns
}

func (l *lastCode) SendCode(_ context.Context, phone, code string) error {
	l.phone, l.code = phone, code
	return l.err
}

func newTestLogin(t *testing.T, codes seckill.LoginCodes, sender seckill.CodeSender) *Login {
	t.Helper()
	return &Login{
		Codes:    codes,
		Sender:   sender,
		Users:    &memUsers{users: map[string]*seckill.User{}},
		Tokens:   newTestTokens(t, time.Now()),
		TokenTTL: time.Hour,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	sent := &lastCode{}
	l := newTestLogin(t, &memCodes{codes: map[string]string{}}, sent)
	ctx := context.Background()
	if err := l.SendCode(ctx, "bad"); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("SendCode(bad phone) = %v, want ErrInvalidArgument", err)
	}
	const phone = "+8613800138000"
	if err := l.SendCode(ctx, phone); err != nil {
		t.Fatal(err)
	}
	if sent.phone != phone || len(sent.code) != CodeLen {
		t.Fatalf("sender got %+v", sent)
	}
	wrong := wrongCode(sent.code)
	if _, _, err := l.LogIn(ctx, "", phone, wrong); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Fatalf("LogIn with a wrong code = %v, want ErrUnauthorized", err)
	}
	if _, _, err := l.LogIn(ctx, "", phone, "1234a678"); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("LogIn with a malformed code = %v, want ErrInvalidArgument", err)
	}
	token, u, err := l.LogIn(ctx, "", phone, sent.code)
	if err != nil {
		t.Fatal(err)
	}
	id, err := l.Tokens.Verify(token)
	if err != nil || id != (Identity{UserID: u.ID}) {
		t.Fatalf("the login token verifies as %+v, %v; want user %d, not admin", id, err, u.ID)
	}
	// Second login of the same phone: same user.
	if err := l.SendCode(ctx, phone); err != nil {
		t.Fatal(err)
	}
	_, again, err := l.LogIn(ctx, "", phone, sent.code)
	if err != nil || again.ID != u.ID {
		t.Fatalf("second login = user %v, %v; want user %d", again, err, u.ID)
	}
}

// TestLoginOnePhoneManyWays: a number typed differently is one code and one
// user, kept in E.164.
func TestLoginOnePhoneManyWays(t *testing.T) {
	t.Parallel()
	sent := &lastCode{}
	codes := &memCodes{codes: map[string]string{}}
	l := newTestLogin(t, codes, sent)
	l.CountryCode = "86"
	ctx := context.Background()
	var first *seckill.User
	for _, typed := range [][2]string{
		{"138 0013 8000", "+86 138-0013-8000"},
		{"0086 (138) 0013.8000", "13800138000"},
		{"+8613800138000", "0086 138 0013 8000"},
	} {
		if err := l.SendCode(ctx, typed[0]); err != nil {
			t.Fatalf("SendCode(%q): %v", typed[0], err)
		}
		if sent.phone != "+8613800138000" {
			t.Fatalf("SendCode(%q) sent to %q, want +8613800138000", typed[0], sent.phone)
		}
		_, u, err := l.LogIn(ctx, "", typed[1], sent.code)
		if err != nil {
			t.Fatalf("code asked as %q, redeemed as %q: %v", typed[0], typed[1], err)
		}
		if u.Phone != "+8613800138000" {
			t.Errorf("user phone %q, want +8613800138000", u.Phone)
		}
		if first == nil {
			first = u
		} else if u.ID != first.ID {
			t.Errorf("%q logged in as user %d, want %d", typed[1], u.ID, first.ID)
		}
	}
}

// TestSendCodeUnsent: a code the sender surely did not send
// (ErrCodeUnsent) is ErrUnavailable with Retry-After, is withdrawn with the
// phone's wait, and is no longer usable; one that may have reached the
// gateway is ErrUnavailable too, but stays, and so does the wait.
func TestSendCodeUnsent(t *testing.T) {
	t.Parallel()
	const phone = "+8613800138000"
	unsent := fmt.Errorf("connection refused: %w", seckill.ErrCodeUnsent)
	codes := &memCodes{codes: map[string]string{}, cooldown: true}
	sent := &lastCode{err: unsent}
	l := newTestLogin(t, codes, sent)
	err := l.SendCode(context.Background(), phone)
	wantUnsent(t, err, unsent)
	if _, ok := codes.codes[phone]; ok || len(codes.withdrawn) != 1 {
		t.Errorf("after a failed send the store holds %v, withdrew %v; want the code withdrawn", codes.codes, codes.withdrawn)
	}
	if _, _, err := l.LogIn(context.Background(), "", phone, sent.code); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Errorf("LogIn with the unsent code = %v, want ErrUnauthorized", err)
	}

	// Past the gateway (a timeout, an error answer): the code stands.
	maybe := errors.New("login webhook: answered 504 Gateway Timeout")
	sent.err = maybe
	err = l.SendCode(context.Background(), phone)
	wantUnsent(t, err, maybe)
	var e *seckill.Error
	if errors.As(err, &e); e.RetryAfter < time.Minute {
		t.Errorf("Retry-After %v after a send that may have gone, want the phone's minute", e.RetryAfter)
	}
	if codes.codes[phone] != sent.code || len(codes.withdrawn) != 1 {
		t.Errorf("after a send that may have gone, the store holds %v, withdrew %v; want the code kept", codes.codes, codes.withdrawn)
	}
	if _, _, err := l.LogIn(context.Background(), "", phone, sent.code); err != nil {
		t.Errorf("LogIn with the code that may have gone = %v, want it to log in", err)
	}
}

// blockingSender blocks each send until released, and reports whether the
// send's context ended meanwhile.
type blockingSender struct {
	started chan struct{}
	release chan struct{}
	ended   chan error
}

func (b *blockingSender) SendCode(ctx context.Context, _, _ string) error {
	b.started <- struct{}{}
	select {
	case <-b.release:
		b.ended <- nil
		return nil
	case <-ctx.Done():
		b.ended <- ctx.Err()
		return ctx.Err()
	}
}

// TestSendCodeDetached: a buyer who hangs up while the gateway works does
// not cancel the send, so the code (which the gateway may have) and the
// phone's wait stand: a retry sends nothing.
func TestSendCodeDetached(t *testing.T) {
	t.Parallel()
	const phone = "+8613800138000"
	codes := &memCodes{codes: map[string]string{}, cooldown: true}
	b := &blockingSender{started: make(chan struct{}), release: make(chan struct{}), ended: make(chan error, 1)}
	l := newTestLogin(t, codes, b)
	ctx, hangUp := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.SendCode(ctx, phone) }()
	<-b.started
	hangUp()
	// The send goes on: had it seen the hang-up, it would have ended.
	select {
	case err := <-b.ended:
		t.Fatalf("the send ended with %v when the buyer hung up", err)
	default:
	}
	close(b.release)
	if err := <-b.ended; err != nil {
		t.Fatalf("the send ended with %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("SendCode = %v, want the send's success", err)
	}
	if len(codes.withdrawn) != 0 || codes.codes[phone] == "" {
		t.Fatalf("after a hang-up the store holds %v, withdrew %v; want the code kept", codes.codes, codes.withdrawn)
	}
	// Asking again sends nothing (the sender would block: it is not called).
	if err := l.SendCode(context.Background(), phone); err != nil {
		t.Fatalf("asking again = %v, want the same answer as a send", err)
	}
}

// timedSender takes d of the bubble's time to send, and counts the sends.
type timedSender struct {
	d     time.Duration
	sends atomic.Int64
}

func (s *timedSender) SendCode(context.Context, string, string) error {
	time.Sleep(s.d)
	s.sends.Add(1)
	return nil
}

// TestSendCodeOutstandingPaced: a phone whose code stands is answered no
// sooner than a send takes, and nothing is sent.
func TestSendCodeOutstandingPaced(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &timedSender{d: 300 * time.Millisecond}
		l := newTestLogin(t, &memCodes{codes: map[string]string{}, cooldown: true}, s)
		ctx := context.Background()
		took := func(phone string) time.Duration {
			start := time.Now()
			if err := l.SendCode(ctx, phone); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		if d := took("+8613800138000"); d != s.d {
			t.Fatalf("a send took %v, want %v", d, s.d)
		}
		if d := took("+8613800138000"); d != s.d {
			t.Errorf("the answer to a phone whose code stands took %v; a send takes %v", d, s.d)
		}
		if n := s.sends.Load(); n != 1 {
			t.Errorf("%d sends, want 1", n)
		}
		// A buyer who hangs up is not kept waiting.
		hungUp, cancel := context.WithCancel(ctx)
		cancel()
		start := time.Now()
		if err := l.SendCode(hungUp, "+8613800138000"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("a hung-up request waited %v", d)
		}
	})
}

// TestLogInSpendsGuesses: each well-formed attempt spends from the
// allowances of wrong codes before the code is checked; a right code gives
// its attempt back; a refusal checks nothing.
func TestLogInSpendsGuesses(t *testing.T) {
	t.Parallel()
	const phone = "+8613800138000"
	codes := &memCodes{codes: map[string]string{}}
	sent := &lastCode{}
	l := newTestLogin(t, codes, sent)
	l.Guesses = seckill.GuessLimits{PerClient: 1, Global: 1, Window: time.Hour}
	ctx := context.Background()
	if err := l.SendCode(ctx, phone); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.LogIn(ctx, "192.0.2.1", phone, wrongCode(sent.code)); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Fatalf("wrong code = %v", err)
	}
	if _, _, err := l.LogIn(ctx, "192.0.2.1", phone, "123"); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("malformed code = %v", err)
	}
	if codes.spent != 1 || codes.refunded != 0 {
		t.Errorf("after a wrong and a malformed code: spent %d, refunded %d; want 1, 0", codes.spent, codes.refunded)
	}
	if _, _, err := l.LogIn(ctx, "192.0.2.1", phone, sent.code); err != nil {
		t.Fatal(err)
	}
	if codes.spent != 2 || codes.refunded != 1 {
		t.Errorf("after a right code: spent %d, refunded %d; want 2, 1", codes.spent, codes.refunded)
	}
	// A check whose answer was lost (the client hung up while the script
	// ran, and counted a try) is not given back: given back, one address
	// voided anyone's code for free (found by review).
	if err := l.SendCode(ctx, "+8613700137000"); err != nil {
		t.Fatal(err)
	}
	codes.unchecked = fmt.Errorf("%w: context canceled", seckill.ErrUnavailable)
	if _, _, err := l.LogIn(ctx, "192.0.2.1", "+8613700137000", sent.code); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("LogIn whose check was lost = %v", err)
	}
	codes.unchecked = nil
	if codes.spent != 3 || codes.refunded != 1 {
		t.Errorf("after a check whose answer was lost: spent %d, refunded %d; want 3, 1", codes.spent, codes.refunded)
	}
	// Refused: the code is not checked (it would log in), the refusal is the answer.
	if err := l.SendCode(ctx, "+8613900139000"); err != nil {
		t.Fatal(err)
	}
	codes.refuse = &seckill.Error{Kind: seckill.ErrRateLimited, Message: "too many", RetryAfter: time.Minute}
	if _, _, err := l.LogIn(ctx, "192.0.2.1", "+8613900139000", sent.code); !errors.Is(err, seckill.ErrRateLimited) {
		t.Fatalf("LogIn over the allowance = %v, want ErrRateLimited", err)
	}
	if codes.codes["+8613900139000"] != sent.code {
		t.Error("a refused attempt consumed the code")
	}
}

// TestLogInLegacyForms: the login hands the store the forms its phone
// may have been stored in before normalisation.
func TestLogInLegacyForms(t *testing.T) {
	t.Parallel()
	sent := &lastCode{}
	l := newTestLogin(t, &memCodes{codes: map[string]string{}}, sent)
	l.CountryCode = "86"
	users := l.Users.(*memUsers)
	ctx := context.Background()
	if err := l.SendCode(ctx, "138 0013 8000"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.LogIn(ctx, "", "138 0013 8000", sent.code); err != nil {
		t.Fatal(err)
	}
	if want := []string{"008613800138000", "13800138000", "013800138000"}; !slices.Equal(users.legacy, want) {
		t.Errorf("EnsureUser was given legacy forms %q, want %q", users.legacy, want)
	}
}

func TestLegacyPhones(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e164, country string
		want          []string
	}{
		{"+8613800138000", "", []string{"008613800138000"}},
		{"+8613800138000", "86", []string{"008613800138000", "13800138000", "013800138000"}},
		// Another country's number: no national form of the configured one.
		{"+442079460000", "86", []string{"00442079460000"}},
		{"+442079460000", "44", []string{"00442079460000", "2079460000", "02079460000"}},
		// The old login took at most 15 digits: "00" and 14 do not fit.
		{"+12345678901234", "", nil},
		// Nor fewer than 6: the national part of a short number.
		{"+6834002", "683", []string{"006834002"}},
	} {
		got := LegacyPhones(tc.e164, tc.country)
		if !slices.Equal(got, tc.want) {
			t.Errorf("LegacyPhones(%q, %q) = %q, want %q", tc.e164, tc.country, got, tc.want)
		}
		// Each is read today as the number it is a form of.
		for _, f := range got {
			if n, err := NormalizePhone(f, tc.country); err != nil || n != tc.e164 {
				t.Errorf("NormalizePhone(%q, %q) = %q, %v; want %q", f, tc.country, n, err, tc.e164)
			}
		}
	}
}

// wrongCode returns a well-formed code other than code.
func wrongCode(code string) string {
	w := strings.Repeat("0", CodeLen)
	if w == code {
		w = strings.Repeat("1", CodeLen)
	}
	return w
}

func wantUnsent(t *testing.T, err, cause error) {
	t.Helper()
	var e *seckill.Error
	if !errors.Is(err, seckill.ErrUnavailable) || !errors.As(err, &e) || e.RetryAfter <= 0 {
		t.Fatalf("SendCode with a failing sender = %v, want an ErrUnavailable *Error with RetryAfter", err)
	}
	if !errors.Is(err, cause) {
		t.Errorf("SendCode's error %v does not wrap the sender's %v", err, cause)
	}
}
