package orderid

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The lease's own logic, on a fake store and a fake clock: when it renews,
// waits, stops and takes a node id anew. Its scripts, and Redis going away
// or coming back older under it, are tested in lease_redis_test.go.

// fakeStore is a LeaseStore in memory, its answers set by the test.
type fakeStore struct {
	mu sync.Mutex
	// node is the node id AcquireNode gives, age how long ago it says the
	// leases were written anew.
	node int
	age  time.Duration
	// renewErr fails every renewal; lost refuses the next one.
	renewErr error
	lost     bool
	// panicAt makes the renewal of that number panic (1 is the first).
	panicAt int

	acquires, renews int
	recent           []bool // each renewal's recent
	released         []string
}

func (s *fakeStore) AcquireNode(_ context.Context, token string, ttl time.Duration, first, count int) (int, int64, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	if first < 0 || first >= count || count != Nodes {
		return 0, 0, 0, errors.New("fakeStore: first node out of range")
	}
	return s.node, 0, s.age, nil
}

func (s *fakeStore) RenewNode(_ context.Context, node int, token string, ttl time.Duration, lastUnixMs int64, recent bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renews++
	s.recent = append(s.recent, recent)
	if s.renews == s.panicAt {
		panic("injected panic in RenewNode")
	}
	if s.renewErr != nil {
		return false, s.renewErr
	}
	if s.lost {
		s.lost = false
		s.node++ // the next acquire gets another node id
		return false, nil
	}
	return true, nil
}

func (s *fakeStore) ReleaseNode(_ context.Context, node int, token string, lastUnixMs int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, token)
	return nil
}

// set changes the store's answers.
func (s *fakeStore) set(f func(s *fakeStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// counts returns how many acquires and renewals the store served.
func (s *fakeStore) counts() (acquires, renews int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquires, s.renews
}

// fakeLease returns a started lease on s with SharedLeaseTimes, stopped
// when the test ends.
func fakeLease(t *testing.T, s *fakeStore, gen *Generator) *Lease {
	t.Helper()
	l := NewLease(s, gen, slog.New(slog.DiscardHandler))
	if err := l.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(l.Stop)
	return l
}

func TestLeaseTimes(t *testing.T) {
	t.Parallel()
	for name, lt := range map[string]LeaseTimes{"shared": SharedLeaseTimes, "embedded": EmbeddedLeaseTimes} {
		if !(lt.Renew < lt.Valid && lt.Valid < lt.TTL) {
			t.Errorf("%s: Renew %v, Valid %v, TTL %v: want Renew < Valid < TTL", name, lt.Renew, lt.Valid, lt.TTL)
		}
	}
	// A Redis that lost its leases may have holders from before; the
	// embedded server lives and dies with its only holder.
	if SharedLeaseTimes.FreshWait != SharedLeaseTimes.Valid {
		t.Errorf("shared: FreshWait %v, want Valid (%v)", SharedLeaseTimes.FreshWait, SharedLeaseTimes.Valid)
	}
	if EmbeddedLeaseTimes.FreshWait != 0 {
		t.Errorf("embedded: FreshWait %v, want 0", EmbeddedLeaseTimes.FreshWait)
	}
	l := NewLease(&fakeStore{}, New(), slog.New(slog.DiscardHandler))
	if l.LeaseTimes != SharedLeaseTimes {
		t.Errorf("NewLease's times %+v, want SharedLeaseTimes", l.LeaseTimes)
	}
	if l.Node() != -1 {
		t.Errorf("Node() of a lease not started = %d, want -1", l.Node())
	}
}

// TestNodeLeaseLateRenewal: with its times, a lease last confirmed 20 s
// ago stops making ids on a shared Redis, where another instance may hold
// the node id by then, and goes on on the embedded server, whose renewals
// wait behind the sale's admissions on its one connection (5 s was not
// enough under the race detector in CI).
func TestNodeLeaseLateRenewal(t *testing.T) {
	t.Parallel()
	for name, lt := range map[string]LeaseTimes{"shared": SharedLeaseTimes, "embedded": EmbeddedLeaseTimes} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &fakeStore{node: 3, age: time.Hour}
				gen := New()
				l := NewLease(s, gen, slog.New(slog.DiscardHandler))
				l.LeaseTimes = lt
				if err := l.Start(t.Context()); err != nil {
					t.Fatalf("Start: %v", err)
				}
				defer l.Stop()
				if _, err := gen.Next(); err != nil {
					t.Fatalf("Next: %v", err)
				}
				s.set(func(s *fakeStore) { s.renewErr = errors.New("late") }) // no renewal confirms
				time.Sleep(20 * time.Second)
				_, err := gen.Next()
				switch {
				case lt == EmbeddedLeaseTimes && err != nil:
					t.Fatalf("embedded server: Next after a late renewal: %v, want an id", err)
				case lt == SharedLeaseTimes && !errors.Is(err, ErrNoLease):
					t.Fatalf("Next after a late renewal: %v, want ErrNoLease", err)
				}
			})
		})
	}
}

// TestLeaseRenews: the lease is renewed every Renew, each renewal extends
// the generator's validity to Valid past the time it was sent, and a
// renewal that fails leaves the generator making ids until Valid past the
// last one confirmed, not a moment longer.
func TestLeaseRenews(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &fakeStore{node: 5, age: time.Hour}
		gen := New()
		l := fakeLease(t, s, gen)
		if l.Node() != 5 {
			t.Fatalf("Node() = %d, want 5", l.Node())
		}
		if n := NodeOf(next(t, gen)); n != 5 {
			t.Fatalf("id made with node %d, want 5", n)
		}
		time.Sleep(10*l.Renew + l.Renew/2)
		if _, renews := s.counts(); renews != 11 { // the one that took it, and one a Renew
			t.Errorf("%d renewals in 10.5 Renew, want 11", renews)
		}
		// The renewal at 10 Renew was the last confirmed.
		lastConfirmed := time.Now().Add(-l.Renew / 2)
		s.set(func(s *fakeStore) { s.renewErr = errors.New("unreachable") })
		time.Sleep(time.Until(lastConfirmed.Add(l.Valid)) - time.Nanosecond)
		next(t, gen)
		time.Sleep(time.Nanosecond)
		if _, err := gen.Next(); !errors.Is(err, ErrNoLease) {
			t.Fatalf("Next at Valid past the last confirmed renewal: %v, want ErrNoLease", err)
		}
		synctest.Wait() // the renewal of this instant, failed
		// Reachable again: the next renewal confirms the lease, whose
		// expiry it renews only for a holder that renewed within Valid.
		s.set(func(s *fakeStore) { s.renewErr = nil })
		time.Sleep(l.Renew)
		synctest.Wait()
		next(t, gen)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.recent[1] || s.recent[0] {
			t.Errorf("recent of the first renewals %v, want false (none confirmed yet), then true", s.recent[:2])
		}
		if s.recent[len(s.recent)-1] {
			t.Errorf("recent true after no renewal confirmed for longer than Valid")
		}
	})
}

// TestLeaseWaitsFreshWait: a lease on leases written anew waits until
// FreshWait has passed since, by the store's clock; on older ones it does
// not wait; and a context ended meanwhile ends the wait.
func TestLeaseWaitsFreshWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		age, want time.Duration
	}{
		{0, SharedLeaseTimes.FreshWait},
		{2 * time.Second, SharedLeaseTimes.FreshWait - 2*time.Second},
		{SharedLeaseTimes.FreshWait, 0},
		{time.Hour, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := &fakeStore{age: tc.age}
			gen := New()
			start := time.Now()
			fakeLease(t, s, gen)
			if waited := time.Since(start); waited != tc.want {
				t.Errorf("leases written %v ago: Start waited %v, want %v", tc.age, waited, tc.want)
			}
			next(t, gen)
		})
	}
	synctest.Test(t, func(t *testing.T) {
		l := NewLease(&fakeStore{}, New(), slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := l.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start whose context ends during the wait: %v, want DeadlineExceeded", err)
		}
	})
}

// TestLeaseTakesAnotherWhenLost: a renewal that finds the lease lost stops
// the generator at once and takes a node id anew, waiting as a newcomer.
func TestLeaseTakesAnotherWhenLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &fakeStore{node: 1, age: time.Hour}
		gen := New()
		l := fakeLease(t, s, gen)
		s.set(func(s *fakeStore) { s.lost, s.age = true, 0 }) // lost, and the leases new
		time.Sleep(l.Renew)
		synctest.Wait()
		if _, err := gen.Next(); !errors.Is(err, ErrNoLease) {
			t.Fatalf("Next while the lease is taken anew: %v, want ErrNoLease", err)
		}
		time.Sleep(l.FreshWait)
		synctest.Wait()
		if n := NodeOf(next(t, gen)); n != 2 || l.Node() != 2 {
			t.Fatalf("id made with node %d, lease node %d; want the new one, 2", n, l.Node())
		}
		if acquires, _ := s.counts(); acquires != 2 {
			t.Errorf("%d acquires, want 2", acquires)
		}
	})
}

// TestNodeLeasePanic: a renewal that panics is recovered and counted, and
// the renewals go on: the generator keeps making ids, and Stop returns and
// gives the node id back.
func TestNodeLeasePanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &fakeStore{node: 9, age: time.Hour, panicAt: 2} // the first renewal after the one that takes it
		gen := New()
		l := NewLease(s, gen, slog.New(slog.DiscardHandler))
		var panics atomic.Int64
		l.OnPanic = func() { panics.Add(1) }
		if err := l.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		time.Sleep(3*l.Renew + l.Renew/2)
		if _, renews := s.counts(); renews != 4 {
			t.Errorf("%d renewals, want 4", renews)
		}
		if n := panics.Load(); n != 1 {
			t.Errorf("OnPanic called %d times, want 1", n)
		}
		if n := NodeOf(next(t, gen)); n != 9 {
			t.Errorf("id made with node %d after the panic, want 9", n)
		}
		l.Stop()
		l.Stop() // safe twice
		s.mu.Lock()
		released := s.released
		s.mu.Unlock()
		if len(released) != 1 || released[0] != l.token {
			t.Errorf("released %v, want the lease's token once", released)
		}
		if _, err := gen.Next(); !errors.Is(err, ErrNoLease) {
			t.Errorf("Next after Stop: %v, want ErrNoLease", err)
		}
	})
}
