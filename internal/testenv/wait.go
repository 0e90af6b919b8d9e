package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, and fails the test when it has not
// within timeout, naming what it waited for. It polls every 10ms at first
// and backs off to every 100ms, so a long wait on an expensive condition
// (a scan of order statuses over HTTP) does not load what it watches.
// Tests wait on conditions this way, never on a fixed sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}
