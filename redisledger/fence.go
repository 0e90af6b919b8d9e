package redisledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
)

// CacheGuard tells whether the cache's data may be older than the
// database's, and keeps admission shut until it cannot be.
//
// Redis can come back with data older than what it answered: a restart from
// an AOF written every second or an older snapshot, a failover to a replica
// that lagged. Its keys are all there, with older values: orders persisted
// and acknowledged in the lost interval are no longer counted, and it would
// sell their units again. So the data carries a fence, the identity of the
// server it was last checked against; the admission script is loaded into
// the server's script cache only by an instance that checked the fence
// (ArmAdmission), and a server that restarted or failed over has an empty
// script cache, so every admission there stops with seckill.ErrCacheUnverified
// until an instance has unloaded the open vouchers whose data may be older
// ([Fence.Check]); each is then rebuilt from the database before it
// is sold again.
type Guard interface {
	// Identity names the cache server process and the history of its data.
	Identity(ctx context.Context) (string, error)
	// Fence returns the identity recorded with the data when it was last
	// checked; "" if none is.
	Fence(ctx context.Context) (string, error)
	// StaleSince says, of the data checked against the server named
	// fence, which vouchers' may be older now that the server is identity:
	// nil when none can be (a Cluster whose slots moved between masters
	// that did not change), else a func that tells for each voucher (a
	// sharded one's data may be older when any shard's may).
	StaleSince(fence, identity string) func(v *seckill.Voucher) bool
	// LockCheck takes the check for token for ttl unless another instance
	// holds it, and reports whether it did.
	LockCheck(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// RenewCheck extends token's hold on the check by ttl, or ends it when
	// ttl is 0; false if it lost it.
	RenewCheck(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// SetFence records identity as checked and ends token's check; false
	// if token no longer held it.
	SetFence(ctx context.Context, token, identity string) (bool, error)
	// ArmAdmission lets admissions run on the server, if it is still the
	// one of identity (else nothing is armed, and seckill.ErrUnavailable).
	ArmAdmission(ctx context.Context, identity string) error
	// DisarmAdmission stops every instance's admissions until one arms
	// them again.
	DisarmAdmission(ctx context.Context) error
	// LockRebuilds takes the rebuilding of the open vouchers the cache
	// does not hold for token for ttl, unless another instance holds it,
	// and reports whether it did.
	LockRebuilds(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// RenewRebuilds extends token's hold on the rebuilds, or ends it when
	// ttl is 0; false if it lost it.
	RenewRebuilds(ctx context.Context, token string, ttl time.Duration) (bool, error)
}

// Fence keeps admission safe on a cache server that may hold older
// data than the database (see CacheGuard): it checks the server against
// the fence recorded with its data (Check), unloads the open vouchers whose
// data may be older when the server changed, and rebuilds them
// (RebuildUnloaded). Admission calls Check when the cache says it must; a
// Watch calls both in the background.
type Fence struct {
	Cache Cache
	// Ledger lists the open vouchers and rebuilds them.
	Ledger *Ledger
	Logger *slog.Logger
	// CheckWait bounds how long a caller waits for another instance that
	// is rebuilding the open vouchers after the cache server changed.
	// Default 10s.
	CheckWait time.Duration
	// CheckLease is how long the instance rebuilding the open vouchers
	// after the cache server changed holds that work without renewing it
	// (it renews every third of it): if it dies, another takes over after
	// this long. Default 15s.
	CheckLease time.Duration

	checks singleflight.Group
	// seen says whether this process saw the cache server checked since it
	// last had reason to doubt it: the sold-out memory (OrderService) is
	// used only then.
	seen fenceSeen
	// due is poked when a check unloaded vouchers (Unloaded).
	dueOnce sync.Once
	due     chan struct{}
}

func (s *Fence) checkLease() time.Duration { return orDefault(s.CheckLease, 15*time.Second) }

func (s *Fence) checkWait() time.Duration { return orDefault(s.CheckWait, 10*time.Second) }

// Check makes admission safe on the cache server now running. If the
// server is the one the data was last checked against, it only lets
// admissions run there. Otherwise (Redis restarted, failed over, or lost
// its data) one instance stops every instance's admissions, unloads every
// voucher on sale or within the retention whose data may be older (on a
// Cluster, those of the masters that changed), records the server as
// checked, and lets admissions run again; the others wait for it, up to
// CheckWait. Unloading is quick whatever the vouchers' sizes; each voucher
// unloaded is rebuilt from the database and its queued orders before it is
// sold again: by the first buy of it, at start (Restore, those on sale),
// and by a Watch in the background, those on sale first. Calls in this
// process share one check, which runs apart from their contexts. A failure
// is seckill.ErrUnavailable.
func (s *Fence) Check(ctx context.Context) error {
	ch := s.checks.DoChan("check", func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Ledger.rebuildTimeout()+s.checkWait())
		defer cancel()
		return nil, s.check(cctx)
	})
	select {
	case r := <-ch:
		if r.Err != nil && !errors.Is(r.Err, seckill.ErrUnavailable) {
			return fmt.Errorf("%w: %w", seckill.ErrUnavailable, r.Err)
		}
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("check the cache server: %w: %w", seckill.ErrUnavailable, ctx.Err())
	}
}

// check is Check's work.
func (s *Fence) check(ctx context.Context) error {
	identity, fence, err := s.identity(ctx)
	if err != nil {
		return err
	}
	if fence == identity {
		return s.arm(ctx, identity)
	}
	token := newToken()
	locked, err := s.Cache.LockCheck(ctx, token, s.checkLease())
	if err != nil {
		return fmt.Errorf("check the cache server: %w", err)
	}
	if !locked {
		return s.awaitCheck(ctx, identity)
	}
	// A check that fails lets the others go at once rather than wait out
	// its lease: the first call on a server that just restarted fails on a
	// connection the restart broke, and every instance waited 15 s
	// (TestBuySoldOutAfterRedisCameBackOlder failed so, 2 runs in 8).
	// SetFence ends the check when it succeeds.
	fenced := false
	defer func() {
		if !fenced {
			s.Cache.RenewCheck(context.WithoutCancel(ctx), token, 0)
		}
	}()
	// Another instance may have checked the server between the read above
	// and this lock: read the record again, or this one would unload every
	// voucher a second time.
	if fence, err = s.Cache.Fence(ctx); err != nil {
		return fmt.Errorf("check the cache server: %w", err)
	}
	if fence == identity {
		return s.arm(ctx, identity)
	}
	stale := s.Cache.StaleSince(fence, identity)
	switch {
	case stale == nil:
		// Slots moved with their data between masters that stayed as
		// checked: nothing is older, and nothing stops.
		s.Logger.Info("the Redis Cluster's slots moved between masters that did not change: their data moved with them; nothing to rebuild",
			"checked_on", fence, "server", identity)
	case fence == "":
		// A new deployment, data lost (then nothing stale is left to admit
		// on), or a server restarted from data older than the fence (then
		// its script cache is empty): no instance admits on stale data, so
		// admissions to other deployments sharing the server go on.
		s.Logger.Info("Redis holds no record of being checked (a new deployment, or Redis lost its data): rebuilding every voucher on sale from the database",
			"server", identity)
	default:
		// The server changed since the data was checked: it may have come
		// back with older data and, after a failover to a former master,
		// with the admission script still loaded. Stop every instance.
		s.Logger.Warn("Redis restarted or failed over since its data was checked (it may have come back with older data): rebuilding every voucher on sale from the database before admitting to it",
			"checked_on", fence, "server", identity)
		if err := s.Cache.DisarmAdmission(ctx); err != nil {
			return fmt.Errorf("check the cache server: %w", err)
		}
	}
	n := 0
	if stale != nil {
		work, stop := hold(ctx, s.checkLease(), token, "check of the cache server", s.Cache.RenewCheck)
		n, err = s.unloadOpen(work, stale)
		stop()
		if err != nil {
			return err
		}
	}
	ok, err := s.Cache.SetFence(ctx, token, identity)
	switch {
	case err != nil:
		return fmt.Errorf("check the cache server: %w", err)
	case !ok:
		return fmt.Errorf("check the cache server: the check took longer than its lease of %v and another instance took it over: %w", s.checkLease(), seckill.ErrUnavailable)
	}
	fenced = true
	if n > 0 {
		s.Logger.Warn("Redis checked: the vouchers whose data it may hold older are unloaded; admitting again, each of them once rebuilt from the database (on its next buy, or in the background: those on sale first)",
			"vouchers", n, "server", identity)
		select {
		case s.unloaded() <- struct{}{}:
		default:
		}
	} else {
		// A new deployment, or a reshard: nothing was at stake.
		s.Logger.Info("Redis checked: admitting again", "server", identity)
	}
	return s.arm(ctx, identity)
}

// identity reads the cache server's identity and its fence. A server not
// the one checked makes this process doubt it (fenceSeen) until it arms it.
func (s *Fence) identity(ctx context.Context) (identity, fence string, err error) {
	if identity, err = s.Cache.Identity(ctx); err != nil {
		return "", "", fmt.Errorf("check the cache server: %w", err)
	}
	if fence, err = s.Cache.Fence(ctx); err != nil {
		return "", "", fmt.Errorf("check the cache server: %w", err)
	}
	if fence != identity {
		s.seen.doubt()
	}
	return identity, fence, nil
}

// arm lets admissions run on the server of identity, the one checked: the
// cache arms only that server (a failover during the check leaves nothing
// armed), and the next admission checks again.
func (s *Fence) arm(ctx context.Context, identity string) error {
	if err := s.Cache.ArmAdmission(ctx, identity); err != nil {
		s.seen.doubt()
		return fmt.Errorf("check the cache server: %w", err)
	}
	s.seen.checked()
	return nil
}

// awaitCheck waits for another instance's check of the server to record
// it, then lets admissions run here too.
func (s *Fence) awaitCheck(ctx context.Context, identity string) error {
	wctx, cancel := context.WithTimeout(ctx, s.checkWait())
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return fmt.Errorf("another instance is rebuilding the vouchers on sale after a Redis restart: %w", seckill.ErrUnavailable)
		case <-tick.C:
		}
		fence, err := s.Cache.Fence(wctx)
		if err != nil {
			continue
		}
		if fence == identity {
			return s.arm(wctx, identity)
		}
	}
}

// hold keeps token's hold on what (the check, or the rebuilds) while the
// work of it runs, however long that takes: it renews the lease every
// third of it, and ends the returned context if the hold is lost, since
// another instance then does the work. stop ends the renewal.
func hold(ctx context.Context, lease time.Duration, token, what string, renew func(context.Context, string, time.Duration) (bool, error)) (work context.Context, stop func()) {
	work, cancel := context.WithCancelCause(ctx)
	stopRenewing := renewEvery(work, lease, func(context.Context) bool {
		ok, err := renew(work, token, lease)
		if err != nil || !ok {
			cancel(fmt.Errorf("lost the %s (renewed %v): %w", what, ok, errors.Join(err, seckill.ErrUnavailable)))
			return false
		}
		return true
	})
	return work, func() {
		stopRenewing()
		cancel(nil)
	}
}

// renewEvery renews a lease of lease every third of it, on a loop of its
// own, from now until stop, until ctx ends, or until renew says the hold
// is over (false): the one renewal loop of the fence's check and rebuilds
// (hold) and of the controls' lock (withControlLock), which differ only in
// what a failed renewal means.
func renewEvery(ctx context.Context, lease time.Duration, renew func(context.Context) bool) (stop func()) {
	var loop startstop.Service
	loop.Start(ctx, func(loopCtx context.Context) {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !renew(loopCtx) {
				return
			}
		}
	})
	return loop.Stop
}

// unloadOpen unloads every voucher on sale or ended within the retention
// whose data may be older (stale), and returns how many: admission refuses
// each until it is rebuilt. Unloading is quick whatever a voucher's size
// (its buyers are deleted lazily). In the queue mode the buyers Redis came
// back with stay: the orders waiting in the instances' memory are nowhere
// else a rebuild could count them (it may then undersell a little, never
// oversell).
func (s *Fence) unloadOpen(ctx context.Context, stale func(v *seckill.Voucher) bool) (int, error) {
	vs, err := s.Ledger.Vouchers.Open(ctx)
	if err != nil {
		return 0, fmt.Errorf("check the cache server: %w", err)
	}
	unload := s.Cache.Unload
	if s.Ledger.Queued {
		unload = s.Cache.UnloadStock
	}
	n := 0
	for _, v := range vs {
		if !stale(v) {
			continue
		}
		if err := unload(ctx, v.ID); err != nil {
			return 0, fmt.Errorf("check the cache server: %w", errors.Join(err, context.Cause(ctx)))
		}
		n++
	}
	return n, nil
}

// Unloaded is poked when a check unloaded vouchers; a Watch then
// rebuilds them (RebuildUnloaded).
func (s *Fence) Unloaded() <-chan struct{} { return s.unloaded() }

func (s *Fence) unloaded() chan struct{} {
	s.dueOnce.Do(func() { s.due = make(chan struct{}, 1) })
	return s.due
}

// RebuildUnloaded rebuilds the vouchers on sale or ended within the
// retention that the cache does not hold (a check unloaded them, or the
// cache lost them), those on sale first, and returns how many it rebuilt
// or found rebuilt. One instance at a time does it (LockRebuilds); when
// another does, it does nothing. A voucher that has passed its retention
// meanwhile is left alone.
func (s *Fence) RebuildUnloaded(ctx context.Context) (int, error) {
	vs, err := s.Ledger.Vouchers.Open(ctx)
	if err != nil || len(vs) == 0 {
		return 0, err
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	left, err := s.Cache.Remaining(ctx, ids...)
	if err != nil {
		return 0, err
	}
	var todo []*seckill.Voucher
	for _, v := range vs {
		if _, ok := left[v.ID]; !ok {
			todo = append(todo, v)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	now := s.Ledger.now()
	slices.SortStableFunc(todo, func(a, b *seckill.Voucher) int {
		return cmp.Compare(boolInt(!a.EndTime.After(now)), boolInt(!b.EndTime.After(now)))
	})
	token := newToken()
	locked, err := s.Cache.LockRebuilds(ctx, token, s.checkLease())
	if err != nil || !locked {
		return 0, err
	}
	work, stop := hold(ctx, s.checkLease(), token, "rebuilds of the vouchers Redis does not hold", s.Cache.RenewRebuilds)
	defer func() {
		stop()
		// Ended, so that another instance need not wait out the lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.Cache.RenewRebuilds(rctx, token, 0)
	}()
	n := 0
	var errs []error
	for _, v := range todo {
		err := s.Ledger.rebuildShared(work, v.ID, work)
		switch {
		case work.Err() != nil:
			return n, errors.Join(append(errs, context.Cause(work))...)
		case err == nil:
			n++
		case errors.Is(err, seckill.ErrEnded), errors.Is(err, seckill.ErrVoucherNotFound):
			// Past its retention meanwhile (its keys are dropped), or gone.
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Watch checks the Redis server's identity against its fence every Every
// (Fence.Check), for the servers that change without emptying their
// script cache (a failover back to a former master). Admissions on a
// server that restarted stop at once without it. It also rebuilds the
// vouchers on sale or within the retention that Redis does not hold,
// those on sale first: at once after a check of this process unloaded
// some, and every RebuildEvery for those another instance did not finish
// (it died).
type Watch struct {
	Fence *Fence
	// Every is how often it looks. Default 1s.
	Every time.Duration
	// RebuildEvery is how often it looks for open vouchers Redis does not
	// hold. Default 10s.
	RebuildEvery time.Duration
	Logger       *slog.Logger

	checks, rebuilds startstop.Service
}

// Start begins watching. It returns at once.
func (w *Watch) Start(ctx context.Context) error {
	w.checks.Start(ctx, func(ctx context.Context) {
		// Logged when it starts and stops failing: while Redis is down
		// this fails every second, and the admissions say so already.
		startstop.Every(ctx, w.Logger, w.Every, startstop.PassLog{
			Doing:   "checking the Redis server",
			Failing: "could not check the Redis server; checking again every second",
			Again:   "the Redis server checked again",
		}, w.Fence.Check)
	})
	w.rebuilds.Start(ctx, func(ctx context.Context) {
		every := orDefault(w.RebuildEvery, 10*time.Second)
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-w.Fence.Unloaded():
			}
			var n int
			err := startstop.Guard(w.Logger, "rebuilding the vouchers Redis does not hold", func() (err error) {
				n, err = w.Fence.RebuildUnloaded(ctx)
				return err
			})
			switch {
			case ctx.Err() != nil:
			case err != nil && !failing:
				w.Logger.Warn("could not rebuild every voucher Redis does not hold; trying again", "every", every.String(), "rebuilt", n, "err", err)
			case err == nil && n > 0:
				w.Logger.Info("rebuilt the vouchers Redis did not hold", "vouchers", n)
			}
			failing = err != nil
		}
	})
	return nil
}

// Stop stops watching and waits for a check or rebuild in flight. Safe to
// call twice.
func (w *Watch) Stop() {
	w.checks.Stop()
	w.rebuilds.Stop()
}

// fenceSeen says whether this process has seen the cache server checked
// (its check armed admission there: Fence.arm) since it last had
// reason to doubt it (the server was not the one checked, or could not be
// armed: Fence.identity and arm; or a read of a sold-out voucher
// found admission not armed: soldOutAnswer). Its word counts the
// changes: odd while checked. What is learnt while checked (the sold-out
// memory) holds only while the word is the same.
type fenceSeen struct{ w atomic.Uint64 }

// load returns the current word.
func (f *fenceSeen) load() uint64 { return f.w.Load() }

// checkedIn reports whether w is a word of a checked server.
func checkedIn(w uint64) bool { return w&1 == 1 }

// checked records the server checked.
func (f *fenceSeen) checked() { f.flip(false) }

// doubt records a reason to doubt the server.
func (f *fenceSeen) doubt() { f.flip(true) }

// flip moves the word on, if it is checked (from) or not.
func (f *fenceSeen) flip(from bool) {
	for {
		w := f.w.Load()
		if checkedIn(w) != from || f.w.CompareAndSwap(w, w+1) {
			return
		}
	}
}
