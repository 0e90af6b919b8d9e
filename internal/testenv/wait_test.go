package testenv

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	WaitFor(t, time.Minute, "the third look", func() bool { return calls.Add(1) == 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond was called %d times, want 3: WaitFor must return as soon as it holds", n)
	}
}

func TestWaitForFailsAfterTheTimeout(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(rec, 50*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if rec.fatal == "" {
		t.Fatal("WaitFor returned for a condition that never held, without failing the test")
	}
	if want := "never: not within 50ms"; rec.fatal != want {
		t.Fatalf("failure = %q, want %q", rec.fatal, want)
	}
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
