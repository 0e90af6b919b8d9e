package orderid

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for the tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func leased(t *testing.T, node int, c *clock) *Generator {
	t.Helper()
	g := New()
	g.Clock = c.now
	g.Lease(node, 0, c.now().Add(time.Hour))
	return g
}

func TestNoLeaseNoID(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	g := New()
	g.Clock = c.now
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Next without a lease = %v, want ErrNoLease", err)
	}
	g.Lease(3, 0, c.now().Add(time.Second))
	if _, err := g.Next(); err != nil {
		t.Fatalf("Next with a lease: %v", err)
	}
	c.set(c.now().Add(time.Second))
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Next after the lease's validity = %v, want ErrNoLease", err)
	}
	g.Extend(c.now().Add(time.Second))
	if _, err := g.Next(); err != nil {
		t.Fatalf("Next after Extend: %v", err)
	}
	g.Revoke()
	if _, err := g.Next(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Next after Revoke = %v, want ErrNoLease", err)
	}
}

func TestLayout(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 8, 0, 0, 123e6, time.UTC)
	c := &clock{t: at}
	g := leased(t, 777, c)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if got := Time(id); !got.Equal(at) {
		t.Errorf("Time(id) = %v, want %v", got, at)
	}
	if got := NodeOf(id); got != 777 {
		t.Errorf("NodeOf(id) = %d, want 777", got)
	}
	if id <= 0 {
		t.Errorf("id %d is not positive", id)
	}
}

// TestClockStepsBack: ids keep growing, never repeat, when the clock goes
// back, and when a millisecond's sequence runs out.
func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	c := &clock{t: start}
	g := leased(t, 1, c)
	seen := map[int64]bool{}
	var last int64
	next := func() {
		t.Helper()
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || id <= last {
			t.Fatalf("id %d after %d: repeated or not increasing", id, last)
		}
		seen[id], last = true, id
	}
	for range 5000 { // more than one millisecond holds
		next()
	}
	c.set(start.Add(-time.Minute)) // the clock steps back a minute
	for range 5000 {
		next()
	}
	c.set(start.Add(time.Second))
	next()
	if got := Time(last); !got.Equal(start.Add(time.Second)) {
		t.Errorf("once the clock is ahead again, ids follow it: Time = %v", got)
	}
}

// TestLeaseCarriesLastTime: a new holder of a node starts after the time
// its last holder used, even with a clock behind it.
func TestLeaseCarriesLastTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	c := &clock{t: now}
	old := leased(t, 5, c)
	c.set(now.Add(time.Hour))
	oldID, _ := old.Next()

	c.set(now) // the new holder's clock is an hour behind
	g := New()
	g.Clock = c.now
	g.Lease(5, old.LastUnixMilli(), now.Add(time.Hour))
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id <= oldID {
		t.Fatalf("new holder's id %d is not above the old holder's %d", id, oldID)
	}
}

func TestConcurrentUnique(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	g := leased(t, 9, c)
	const workers, each = 8, 2000
	ids := make(chan int64, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				id, err := g.Next()
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %d made twice", id)
		}
		seen[id] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d ids, want %d", len(seen), workers*each)
	}
}
