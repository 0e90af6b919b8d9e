package http

import (
	"testing"
	"time"
)

func TestLogSampler(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newLogSampler(3)
	l.now = func() time.Time { return now }
	passed := 0
	for range 100 {
		if ok, _ := l.allow("a"); ok {
			passed++
		}
	}
	if passed != 3 {
		t.Fatalf("%d of 100 lines in one second passed, want 3", passed)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Error("another kind was held back by the first")
	}
	now = now.Add(time.Second)
	ok, suppressed := l.allow("a")
	if !ok || suppressed != 97 {
		t.Errorf("next second: allow = %v with %d suppressed, want true with 97", ok, suppressed)
	}
}
