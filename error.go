package seckill

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors name the outcomes a client can act on. Adapters wrap them
// (with %w, or in an [*Error] carrying a message for the client); the HTTP
// layer maps each to one status and code in a single table.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnauthorized    = errors.New("unauthorized")
	ErrForbidden       = errors.New("forbidden")
	ErrVoucherNotFound = errors.New("voucher not found")
	ErrOrderNotFound   = errors.New("order not found")
	ErrUserNotFound    = errors.New("user not found")
	ErrSoldOut         = errors.New("sold out")
	ErrDuplicateOrder  = errors.New("duplicate order")
	ErrNotStarted      = errors.New("sale has not started")
	ErrEnded           = errors.New("sale has ended")
	// ErrPaused says an operator paused the voucher's sale: nothing is
	// admitted until they resume it.
	ErrPaused             = errors.New("sale is paused")
	ErrRateLimited        = errors.New("rate limited")
	ErrUnavailable        = errors.New("service unavailable")
	ErrDeadLetterNotFound = errors.New("dead letter not found")
)

// ErrVoucherNotLoaded says that Redis holds no stock or window for a
// voucher: Redis lost it, or never had it. Admission rebuilds the voucher
// from the database before it admits again (G6). It never reaches a client.
var ErrVoucherNotLoaded = errors.New("voucher not loaded in Redis")

// ErrCacheUnverified says that the Redis server has not been checked since
// it started (or failed over, or lost its scripts): its data may be older
// than the database's, and admission waits until the open vouchers are
// rebuilt from the database ([VoucherService.Recover]). It never reaches a
// client.
var ErrCacheUnverified = errors.New("redis not verified since it started")

// ErrTransient marks a failure worth retrying as it is: a lost connection,
// a deadlock, a lock wait timeout, a serialization failure. Stores wrap such
// errors with it; it never reaches a client.
var ErrTransient = errors.New("transient failure")

// Error is a domain error with a message that is safe to show to a client.
// Kind is one of the sentinel errors above, so errors.Is(err, ErrSoldOut)
// holds for an *Error of that kind however deeply it is wrapped.
type Error struct {
	Kind    error
	Message string

	// OrderID is the buyer's existing order for ErrDuplicateOrder.
	OrderID int64
	// RetryAfter tells a client when to try again, for ErrRateLimited and
	// ErrUnavailable; zero when unknown.
	RetryAfter time.Duration
	// Expected marks an ErrUnavailable that a sale answers in its ordinary
	// course, not a failure (a sharded voucher's last units moving to the
	// shard asked for): the HTTP layer does not log it, as it does not log
	// sold_out. The client's answer is the same.
	Expected bool
}

// Errorf returns an *Error of the given kind with a formatted client message.
func Errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Kind.Error()
	}
	return e.Message
}

// Unwrap returns the error's kind.
func (e *Error) Unwrap() error { return e.Kind }
