package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/seckill/seckill"
)

// Login is the phone-code login: a buyer asks for a code, the code goes to
// their phone, and the code buys a token.
type Login struct {
	Codes  seckill.LoginCodes
	Sender seckill.CodeSender
	Users  seckill.UserStore
	Tokens *Tokens
	// TokenTTL is how long a login token lasts.
	TokenTTL time.Duration
	// CountryCode is the country calling code (digits, as "86") of phone
	// numbers written without one; empty: a number must carry its own.
	CountryCode string
	// SendTimeout bounds a send, which runs on a context of its own: a
	// buyer who hangs up does not stop it, since the gateway may have the
	// code already. Zero is DefaultSendTimeout.
	SendTimeout time.Duration
	// Guesses are the allowances of wrong codes, per client address and
	// for all instances together; the zero value keeps none.
	Guesses seckill.GuessLimits
	Logger  *slog.Logger

	// sends are the times recent sends took, to answer a phone whose code
	// stands no sooner than a send would.
	sends sendTimes
}

// DefaultSendTimeout is the SendTimeout of a Login that sets none.
const DefaultSendTimeout = 10 * time.Second

// DefaultGuesses are serve's allowances of wrong codes (docs/design/login.md,
// Login): with 8-digit codes they make taking over an account by guessing
// about a once-in-a-year event for a whole deployment.
var DefaultGuesses = seckill.GuessLimits{PerClient: 30, Global: 10_000, Window: time.Hour}

// Timings of a failed send.
const (
	// sendRetryAfter is what a buyer is told to wait after a code that
	// was not sent: more than a second, not to press on a gateway that is
	// struggling.
	sendRetryAfter = 5 * time.Second
	// maybeSentRetryAfter is what a buyer is told to wait after a send
	// that failed once the gateway may have had the code: the phone's wait
	// for a new code (redis.CodeCooldown), which stands.
	maybeSentRetryAfter = time.Minute
	// withdrawTimeout bounds taking back an unsent code, and giving back
	// a login attempt.
	withdrawTimeout = 2 * time.Second
)

// SendCode makes a code for the phone, stores it and sends it. A phone
// that got a code within the last minute keeps it, and nothing is sent;
// the answer is the same as for a code sent, and comes no sooner than a
// send takes, so that it does not say whether the phone has a code
// outstanding. A code that surely did not reach the gateway is withdrawn
// and the error is ErrUnavailable; one that may have stays, with the
// phone's wait, and the error is ErrUnavailable too.
func (l *Login) SendCode(ctx context.Context, phone string) error {
	phone, err := NormalizePhone(phone, l.CountryCode)
	if err != nil {
		return err
	}
	code, err := newCode()
	if err != nil {
		return err
	}
	issued, err := l.Codes.IssueCode(ctx, phone, code)
	if err != nil {
		return err
	}
	if !issued {
		l.sends.wait(ctx)
		return nil
	}
	return l.send(ctx, phone, code)
}

// send sends an issued code on a context detached from the request's: a
// buyer who hangs up once the gateway has the code must not take it back,
// nor the phone's wait, or each retry would be one more SMS.
func (l *Login) send(ctx context.Context, phone, code string) error {
	timeout := l.SendTimeout
	if timeout <= 0 {
		timeout = DefaultSendTimeout
	}
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	err := l.Sender.SendCode(sendCtx, phone, code)
	if err == nil {
		l.sends.record(time.Since(start))
		return nil
	}
	if errors.Is(err, seckill.ErrCodeUnsent) {
		l.withdraw(ctx, phone, code)
		unsent := &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the login code could not be sent; try again in a moment", RetryAfter: sendRetryAfter}
		return fmt.Errorf("send login code: %w: %w", unsent, err)
	}
	maybe := &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the login code may not have been sent; if none arrives, ask again in a minute", RetryAfter: maybeSentRetryAfter}
	return fmt.Errorf("send login code: %w: %w", maybe, err)
}

// withdraw takes back a code that could not be sent, so that it is never
// usable unsent. On its own deadline: the request's may be what ran out.
func (l *Login) withdraw(ctx context.Context, phone, code string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	if err := l.Codes.WithdrawCode(ctx, phone, code); err != nil {
		l.Logger.Warn("an unsent login code could not be withdrawn; it expires on its own", "err", err)
	}
}

// LogIn redeems the phone's code and returns a token for the phone's user,
// creating the user on their first login (or taking over the row of the
// phone as it was stored before phones were normalised: LegacyPhones).
// client is the client's address, for its allowance of wrong codes; empty
// when there is none.
func (l *Login) LogIn(ctx context.Context, client, phone, code string) (string, *seckill.User, error) {
	phone, err := NormalizePhone(phone, l.CountryCode)
	if err != nil {
		return "", nil, err
	}
	if err := checkCode(code); err != nil {
		return "", nil, err
	}
	guarded := l.Guesses.On()
	if guarded {
		if err := l.Codes.SpendGuess(ctx, client, l.Guesses); err != nil {
			return "", nil, err
		}
	}
	err = l.Codes.RedeemCode(ctx, phone, code)
	if guarded && err == nil {
		// A right code: the allowances count wrong codes. One that could
		// not be checked counts as wrong: the script may have run and
		// counted a try (a client that hangs up mid-check), and giving
		// it back let one address void anyone's code for free (found by
		// review).
		l.refund(ctx, client)
	}
	if err != nil {
		return "", nil, err
	}
	u, created, err := l.Users.EnsureUser(ctx, phone, LegacyPhones(phone, l.CountryCode)...)
	if err != nil {
		return "", nil, fmt.Errorf("log in: %w", err)
	}
	if created {
		l.Logger.Info("new user", "user", u.ID)
	}
	token, err := l.Tokens.Mint(Identity{UserID: u.ID}, l.TokenTTL)
	if err != nil {
		return "", nil, err
	}
	return token, u, nil
}

// refund gives back a login attempt, on its own deadline; one that cannot
// be given back only shortens the allowance until its window ends.
func (l *Login) refund(ctx context.Context, client string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	if err := l.Codes.RefundGuess(ctx, client); err != nil {
		l.Logger.Warn("a login attempt could not be given back to the allowance of wrong codes", "err", err)
	}
}

// CodeLen is the number of digits in a login code: 8, so that a guess
// hits one time in 100 million (docs/design/login.md, Login).
const CodeLen = 8

// codeSpace is the number of codes, 10^CodeLen.
const codeSpace = 100_000_000

func checkCode(code string) error {
	if len(code) != CodeLen {
		return seckill.Errorf(seckill.ErrInvalidArgument, "code: must be %d digits", CodeLen)
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return seckill.Errorf(seckill.ErrInvalidArgument, "code: must be %d digits", CodeLen)
		}
	}
	return nil
}

func newCode() (string, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(codeSpace))
	if err != nil {
		return "", fmt.Errorf("make login code: %w", err)
	}
	return fmt.Sprintf("%0*d", CodeLen, n.Int64()), nil
}

// LogSender "sends" login codes by writing them to the log: for the
// embedded default, to try login out. Anyone who reads the log can log in
// as anyone, so serve never uses it on real services.
type LogSender struct {
	Logger *slog.Logger
}

// SendCode writes the code to the log.
func (s LogSender) SendCode(_ context.Context, phone, code string) error {
	s.Logger.Info("login code", "phone", phone, "code", code)
	return nil
}
