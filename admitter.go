package seckill

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
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
	// Borrow moves stock to the home shard of a sharded voucher, which an
	// admission found sold out, from the voucher's other shards (Shard).
	// It answers Moved > 0 when the home shard has stock now, SoldOut when
	// the whole voucher is sold out (every shard at 0, nothing in flight),
	// neither when no stock can move now (try again); ErrVoucherNotLoaded
	// when a shard must be rebuilt first.
	Borrow(ctx context.Context, voucherID int64, home int) (Borrowed, error)
}

// Borrowed is what a borrow of stock for a home shard found or did
// (AdmissionCache.Borrow).
type Borrowed struct {
	// Moved is how many units the home shard has gained: moved there by
	// the borrow, or found there already (another borrower's).
	Moved int64
	// SoldOut says that every shard of the voucher is at 0 and no stock is
	// in flight between them: the voucher is sold out.
	SoldOut bool
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

	// borrows makes the admissions of one home shard found sold out at
	// once wait for one borrow (borrowFor), not each run its own.
	borrows singleflight.Group
	// soldOut holds, by voucher id, until when (unix ns) a sharded voucher
	// found sold out by a borrow is answered so without borrowing again.
	soldOut sync.Map
}

// borrowRounds bounds how many times an admission found sold out on its
// home shard borrows and admits again before it answers unavailable.
const borrowRounds = 4

// soldOutFor is how long a borrow's finding that a sharded voucher is
// sold out is trusted: the admissions that still run after it (the
// service's sold-out memory answers most buys of a sold-out voucher
// before they admit; these run on the buyer's home shard, which answers a
// buyer's own order first) answer sold out without reading every shard
// again. Stock given back later (a dead letter, a repair) is sold again
// after at most this long.
const soldOutFor = 100 * time.Millisecond

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
// enough replicas) is answered as it is. A buyer of a sharded voucher is
// admitted on their home shard (HomeShard) alone; when it is sold out,
// stock is borrowed from the other shards first (borrow).
func (s *Admitter) Admit(ctx context.Context, a Admission) error {
	voucherID := a.VoucherID
	admit := func(ctx context.Context, v *Voucher) error {
		a.Generation = v.Generation
		a.Shard = HomeShard(a.UserID, v.ShardCount())
		err := s.admitOnce(ctx, a)
		if v.ShardCount() > 1 && errors.Is(err, ErrSoldOut) {
			return s.borrow(ctx, a)
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
	err = admit(ctx, v)
	if errors.Is(err, ErrCacheUnverified) {
		if rerr := s.Fence.Check(ctx); rerr != nil {
			s.Logger.Warn("admission waits: Redis could not be checked", "voucher", voucherID, "err", rerr)
			return restoring("the sale is being restored after a Redis restart; try again")
		}
		err = admit(ctx, v)
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
	err = admit(ctx, v)
	if errors.Is(err, ErrVoucherNotLoaded) || errors.Is(err, ErrCacheUnverified) {
		// Rebuilt, and gone again at once: Redis is in trouble.
		return restoring("the sale is being restored; try again")
	}
	return err
}

// admitOnce runs the admission of a once, in the mode's way. An admission
// whose answer was lost is answered from the buyer's slot.
func (s *Admitter) admitOnce(ctx context.Context, a Admission) error {
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

// borrow answers an admission that found the home shard of a sharded
// voucher sold out: stock is borrowed from the other shards
// (AdmissionCache.Borrow) and the admission runs again, up to borrowRounds
// times; it runs again also after a borrow that found the voucher sold out
// or could move nothing, since the buyer's other ask may have taken a unit
// meanwhile (G5). Sold out only when the whole voucher is; when no stock
// could move now, ErrUnavailable with RetryAfter; ErrVoucherNotLoaded when
// a shard must be rebuilt (Admit rebuilds it), ErrCacheUnverified when a
// shard's server was not checked since it lost its scripts (Admit checks
// it).
func (s *Admitter) borrow(ctx context.Context, a Admission) error {
	for range borrowRounds {
		b, err := s.borrowFor(ctx, a.VoucherID, a.Shard)
		switch {
		case errors.Is(err, ErrVoucherNotLoaded), errors.Is(err, ErrCacheUnverified):
			// Admit rebuilds the shard, or checks the server, first.
			return err
		case err != nil:
			if ctx.Err() == nil { // not the buyer gone
				s.Logger.Warn("admission waits: stock could not be borrowed from the voucher's other shards", "voucher", a.VoucherID, "shard", a.Shard, "err", err)
			}
			return restoring("the sale cannot reach all of its stock right now; try again")
		case b.SoldOut:
			// The buyer's other ask (on another instance, or borrowing
			// before this borrow began) may have taken the last unit since
			// this admission found the home shard empty: the admission
			// runs again, and answers that order (G5), or sold out.
			return s.admitOnce(ctx, a)
		case b.Moved == 0:
			// Nothing can move now; but the buyer's other ask may hold a
			// unit since, or one may have come home: the admission runs
			// again before the buyer is told to try again.
			if err = s.admitOnce(ctx, a); !errors.Is(err, ErrSoldOut) {
				return err
			}
			return moving()
		}
		if err = s.admitOnce(ctx, a); !errors.Is(err, ErrSoldOut) {
			return err
		}
	}
	return moving()
}

// borrowFor runs one borrow for the home shard, shared by the admissions
// that ask for it while it runs, unless the voucher was found sold out
// less than soldOutFor ago.
func (s *Admitter) borrowFor(ctx context.Context, voucherID int64, home int) (Borrowed, error) {
	now := s.now().UnixNano()
	if until, ok := s.soldOut.Load(voucherID); ok {
		if now < until.(int64) {
			return Borrowed{SoldOut: true}, nil
		}
		s.soldOut.CompareAndDelete(voucherID, until)
	}
	ch := s.borrows.DoChan(strconv.FormatInt(voucherID, 10)+"/"+strconv.Itoa(home), func() (any, error) {
		// Shared by every caller: not bound to the first one's request.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		b, err := s.Cache.Borrow(bctx, voucherID, home)
		if err == nil && b.SoldOut {
			s.soldOut.Store(voucherID, s.now().Add(soldOutFor).UnixNano())
		}
		return b, err
	})
	select {
	case <-ctx.Done():
		return Borrowed{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return Borrowed{}, r.Err
		}
		return r.Val.(Borrowed), nil
	}
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

// moving is the answer to a buy of a sharded voucher whose last units are
// on their way between shards: expected near a sell-out, not a failure.
func moving() error {
	return &Error{Kind: ErrUnavailable, Message: "the last units are moving to where they are asked for; try again", RetryAfter: time.Second, Expected: true}
}
