package auth

import (
	"context"
	"crypto/rand"
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
	Logger   *slog.Logger
}

// SendCode makes a 6-digit code for the phone, stores it and sends it.
func (l *Login) SendCode(ctx context.Context, phone string) error {
	if err := CheckPhone(phone); err != nil {
		return err
	}
	code, err := newCode()
	if err != nil {
		return err
	}
	if err := l.Codes.IssueCode(ctx, phone, code); err != nil {
		return err
	}
	if err := l.Sender.SendCode(ctx, phone, code); err != nil {
		return fmt.Errorf("send login code: %w: %w", seckill.ErrUnavailable, err)
	}
	return nil
}

// LogIn redeems the phone's code and returns a token for the phone's user,
// creating the user on their first login.
func (l *Login) LogIn(ctx context.Context, phone, code string) (string, *seckill.User, error) {
	if err := CheckPhone(phone); err != nil {
		return "", nil, err
	}
	if err := checkCode(code); err != nil {
		return "", nil, err
	}
	if err := l.Codes.RedeemCode(ctx, phone, code); err != nil {
		return "", nil, err
	}
	u, created, err := l.Users.EnsureUser(ctx, phone)
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

// CheckPhone accepts a phone number written as 6 to 15 digits with an
// optional leading '+' (E.164 at most 15 digits), and nothing else.
func CheckPhone(phone string) error {
	digits := phone
	if len(digits) > 0 && digits[0] == '+' {
		digits = digits[1:]
	}
	if len(digits) < 6 || len(digits) > 15 {
		return seckill.Errorf(seckill.ErrInvalidArgument, "phone: must be 6 to 15 digits, optionally after a '+'")
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return seckill.Errorf(seckill.ErrInvalidArgument, "phone: must be 6 to 15 digits, optionally after a '+'")
		}
	}
	return nil
}

// CodeLen is the number of digits in a login code.
const CodeLen = 6

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
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		return "", fmt.Errorf("make login code: %w", err)
	}
	return fmt.Sprintf("%06d", n.Int64()), nil
}

// LogSender "sends" login codes by writing them to the log: the default
// until an SMS gateway is configured. Anyone who reads the log can log in
// as anyone, so use it only where the log is private.
type LogSender struct {
	Logger *slog.Logger
}

// SendCode writes the code to the log.
func (s LogSender) SendCode(_ context.Context, phone, code string) error {
	s.Logger.Info("login code", "phone", phone, "code", code)
	return nil
}
