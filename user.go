package seckill

import (
	"context"
	"errors"
	"time"
)

// User is a buyer, known by the phone number they log in with.
type User struct {
	ID        int64
	Phone     string
	CreatedAt time.Time
}

// UserStore keeps users in the database.
type UserStore interface {
	// EnsureUser returns the user with the phone number, creating one if
	// there is none; created reports which. Concurrent calls for one phone
	// return the same user.
	//
	// legacy are the forms the same number may have been stored in before
	// phones were normalised (auth.LegacyPhones). When no user has phone
	// but one has a legacy form, that user is the phone's: its phone is
	// rewritten to phone, and it is returned (created false); of several,
	// the oldest. A legacy user is never merged into a user that already
	// has phone: both are left as they are.
	EnsureUser(ctx context.Context, phone string, legacy ...string) (u *User, created bool, err error)
	// User returns the user with the id, or ErrUserNotFound.
	User(ctx context.Context, id int64) (*User, error)
}

// LoginCodes keeps the one-time codes that prove a buyer holds a phone, and
// the allowance of wrong codes that bounds guessing them.
type LoginCodes interface {
	// IssueCode stores code as the phone's login code, replacing any
	// earlier one, unless a code was issued for the phone too recently:
	// then it changes nothing and issued is false (the earlier code
	// stands).
	IssueCode(ctx context.Context, phone, code string) (issued bool, err error)
	// RedeemCode consumes the phone's code if code matches it. A wrong, expired
	// or missing code is ErrUnauthorized, with one message whichever it is;
	// too many wrong tries void the code.
	RedeemCode(ctx context.Context, phone, code string) error
	// WithdrawCode takes back a code that could not be sent: it deletes the
	// phone's code if it is still code, and the phone's wait for a new one.
	WithdrawCode(ctx context.Context, phone, code string) error
	// SpendGuess counts a login attempt against the allowances of lim, the
	// client's (client is its address; empty: none is kept) and all
	// clients' together, before the code is checked. Over either it
	// changes nothing and returns an *Error of kind ErrRateLimited, with
	// RetryAfter set.
	SpendGuess(ctx context.Context, client string, lim GuessLimits) error
	// RefundGuess gives back an attempt SpendGuess counted, for a code that
	// was right (or could not be checked): the allowances count wrong codes.
	RefundGuess(ctx context.Context, client string) error
}

// GuessLimits are the allowances of wrong login codes, each per Window: a
// bound on guessing codes across many phones, which a code's own tries do
// not bound. Zero PerClient or Global keeps no such allowance; zero Window
// keeps none at all.
type GuessLimits struct {
	PerClient int64
	Global    int64
	Window    time.Duration
}

// On reports whether lim keeps any allowance.
func (lim GuessLimits) On() bool { return lim.Window > 0 && (lim.PerClient > 0 || lim.Global > 0) }

// ErrCodeUnsent marks a CodeSender's error that says the code surely did
// not leave this process: no connection could be made, or the request was
// not written whole. Only then is the code taken back and the phone let ask
// again at once; after any other failure the gateway may have the code.
var ErrCodeUnsent = errors.New("login code not sent")

// CodeSender delivers a login code to the holder of a phone: by SMS, through
// a webhook the operator runs (auth.WebhookSender); on the embedded default
// only, to the log (auth.LogSender). An error wraps ErrCodeUnsent when the
// code surely did not reach the gateway.
type CodeSender interface {
	SendCode(ctx context.Context, phone, code string) error
}
