package seckill

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// AdmissionCache is the part of the cache that admits buyers: the
// admission scripts, and the buyer's slot that tells the outcome of one
// whose answer was lost.
type AdmissionCache interface {
	// Admit and Reserve are OrderCache's.
	Admit(ctx context.Context, a Admission) error
	Reserve(ctx context.Context, a Admission) error
	// BuyerOrder is OrderCache's.
	BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}

// Admitter admits buyers in the cache, for every caller (a buy, a dead
// letter's retry), with the recoveries an admission may need: the
// voucher's generation comes from its row; a cache server not checked
// since it started is checked first (CacheFence.Check); a voucher the
// cache lost is rebuilt before admitting again (VoucherService.Rebuild);
// and an admission whose answer was lost is answered from the buyer's
// slot.
type Admitter struct {
	// Mode is how orders are taken: the queue mode admits with Reserve,
	// the stream mode with Admit. Default ModeStream.
	Mode  Mode
	Cache AdmissionCache
	// Vouchers gives the vouchers' rows and rebuilds those the cache lost.
	Vouchers *VoucherService
	// Fence checks the cache server when the cache says it must.
	Fence  *CacheFence
	Logger *slog.Logger
	// Now returns the current time. Default the Vouchers' clock.
	Now func() time.Time
	// Lookup bounds the read of the buyer's slot after an admission whose
	// answer was lost. Default 1s.
	Lookup time.Duration
}

// Admit admits a: nil if admitted; else an error of kind ErrDuplicateOrder
// (with the buyer's order id), ErrSoldOut, ErrNotStarted, ErrEnded,
// ErrVoucherNotFound, or ErrUnavailable with RetryAfter.
//
// A cache server not checked since it started (ErrCacheUnverified) is
// checked first; a voucher the cache lost (ErrVoucherNotLoaded) is rebuilt
// before admitting again, unless its sale has ended: then ErrEnded without
// a rebuild (its keys may have been deleted after the retention). An
// admission whose answer was lost (ErrUnavailable: the script may have
// run) is answered from the buyer's slot (answerFromSlot). An admission
// that answers an *Error of kind ErrUnavailable itself (one not yet on
// enough replicas) is answered as it is.
func (s *Admitter) Admit(ctx context.Context, a Admission) error {
	voucherID := a.VoucherID
	admit := func(ctx context.Context, gen int64) error {
		a.Generation = gen
		var err error
		if s.Mode == ModeQueue {
			err = s.Cache.Reserve(ctx, a)
		} else {
			err = s.Cache.Admit(ctx, a)
		}
		var final *Error
		if errors.As(err, &final) && final.Kind == ErrUnavailable {
			// The cache's own answer (an admission not yet on enough
			// replicas): reading the slot back would answer admitted.
			return err
		}
		if errors.Is(err, ErrUnavailable) {
			return s.answerFromSlot(ctx, a, err)
		}
		return err
	}
	v, err := s.Vouchers.rows.get(ctx, s.Vouchers.Store, voucherID)
	if err != nil {
		if errors.Is(err, ErrVoucherNotFound) {
			return err
		}
		s.Logger.Warn("admission waits: the voucher could not be read from the database", "voucher", voucherID, "err", err)
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v.Generation)
	if errors.Is(err, ErrCacheUnverified) {
		if rerr := s.Fence.Check(ctx); rerr != nil {
			s.Logger.Warn("admission waits: Redis could not be checked", "voucher", voucherID, "err", rerr)
			return restoring("the sale is being restored after a Redis restart; try again")
		}
		err = admit(ctx, v.Generation)
	}
	if errors.Is(err, ErrCacheUnverified) {
		// Disarmed again at once: another check began.
		return restoring("the sale is being restored after a Redis restart; try again")
	}
	if !errors.Is(err, ErrVoucherNotLoaded) {
		return err
	}
	if !s.now().Before(v.EndTime) {
		return Errorf(ErrEnded, "the sale of voucher %d has ended", voucherID)
	}
	if err := s.Vouchers.Rebuild(ctx, voucherID); err != nil {
		if errors.Is(err, ErrVoucherNotFound) {
			return err
		}
		s.Logger.Warn("admission waits: the voucher could not be rebuilt in Redis", "voucher", voucherID, "err", err)
		return restoring("the sale is being restored; try again")
	}
	if v, err = s.Vouchers.rows.get(ctx, s.Vouchers.Store, voucherID); err != nil {
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v.Generation)
	if errors.Is(err, ErrVoucherNotLoaded) || errors.Is(err, ErrCacheUnverified) {
		// Rebuilt, and gone again at once: Redis is in trouble.
		return restoring("the sale is being restored; try again")
	}
	return err
}

// answerFromSlot answers an admission whose answer was lost (cause) from
// the buyer's slot, read for up to Lookup: admission records the buyer
// with the order, so a slot holding a.OrderID means admitted (nil), one
// holding another order is that order (ErrDuplicateOrder); an empty or
// unreadable slot is ErrUnavailable with RetryAfter.
func (s *Admitter) answerFromSlot(ctx context.Context, a Admission, cause error) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(s.Lookup, time.Second))
	defer cancel()
	existing, err := s.Cache.BuyerOrder(lctx, a.UserID, a.VoucherID)
	switch {
	case err != nil:
		s.Logger.Warn("admission outcome unknown", "voucher", a.VoucherID, "user", a.UserID, "err", cause, "lookup_err", err)
		return &Error{Kind: ErrUnavailable, Message: "your order's outcome is not known yet; try again, you will not buy twice", RetryAfter: time.Second}
	case existing == 0:
		return &Error{Kind: ErrUnavailable, Message: "your order was not taken; try again", RetryAfter: time.Second}
	case existing != a.OrderID:
		return duplicate(existing)
	}
	return nil
}

func (s *Admitter) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return s.Vouchers.Now()
}

// restoring is the answer to an admission that did not run: try again.
func restoring(msg string) error {
	return &Error{Kind: ErrUnavailable, Message: msg, RetryAfter: time.Second}
}
