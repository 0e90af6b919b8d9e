package seckill

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxIdempotencyKey bounds the Idempotency-Key of an addition of stock.
const MaxIdempotencyKey = 100

// The operator's controls of a voucher on sale (docs/design/controls.md, Operator
// controls): pause and resume, end now, add stock. Each answers only once
// what admission reads holds it: the database (the truth, which a rebuild
// reads), and in the stream and queue modes Redis too.

// Pause pauses the voucher's sale (paused true) or resumes it, and returns
// it as it is now. Once Pause has returned, no buy is admitted to a paused
// voucher, on any instance, until it is resumed: the database holds the
// pause (the sync mode's PlaceOrder checks it under the voucher's row
// lock), and so does every shard's control in Redis, which Unload keeps
// and a rebuild does not overwrite. A pause the database took and Redis
// did not is ErrUnavailable: the caller asks again.
func (s *VoucherService) Pause(ctx context.Context, id int64, paused bool) (view *VoucherView, err error) {
	err = s.withControlLock(ctx, id, func() error {
		v, err := s.Store.PauseVoucher(ctx, id, paused)
		if err != nil {
			return fmt.Errorf("pause voucher %d: %w", id, err)
		}
		view, err = s.controlled(ctx, v, false)
		return err
	})
	return view, err
}

// End ends the voucher's sale now: its EndTime becomes now (unless it
// ended before) in the database, and every shard in Redis is marked ended,
// so that no buy is admitted once End has returned, whatever Redis's clock
// says. It returns the voucher as it is now.
func (s *VoucherService) End(ctx context.Context, id int64) (view *VoucherView, err error) {
	err = s.withControlLock(ctx, id, func() error {
		v, err := s.Store.EndVoucher(ctx, id, s.Now())
		if err != nil {
			return fmt.Errorf("end voucher %d: %w", id, err)
		}
		view, err = s.controlled(ctx, v, true)
		return err
	})
	return view, err
}

// controlLockTTL bounds a control's hold on the voucher's control lock: a
// holder that died frees it after this long. A live holder renews it
// every third of that.
const controlLockTTL = 30 * time.Second

// controlWrites bounds a control's writes in Redis after its database
// write, which go on when the caller has gone away.
const controlWrites = 10 * time.Second

// withControlLock runs f holding the voucher's control lock in Redis
// (VoucherCache.LockControl), waiting within ctx for another holder. A
// control is a database write and then writes in Redis: without the lock,
// a pause and a resume on two instances could apply in one order in the
// database and the other in Redis (found by review: the database paused,
// Redis admitting), and two additions of stock could each rebuild Redis
// from a row that lacks the other's units, the later rebuild finding the
// earlier's stock and setting nothing (an addition lost in Redis, both
// answered 200). In the sync mode the database is all admission reads,
// and its row lock orders the controls.
func (s *VoucherService) withControlLock(ctx context.Context, id int64, f func() error) error {
	if s.Mode == ModeSync {
		return f()
	}
	token := newToken()
	busy := &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("another control of voucher %d is under way; ask again", id), RetryAfter: time.Second}
	for {
		ok, err := s.Cache.LockControl(ctx, id, token, controlLockTTL)
		if err != nil {
			// The SET may have taken it and its answer been lost: give it
			// back rather than hold every control off for the TTL.
			s.Cache.UnlockControl(context.WithoutCancel(ctx), id, token)
			s.Logger.Warn("the voucher's control lock could not be taken", "voucher", id, "err", err)
			return &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("voucher %d cannot be changed right now: Redis does not answer; ask again", id), RetryAfter: time.Second}
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
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(controlLockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if ok, err := s.Cache.RenewControl(context.WithoutCancel(ctx), id, token, controlLockTTL); err == nil && !ok {
					s.Logger.Error("a control lost the voucher's control lock while it ran: another control may have interleaved with it; compare the admin page with reconcile", "voucher", id)
					return
				}
			}
		}
	}()
	defer func() {
		close(done)
		<-renewed
		if err := s.Cache.UnlockControl(context.WithoutCancel(ctx), id, token); err != nil {
			s.Logger.Warn("the voucher's control lock could not be given back; it lapses by itself", "voucher", id, "lapses_in", controlLockTTL, "err", err)
		}
	}()
	return f()
}

// controlled writes v's controls into Redis (not in the sync mode, where
// the database is what admission reads) and answers v.
func (s *VoucherService) controlled(ctx context.Context, v *Voucher, ended bool) (*VoucherView, error) {
	s.rows.remember(v)
	s.forgetLists()
	// A voucher past its retention is not in Redis, nor ever rebuilt there
	// (Rebuild refuses it): nothing there to control.
	kept := s.Now().Before(v.EndTime.Add(orDefault(s.Retention, DefaultRetention)))
	if s.Mode != ModeSync && kept {
		// The database has it: Redis must too, even if the caller went
		// away meanwhile (found by review: nobody was left to ask again).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlWrites)
		defer cancel()
		if err := s.Cache.Control(rctx, v, ended); err != nil {
			s.Logger.Error("voucher's control saved but not written to Redis", "voucher", v.ID, "paused", v.Paused, "ended", ended, "err", err)
			return nil, &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("voucher %d was changed in the database but Redis could not be told; ask again", v.ID), RetryAfter: time.Second}
		}
	}
	views, err := s.withRemaining(ctx, []*Voucher{v})
	if err != nil {
		return nil, err
	}
	return views[0], nil
}

// AddStock adds units to the voucher's stock, exactly once per key: the
// database records the key with the units in the transaction that adds
// them, so a retry, a concurrent duplicate or the same request on another
// instance adds nothing more. Redis then takes the stock from the database
// (UnloadStock, then Rebuild: the recovery path G6 rests on), also for a
// key recorded already, so that a retry after a failure half-way puts
// Redis right. The answer's Remaining includes the units. The same key
// with other units is ErrInvalidArgument.
func (s *VoucherService) AddStock(ctx context.Context, id int64, key string, units int64) (*VoucherView, error) {
	if units < 1 || units > MaxStock {
		return nil, Errorf(ErrInvalidArgument, "add: must be between 1 and %d, got %d", MaxStock, units)
	}
	if n := utf8.RuneCountInString(key); strings.TrimSpace(key) == "" || n > MaxIdempotencyKey || !utf8.ValidString(key) {
		return nil, Errorf(ErrInvalidArgument, "Idempotency-Key: must be 1 to %d characters", MaxIdempotencyKey)
	}
	// A voucher past its retention is not in Redis, nor rebuilt there:
	// its sale is over, and nothing is added (found by review: the units
	// went into the database, and Redis answered "ask again" forever).
	row, err := s.Store.Voucher(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("add stock to voucher %d: %w", id, err)
	}
	if !s.Now().Before(row.EndTime.Add(orDefault(s.Retention, DefaultRetention))) {
		return nil, Errorf(ErrEnded, "the sale of voucher %d is over: no stock can be added", id)
	}
	var view *VoucherView
	err = s.withControlLock(ctx, id, func() (err error) {
		view, err = s.addStock(ctx, id, key, units)
		return err
	})
	return view, err
}

// addStock is AddStock's work, under the voucher's control lock.
func (s *VoucherService) addStock(ctx context.Context, id int64, key string, units int64) (*VoucherView, error) {
	v, _, recorded, err := s.Store.AddStock(ctx, id, key, units)
	if err != nil {
		return nil, fmt.Errorf("add stock to voucher %d: %w", id, err)
	}
	if recorded != units {
		return nil, Errorf(ErrInvalidArgument, "Idempotency-Key: used already to add %d units, not %d", recorded, units)
	}
	s.rows.remember(v)
	s.forgetLists()
	if s.Mode == ModeSync {
		return &VoucherView{Voucher: v, Remaining: &v.Stock}, nil
	}
	unavailable := func(err error) error {
		s.Logger.Error("stock added in the database but not yet in Redis: ask again with the same Idempotency-Key, or run seckill reconcile --repair", "voucher", id, "err", err)
		return &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("the stock of voucher %d was added in the database but Redis has not taken it yet; ask again with the same Idempotency-Key (nothing is added twice)", id), RetryAfter: time.Second}
	}
	// As for the controls: the database has the units, so Redis takes
	// them even if the caller went away.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(s.RebuildTimeout, 10*time.Minute)+controlWrites)
	defer cancel()
	if err := s.restock(rctx, id, time.Now()); err != nil {
		return nil, unavailable(err)
	}
	for range 3 {
		view, err := s.Get(ctx, id)
		if err != nil || view.Remaining != nil {
			return view, err
		}
		// Unloaded again since (another instance's addition): the
		// answer says what Redis holds once rebuilt, as a buy would.
		if err := s.Rebuild(ctx, id); err != nil {
			return nil, unavailable(err)
		}
	}
	return s.Get(ctx, id)
}

// restock makes Redis take the voucher's stock from the database as it was
// committed at committed (a time on this process's clock), or later: it
// unloads the stock (keeping the buyers) and rebuilds it. Calls for one
// voucher take turns; one that finds a restock begun after its commit
// succeeded already is done.
func (s *VoucherService) restock(ctx context.Context, id int64, committed time.Time) error {
	r := s.restocker(id)
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
	if err := s.Cache.UnloadStock(ctx, id); err != nil {
		return err
	}
	// The row read now, after the commit and the unload: not a rebuild
	// in flight's, which may have read it before the units were added.
	v, err := s.Store.Voucher(ctx, id)
	if err != nil {
		return err
	}
	s.rows.remember(v)
	if err := s.rebuild(ctx, v); err != nil {
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

func (s *VoucherService) restocker(id int64) *restocker {
	r, _ := s.restocks.LoadOrStore(id, &restocker{turn: make(chan struct{}, 1)})
	return r.(*restocker)
}
