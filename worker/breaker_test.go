package worker

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	b := newBreaker(3, time.Second, 4*time.Second, clock.now)
	ctx := context.Background()
	try := func(fail bool) {
		t.Helper()
		probe, ok := b.wait(ctx)
		if !ok {
			t.Fatal("wait ended")
		}
		b.result(probe, fail)
	}
	for i := range 2 {
		try(true)
		if s := b.state(); s != "closed" {
			t.Fatalf("after %d failures: %s, want closed", i+1, s)
		}
	}
	try(true)
	if s := b.state(); s != "open" {
		t.Fatalf("after 3 failures: %s, want open", s)
	}
	// While open, callers wait: a short deadline ends the wait.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, ok := b.wait(short); ok {
		t.Fatal("wait returned while the breaker is open")
	}
	cancel()
	// After the cool-down, exactly one probe goes; the others wait for it.
	clock.add(time.Second)
	probe, ok := b.wait(ctx)
	if !ok || !probe || b.state() != "half-open" {
		t.Fatalf("after the cool-down: probe %v ok %v state %s; want a probe, half-open", probe, ok, b.state())
	}
	second := make(chan bool, 1)
	go func() {
		p, _ := b.wait(ctx)
		second <- p
	}()
	select {
	case <-second:
		t.Fatal("a second caller went while the probe was out")
	case <-time.After(30 * time.Millisecond):
	}
	b.result(true, true) // the probe fails: open again, twice as long
	if s := b.state(); s != "open" {
		t.Fatalf("after a failed probe: %s, want open", s)
	}
	clock.add(time.Second)
	if b.state() != "open" {
		t.Fatal("the cool-down did not double after a failed probe")
	}
	clock.add(time.Second)
	if p := <-second; !p {
		t.Fatal("the waiting caller did not become the next probe")
	}
	b.result(true, false) // the probe succeeds: closed
	if s := b.state(); s != "closed" {
		t.Fatalf("after a good probe: %s, want closed", s)
	}
	if probe, ok := b.wait(ctx); probe || !ok {
		t.Fatalf("closed: wait = %v, %v; want no probe, ok", probe, ok)
	}
}
