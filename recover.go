package seckill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
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
// script cache, so every admission there stops with ErrCacheUnverified
// until an instance has rebuilt the open vouchers from the database
// ([VoucherService.Recover]).
type CacheGuard interface {
	// Identity names the cache server process and the history of its data.
	Identity(ctx context.Context) (string, error)
	// Fence returns the identity recorded with the data when it was last
	// checked; "" if none is.
	Fence(ctx context.Context) (string, error)
	// LockCheck takes the check for token for ttl unless another instance
	// holds it, and reports whether it did.
	LockCheck(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// RenewCheck extends token's hold on the check; false if it lost it.
	RenewCheck(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// SetFence records identity as checked and ends token's check; false
	// if token no longer held it.
	SetFence(ctx context.Context, token, identity string) (bool, error)
	// ArmAdmission lets admissions run on the server, if it is still the
	// one of identity (else nothing is armed, and ErrUnavailable).
	ArmAdmission(ctx context.Context, identity string) error
	// DisarmAdmission stops every instance's admissions until one arms
	// them again.
	DisarmAdmission(ctx context.Context) error
}

func (s *VoucherService) checkLease() time.Duration {
	if s.CheckLease > 0 {
		return s.CheckLease
	}
	return 15 * time.Second
}

// Recover makes admission safe on the cache server now running. If the
// server is the one the data was last checked against, it only lets
// admissions run there. Otherwise (Redis restarted, failed over, or lost
// its data) one instance stops every instance's admissions, unloads and
// rebuilds every voucher on sale from the database and its queued orders,
// records the server as checked, and lets admissions run again; the others
// wait for it, up to CheckWait. Calls in this process share one check,
// which runs apart from their contexts. A failure is ErrUnavailable.
func (s *VoucherService) Recover(ctx context.Context) error {
	ch := s.checks.DoChan("check", func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.rebuildTimeout()+s.checkWait())
		defer cancel()
		_, err := s.check(cctx)
		return nil, err
	})
	select {
	case r := <-ch:
		if r.Err != nil && !errors.Is(r.Err, ErrUnavailable) {
			return fmt.Errorf("%w: %w", ErrUnavailable, r.Err)
		}
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("check the cache server: %w: %w", ErrUnavailable, ctx.Err())
	}
}

func (s *VoucherService) checkWait() time.Duration {
	if s.CheckWait > 0 {
		return s.CheckWait
	}
	return 10 * time.Second
}

// check is Recover's work; it reports whether it rebuilt the open
// vouchers.
func (s *VoucherService) check(ctx context.Context) (bool, error) {
	identity, fence, err := s.identity(ctx)
	if err != nil {
		return false, err
	}
	if fence == identity {
		return false, s.arm(ctx, identity)
	}
	token := newToken()
	locked, err := s.Cache.LockCheck(ctx, token, s.checkLease())
	if err != nil {
		return false, fmt.Errorf("check the cache server: %w", err)
	}
	if !locked {
		return false, s.awaitCheck(ctx, identity)
	}
	if fence == "" {
		// A new deployment, data lost (then nothing stale is left to admit
		// on), or a server restarted from data older than the fence (then
		// its script cache is empty): no instance admits on stale data, so
		// admissions to other deployments sharing the server go on.
		s.Logger.Info("Redis holds no record of being checked (a new deployment, or Redis lost its data): rebuilding every voucher on sale from the database",
			"server", identity)
	} else {
		// The server changed since the data was checked: it may have come
		// back with older data and, after a failover to a former master,
		// with the admission script still loaded. Stop every instance.
		s.Logger.Warn("Redis restarted or failed over since its data was checked (it may have come back with older data): rebuilding every voucher on sale from the database before admitting to it",
			"checked_on", fence, "server", identity)
		if err := s.Cache.DisarmAdmission(ctx); err != nil {
			return false, fmt.Errorf("check the cache server: %w", err)
		}
	}
	work, stop := s.holdCheck(ctx, token)
	n, err := s.reloadOpen(work)
	stop()
	if err != nil {
		return false, err
	}
	ok, err := s.Cache.SetFence(ctx, token, identity)
	switch {
	case err != nil:
		return false, fmt.Errorf("check the cache server: %w", err)
	case !ok:
		return false, fmt.Errorf("check the cache server: the check took longer than its lease of %v and another instance took it over: %w", s.checkLease(), ErrUnavailable)
	}
	level := slog.LevelWarn
	if n == 0 {
		level = slog.LevelInfo // a new deployment: nothing was at stake
	}
	s.Logger.Log(ctx, level, "Redis checked: every voucher on sale was rebuilt from the database; admitting again", "vouchers", n, "server", identity)
	return true, s.arm(ctx, identity)
}

// identity reads the cache server's identity and its fence. A server not
// the one checked makes this process doubt it (fenceSeen) until it arms it.
func (s *VoucherService) identity(ctx context.Context) (identity, fence string, err error) {
	if identity, err = s.Cache.Identity(ctx); err != nil {
		return "", "", fmt.Errorf("check the cache server: %w", err)
	}
	if fence, err = s.Cache.Fence(ctx); err != nil {
		return "", "", fmt.Errorf("check the cache server: %w", err)
	}
	if fence != identity {
		s.fence.doubt()
	}
	return identity, fence, nil
}

// arm lets admissions run on the server of identity, the one checked: the
// cache arms only that server (a failover during the check leaves nothing
// armed), and the next admission checks again.
func (s *VoucherService) arm(ctx context.Context, identity string) error {
	if err := s.Cache.ArmAdmission(ctx, identity); err != nil {
		s.fence.doubt()
		return fmt.Errorf("check the cache server: %w", err)
	}
	s.fence.checked()
	return nil
}

// awaitCheck waits for another instance's check of the server to record
// it, then lets admissions run here too.
func (s *VoucherService) awaitCheck(ctx context.Context, identity string) error {
	wctx, cancel := context.WithTimeout(ctx, s.checkWait())
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return fmt.Errorf("another instance is rebuilding the vouchers on sale after a Redis restart: %w", ErrUnavailable)
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

// holdCheck keeps token's hold on the check while the open vouchers are
// rebuilt, however long that takes (a voucher of millions of orders takes
// seconds): it renews the lease every third of it, and ends the returned
// context if the hold is lost, since another instance then rebuilds them.
// stop ends the renewal.
func (s *VoucherService) holdCheck(ctx context.Context, token string) (work context.Context, stop func()) {
	work, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(s.checkLease() / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-work.Done():
				return
			case <-t.C:
			}
			ok, err := s.Cache.RenewCheck(work, token, s.checkLease())
			if err != nil || !ok {
				cancel(fmt.Errorf("lost the check of the cache server (renewed %v): %w", ok, errors.Join(err, ErrUnavailable)))
				return
			}
		}
	})
	return work, func() {
		close(done)
		wg.Wait()
		cancel(nil)
	}
}

// reloadOpen unloads and rebuilds every voucher on sale or ended within
// the retention, and returns how many. In the queue mode the buyers Redis
// came back with stay: the orders waiting in the instances' memory are
// nowhere else a rebuild could count them (it may then undersell a little,
// never oversell).
func (s *VoucherService) reloadOpen(ctx context.Context) (int, error) {
	vs, err := s.Store.UnendedVouchers(ctx, s.Now().Add(-s.retention()))
	if err != nil {
		return 0, fmt.Errorf("check the cache server: %w", err)
	}
	for _, v := range vs {
		unload := s.Cache.Unload
		if s.InMemoryQueue {
			unload = s.Cache.UnloadStock
		}
		if err := unload(ctx, v.ID); err != nil {
			return 0, fmt.Errorf("check the cache server: %w", errors.Join(err, context.Cause(ctx)))
		}
		s.remember(v)
		if err := s.rebuild(ctx, v); err != nil {
			return 0, fmt.Errorf("check the cache server: %w", errors.Join(err, context.Cause(ctx)))
		}
	}
	return len(vs), nil
}

func newToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CacheWatch checks the cache server's identity against its fence every
// Every (see Recover), for the servers that change without emptying their
// script cache (a failover back to a former master). Admissions on a server
// that restarted stop at once without it.
type CacheWatch struct {
	Vouchers *VoucherService
	// Every is how often it looks. Default 1s.
	Every  time.Duration
	Logger *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start begins watching. It returns at once.
func (w *CacheWatch) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		return nil
	}
	every := w.Every
	if every <= 0 {
		every = time.Second
	}
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Logged when it starts and stops failing: while Redis is down
			// this fails every second, and the admissions say so already.
			err := w.check(ctx)
			switch {
			case ctx.Err() != nil:
			case err != nil && !failing:
				w.Logger.Warn("could not check the Redis server; checking again every second", "every", every.String(), "err", err)
			case err == nil && failing:
				w.Logger.Info("the Redis server checked again")
			}
			failing = err != nil
		}
	}()
	return nil
}

// check runs one check; a panic in it is logged and counts as a failure,
// and the watch goes on.
func (w *CacheWatch) check(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.Logger.Error("panic while checking the Redis server", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return w.Vouchers.Recover(ctx)
}

// Stop stops watching and waits for a check in flight. Safe to call twice.
func (w *CacheWatch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
}
