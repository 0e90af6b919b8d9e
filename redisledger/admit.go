package redisledger

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/seckill/seckill"
)

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
func (l *Ledger) admit(ctx context.Context, a seckill.Admission) error {
	voucherID := a.VoucherID
	admit := func(ctx context.Context, v *seckill.Voucher) error {
		a.Generation = v.Generation
		a.Shard = seckill.HomeShard(a.UserID, v.ShardCount())
		err := l.admitOnce(ctx, a)
		if v.ShardCount() > 1 && errors.Is(err, seckill.ErrSoldOut) {
			return l.borrow(ctx, a)
		}
		return err
	}
	v, err := l.Vouchers.Row(ctx, voucherID)
	if err != nil {
		if errors.Is(err, seckill.ErrVoucherNotFound) {
			return err
		}
		l.Logger.Warn("admission waits: the voucher could not be read from the database", "voucher", voucherID, "err", err)
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v)
	if errors.Is(err, seckill.ErrCacheUnverified) {
		if rerr := l.Fence.Check(ctx); rerr != nil {
			l.Logger.Warn("admission waits: Redis could not be checked", "voucher", voucherID, "err", rerr)
			return restoring("the sale is being restored after a Redis restart; try again")
		}
		err = admit(ctx, v)
	}
	if errors.Is(err, seckill.ErrCacheUnverified) {
		// Disarmed again at once: another check began.
		return restoring("the sale is being restored after a Redis restart; try again")
	}
	if !errors.Is(err, seckill.ErrVoucherNotLoaded) {
		return err
	}
	if !l.now().Before(v.EndTime) {
		return seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", voucherID)
	}
	if err := l.Rebuild(ctx, voucherID); err != nil {
		if errors.Is(err, seckill.ErrVoucherNotFound) {
			return err
		}
		l.Logger.Warn("admission waits: the voucher could not be rebuilt in Redis", "voucher", voucherID, "err", err)
		return restoring("the sale is being restored; try again")
	}
	if v, err = l.Vouchers.Row(ctx, voucherID); err != nil {
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v)
	if errors.Is(err, seckill.ErrVoucherNotLoaded) || errors.Is(err, seckill.ErrCacheUnverified) {
		// Rebuilt, and gone again at once: Redis is in trouble.
		return restoring("the sale is being restored; try again")
	}
	return err
}

// admitOnce runs the admission of a once, in the mode's way. An admission
// whose answer was lost is answered from the buyer's slot.
func (l *Ledger) admitOnce(ctx context.Context, a seckill.Admission) error {
	var err error
	if l.Queue != nil {
		err = l.Cache.Reserve(ctx, a)
	} else {
		err = l.Cache.Admit(ctx, a)
	}
	var final *seckill.Error
	if errors.As(err, &final) && final.Kind == seckill.ErrUnavailable {
		// The cache's own answer (an admission not yet on enough
		// replicas): reading the slot back would answer admitted.
		return err
	}
	if errors.Is(err, seckill.ErrUnavailable) {
		return l.answerFromSlot(ctx, a, err)
	}
	return err
}

// borrow answers an admission that found the home shard of a sharded
// voucher sold out: stock is borrowed from the other shards
// (Cache.Borrow) and the admission runs again, up to borrowRounds
// times; it runs again also after a borrow that found the voucher sold out
// or could move nothing, since the buyer's other ask may have taken a unit
// meanwhile (G5). Sold out only when the whole voucher is; when no stock
// could move now, ErrUnavailable with RetryAfter; ErrVoucherNotLoaded when
// a shard must be rebuilt (Admit rebuilds it), ErrCacheUnverified when a
// shard's server was not checked since it lost its scripts (Admit checks
// it).
func (l *Ledger) borrow(ctx context.Context, a seckill.Admission) error {
	for range borrowRounds {
		b, err := l.borrowFor(ctx, a.VoucherID, a.Shard)
		switch {
		case errors.Is(err, seckill.ErrVoucherNotLoaded), errors.Is(err, seckill.ErrCacheUnverified):
			// Admit rebuilds the shard, or checks the server, first.
			return err
		case err != nil:
			if ctx.Err() == nil { // not the buyer gone
				l.Logger.Warn("admission waits: stock could not be borrowed from the voucher's other shards", "voucher", a.VoucherID, "shard", a.Shard, "err", err)
			}
			return restoring("the sale cannot reach all of its stock right now; try again")
		case b.SoldOut:
			// The buyer's other ask (on another instance, or borrowing
			// before this borrow began) may have taken the last unit since
			// this admission found the home shard empty: the admission
			// runs again, and answers that order (G5), or sold out.
			return l.admitOnce(ctx, a)
		case b.Moved == 0:
			// Nothing can move now; but the buyer's other ask may hold a
			// unit since, or one may have come home: the admission runs
			// again before the buyer is told to try again.
			if err = l.admitOnce(ctx, a); !errors.Is(err, seckill.ErrSoldOut) {
				return err
			}
			return moving()
		}
		if err = l.admitOnce(ctx, a); !errors.Is(err, seckill.ErrSoldOut) {
			return err
		}
	}
	return moving()
}

// borrowFor runs one borrow for the home shard, shared by the admissions
// that ask for it while it runs, unless the voucher was found sold out
// less than soldOutFor ago.
func (l *Ledger) borrowFor(ctx context.Context, voucherID int64, home int) (seckill.Borrowed, error) {
	now := l.now().UnixNano()
	if until, ok := l.soldOutShards.Load(voucherID); ok {
		if now < until.(int64) {
			return seckill.Borrowed{SoldOut: true}, nil
		}
		l.soldOutShards.CompareAndDelete(voucherID, until)
	}
	ch := l.borrows.DoChan(strconv.FormatInt(voucherID, 10)+"/"+strconv.Itoa(home), func() (any, error) {
		// Shared by every caller: not bound to the first one's request.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		b, err := l.Cache.Borrow(bctx, voucherID, home)
		if err == nil && b.SoldOut {
			l.soldOutShards.Store(voucherID, l.now().Add(soldOutFor).UnixNano())
		}
		return b, err
	})
	select {
	case <-ctx.Done():
		return seckill.Borrowed{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return seckill.Borrowed{}, r.Err
		}
		return r.Val.(seckill.Borrowed), nil
	}
}

// answerFromSlot answers an admission whose answer was lost (cause) from
// the buyer's slot, read for up to Lookup: admission records the buyer
// with the order, so a slot holding a.OrderID means admitted (nil), one
// holding another order is that order (ErrDuplicateOrder); an empty or
// unreadable slot is ErrUnavailable with RetryAfter.
func (l *Ledger) answerFromSlot(ctx context.Context, a seckill.Admission, cause error) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(l.Lookup, time.Second))
	defer cancel()
	existing, err := l.Cache.BuyerOrder(lctx, a.UserID, a.VoucherID)
	switch {
	case err != nil:
		l.Logger.Warn("admission outcome unknown", "voucher", a.VoucherID, "user", a.UserID, "err", cause, "lookup_err", err)
		return &seckill.Error{Kind: seckill.ErrUnavailable, Message: "your order's outcome is not known yet; try again, you will not buy twice", RetryAfter: time.Second}
	case existing == 0:
		return &seckill.Error{Kind: seckill.ErrUnavailable, Message: "your order was not taken; try again", RetryAfter: time.Second}
	case existing != a.OrderID:
		return duplicate(existing)
	}
	return nil
}
