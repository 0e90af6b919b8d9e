package redisledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/seckill/seckill"
)

// controlLockTTL bounds a control's hold on the voucher's control lock: a
// holder that died frees it after this long. A live holder renews it
// every third of that.
const controlLockTTL = 30 * time.Second

// controlWrites bounds a control's writes in Redis after its database
// write, which go on when the caller has gone away.
const controlWrites = 10 * time.Second

// Control applies an operator's control (seckill.VoucherLedger) under the
// voucher's control lock: write, then Redis. A pause or an end is written
// into what admission reads on every shard held in this generation
// (Cache.Control); an addition of stock makes Redis take the stock from
// the database (restock). Both go on when the caller has gone away: the
// database has the change, and Redis must too (found by review: nobody
// was left to ask again). The stock the answer tells is read before the
// lock is given back: after it, another instance's addition may have
// unloaded it (found by review: an addition answered 200 with no stock).
func (l *Ledger) Control(ctx context.Context, id int64, c seckill.Control, write func(context.Context) (*seckill.Voucher, error)) (view *seckill.VoucherView, err error) {
	err = l.withControlLock(ctx, id, func() error {
		v, err := write(ctx)
		if err != nil {
			return err
		}
		view = &seckill.VoucherView{Voucher: v}
		if c == seckill.ControlAddStock {
			view.Remaining, err = l.restocked(ctx, id)
			return err
		}
		// A voucher past its retention is not in Redis, nor ever rebuilt
		// there (Rebuild refuses it): nothing there to control.
		if !l.now().Before(v.EndTime.Add(l.Vouchers.RetentionOrDefault())) {
			view.Remaining, err = l.remaining(ctx, id)
			return err
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlWrites)
		defer cancel()
		ended := c == seckill.ControlEnd
		if err := l.Cache.Control(rctx, v, ended); err != nil {
			l.Logger.Error("voucher's control saved but not written to Redis", "voucher", v.ID, "paused", v.Paused, "ended", ended, "err", err)
			return &seckill.Error{Kind: seckill.ErrUnavailable, Message: fmt.Sprintf("voucher %d was changed in the database but Redis could not be told; ask again", v.ID), RetryAfter: time.Second}
		}
		view.Remaining, err = l.remaining(ctx, id)
		return err
	})
	return view, err
}

// remaining reads the voucher's stock in Redis: nil when Redis does not
// hold it.
func (l *Ledger) remaining(ctx context.Context, id int64) (*int64, error) {
	left, err := l.Cache.Remaining(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read remaining stock: %w", err)
	}
	if n, ok := left[id]; ok {
		return &n, nil
	}
	return nil, nil
}

// restocked makes Redis take the voucher's stock from the database after
// an addition (restock), and returns it loaded: unloaded again since by
// another instance's addition, it is rebuilt, as a buy would, up to three
// times (then nil: what Redis holds is for a later read to tell).
func (l *Ledger) restocked(ctx context.Context, id int64) (*int64, error) {
	unavailable := func(err error) error {
		l.Logger.Error("stock added in the database but not yet in Redis: ask again with the same Idempotency-Key, or run seckill reconcile --repair", "voucher", id, "err", err)
		return &seckill.Error{Kind: seckill.ErrUnavailable, Message: fmt.Sprintf("the stock of voucher %d was added in the database but Redis has not taken it yet; ask again with the same Idempotency-Key (nothing is added twice)", id), RetryAfter: time.Second}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.rebuildTimeout()+controlWrites)
	defer cancel()
	if err := l.restock(rctx, id, time.Now()); err != nil {
		return nil, unavailable(err)
	}
	for range 3 {
		n, err := l.remaining(ctx, id)
		if err != nil || n != nil {
			return n, err
		}
		if err := l.Rebuild(ctx, id); err != nil {
			return nil, unavailable(err)
		}
	}
	return l.remaining(ctx, id)
}

// withControlLock runs f holding the voucher's control lock in Redis
// (Cache.LockControl), waiting within ctx for another holder. A control
// is a database write and then writes in Redis: without the lock, a pause
// and a resume on two instances could apply in one order in the database
// and the other in Redis (found by review: the database paused, Redis
// admitting), and two additions of stock could each rebuild Redis from a
// row that lacks the other's units, the later rebuild finding the
// earlier's stock and setting nothing (an addition lost in Redis, both
// answered 200).
func (l *Ledger) withControlLock(ctx context.Context, id int64, f func() error) error {
	token := newToken()
	busy := &seckill.Error{Kind: seckill.ErrUnavailable, Message: fmt.Sprintf("another control of voucher %d is under way; ask again", id), RetryAfter: time.Second}
	for {
		ok, err := l.Cache.LockControl(ctx, id, token, controlLockTTL)
		if err != nil {
			// The SET may have taken it and its answer been lost: give it
			// back rather than hold every control off for the TTL.
			l.Cache.UnlockControl(context.WithoutCancel(ctx), id, token)
			l.Logger.Warn("the voucher's control lock could not be taken", "voucher", id, "err", err)
			return &seckill.Error{Kind: seckill.ErrUnavailable, Message: fmt.Sprintf("voucher %d cannot be changed right now: Redis does not answer; ask again", id), RetryAfter: time.Second}
		}
		if ok {
			break
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return busy
		case <-t.C:
		}
	}
	// Renewed while the control runs: a rebuild of a big voucher, or a
	// Redis failover waited out, may outlast the TTL (found by review).
	// A renewal that fails is tried again: the control goes on either way.
	stopRenewing := renewEvery(context.WithoutCancel(ctx), controlLockTTL, func(rctx context.Context) bool {
		if ok, err := l.Cache.RenewControl(rctx, id, token, controlLockTTL); err == nil && !ok {
			l.Logger.Error("a control lost the voucher's control lock while it ran: another control may have interleaved with it; compare the admin page with reconcile", "voucher", id)
			return false
		}
		return true
	})
	defer func() {
		stopRenewing()
		if err := l.Cache.UnlockControl(context.WithoutCancel(ctx), id, token); err != nil {
			l.Logger.Warn("the voucher's control lock could not be given back; it lapses by itself", "voucher", id, "lapses_in", controlLockTTL, "err", err)
		}
	}()
	return f()
}

// restock makes Redis take the voucher's stock from the database as it was
// committed at committed (a time on this process's clock), or later: it
// unloads the stock (keeping the buyers) and rebuilds it. Calls for one
// voucher take turns; one that finds a restock begun after its commit
// succeeded already is done.
func (l *Ledger) restock(ctx context.Context, id int64, committed time.Time) error {
	r := l.restocker(id)
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.turn }()
	if r.done.After(committed) {
		return nil
	}
	began := time.Now()
	if err := l.Cache.UnloadStock(ctx, id); err != nil {
		return err
	}
	// The row read now, after the commit and the unload: not a rebuild
	// in flight's, which may have read it before the units were added.
	v, err := l.Vouchers.Store.Voucher(ctx, id)
	if err != nil {
		return err
	}
	l.Vouchers.Remember(v)
	if err := l.rebuild(ctx, v); err != nil {
		return err
	}
	r.done = began
	return nil
}

// restocker is one voucher's turn to restock, and when the last restock
// that succeeded began (guarded by the turn).
type restocker struct {
	turn chan struct{}
	done time.Time
}

func (l *Ledger) restocker(id int64) *restocker {
	r, _ := l.restocks.LoadOrStore(id, &restocker{turn: make(chan struct{}, 1)})
	return r.(*restocker)
}

func newToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
