package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var (
	errConflict = errors.New("conflict")
	errFinal    = errors.New("final")
)

func isConflict(err error) bool { return errors.Is(err, errConflict) }

// calls returns a try that fails with errs in turn, then succeeds, and
// counts its calls in n.
func calls(n *int, errs ...error) func() error {
	return func() error {
		*n++
		if *n <= len(errs) {
			return errs[*n-1]
		}
		return nil
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		attempts  int
		errs      []error
		wantErr   error
		wantCalls int
	}{
		{"FirstCall", 5, nil, nil, 1},
		{"AfterConflicts", 5, []error{errConflict, errConflict}, nil, 3},
		{"NotRetryable", 5, []error{errConflict, errFinal, errConflict}, errFinal, 2},
		{"AttemptsRunOut", 3, []error{errConflict, errConflict, errConflict, errConflict}, errConflict, 3},
		{"LastAttemptSucceeds", 3, []error{errConflict, errConflict}, nil, 3},
		{"OneAttempt", 1, []error{errConflict}, errConflict, 1},
		{"ZeroAttemptsIsOne", 0, []error{errConflict}, errConflict, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var waits []int
			p := Policy{
				Attempts:  tc.attempts,
				Retryable: isConflict,
				Wait:      func(n int) time.Duration { waits = append(waits, n); return 0 },
			}
			var n int
			err := Do(t.Context(), p, calls(&n, tc.errs...))
			if err != tc.wantErr {
				t.Errorf("Do = %v, want %v", err, tc.wantErr)
			}
			if n != tc.wantCalls {
				t.Errorf("Do called try %d times, want %d", n, tc.wantCalls)
			}
			// A wait between calls, after the nth: none after the last.
			if len(waits) != n-1 {
				t.Errorf("Do waited %d times for %d calls, want %d", len(waits), n, n-1)
			}
			for i, w := range waits {
				if w != i+1 {
					t.Errorf("wait %d: Wait(%d), want Wait(%d)", i, w, i+1)
				}
			}
		})
	}
}

// TestDoStopsOnContext checks that Do gives up a wait when ctx ends, with
// ctx's error, and calls try no more.
func TestDoStopsOnContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p := Policy{
		Attempts:  5,
		Retryable: isConflict,
		// Far longer than the test may take.
		Wait: func(int) time.Duration { return time.Hour },
	}
	var n int
	err := Do(ctx, p, func() error {
		n++
		cancel()
		return errConflict
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want %v", err, context.Canceled)
	}
	if n != 1 {
		t.Errorf("Do called try %d times after ctx ended, want 1", n)
	}
}

// TestDoNoWait checks that without Wait, Do calls again at once, and runs
// its attempts even with ctx done: the operation sees ctx itself.
func TestDoNoWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var n int
	err := Do(ctx, Policy{Attempts: 3, Retryable: isConflict}, calls(&n, errConflict, errConflict))
	if err != nil || n != 3 {
		t.Errorf("Do = %v after %d calls, want nil after 3", err, n)
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 5} {
		limit := time.Duration(n) * time.Millisecond
		var spread bool
		for range 1000 {
			d := Jitter(n)
			if d < 0 || d >= limit {
				t.Fatalf("Jitter(%d) = %v, want in [0, %v)", n, d, limit)
			}
			if d >= limit/2 {
				spread = true
			}
		}
		if !spread {
			t.Errorf("Jitter(%d): 1000 waits all below %v", n, limit/2)
		}
	}
}
