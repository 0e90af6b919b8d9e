package http

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestRequestContext holds requestContext to what context.WithDeadline and
// its cancel do, whether or not anything waited on it first.
func TestRequestContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	for _, waited := range []bool{false, true} {
		name := map[bool]string{false: "never waited on", true: "waited on"}[waited]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			arm := func(c *requestContext) {
				if waited {
					_ = c.Done()
				}
			}

			parent := context.WithValue(context.Background(), key{}, "v")
			deadline := time.Now().Add(time.Hour)
			c := newRequestContext(parent, deadline)
			arm(c)
			if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
				t.Errorf("Deadline = %v, %v; want %v, true", d, ok, deadline)
			}
			if c.Value(key{}) != "v" {
				t.Errorf("Value = %v, want the parent's", c.Value(key{}))
			}
			if err := c.Err(); err != nil {
				t.Errorf("Err before anything = %v", err)
			}
			// A child made after it is canceled with it.
			child, cancelChild := context.WithCancel(c)
			defer cancelChild()
			c.release()
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err after release = %v, want Canceled", err)
			}
			select {
			case <-c.Done():
			default:
				t.Error("Done not closed after release")
			}
			select {
			case <-child.Done():
			case <-time.After(10 * time.Second):
				t.Error("a child not canceled by release")
			}

			// The parent canceled.
			p, cancelParent := context.WithCancel(context.Background())
			c = newRequestContext(p, time.Now().Add(time.Hour))
			arm(c)
			cancelParent()
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err after the parent's cancel = %v, want Canceled", err)
			}
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Error("Done not closed by the parent's cancel")
			}
			c.release()

			// The deadline passed.
			c = newRequestContext(context.Background(), time.Now().Add(20*time.Millisecond))
			arm(c)
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed at the deadline")
			}
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Err after the deadline = %v, want DeadlineExceeded", err)
			}
			c.release()
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Err after the deadline and release = %v, want DeadlineExceeded still", err)
			}
		})
	}

	// Never waited on, its deadline passed: Err says so without arming.
	c := newRequestContext(context.Background(), time.Now().Add(-time.Second))
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err past the deadline = %v, want DeadlineExceeded", err)
	}
	if c.armed.Load() != nil {
		t.Error("Err armed the context")
	}
}

// TestRequestContextConcurrent: many goroutines waiting while it is
// released all see the same Done closed (run with -race).
func TestRequestContextConcurrent(t *testing.T) {
	t.Parallel()
	for range 200 {
		c := newRequestContext(context.Background(), time.Now().Add(time.Hour))
		var wg sync.WaitGroup
		dones := make([]<-chan struct{}, 8)
		for i := range dones {
			wg.Go(func() { dones[i] = c.Done() })
		}
		wg.Go(c.release)
		wg.Wait()
		for i, d := range dones {
			if d != dones[0] {
				t.Fatalf("goroutine %d got another Done channel", i)
			}
			select {
			case <-d:
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed after release")
			}
		}
	}
}

// TestRequestContextErrStable: "After Err returns a non-nil error,
// successive calls to Err return the same error" (context.Context), however
// it ended and whatever happens after: a goroutine that outlives the request
// and waits on it, the parent canceled after the deadline, a release after
// the deadline. (Found by review: each of these changed Err.)
func TestRequestContextErrStable(t *testing.T) {
	t.Parallel()
	t.Run("released, then Done after the deadline", func(t *testing.T) {
		c := newRequestContext(context.Background(), time.Now().Add(20*time.Millisecond))
		c.release()
		before := c.Err()
		time.Sleep(40 * time.Millisecond)
		<-c.Done()
		if after := c.Err(); after != before {
			t.Errorf("Err was %v, is %v after Done", before, after)
		}
	})
	t.Run("deadline passed, then the parent canceled", func(t *testing.T) {
		p, cancel := context.WithCancel(context.Background())
		c := newRequestContext(p, time.Now().Add(20*time.Millisecond))
		defer c.release()
		time.Sleep(40 * time.Millisecond)
		before := c.Err()
		cancel()
		if after := c.Err(); after != before {
			t.Errorf("Err was %v, is %v after the parent's cancel", before, after)
		}
	})
	t.Run("deadline passed, then released", func(t *testing.T) {
		c := newRequestContext(context.Background(), time.Now().Add(20*time.Millisecond))
		time.Sleep(40 * time.Millisecond)
		before := c.Err()
		c.release()
		if after := c.Err(); after != before {
			t.Errorf("Err was %v, is %v after release", before, after)
		}
	})
}
