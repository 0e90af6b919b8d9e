package startstop

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestStartOnceStopWaitsAndRestarts(t *testing.T) {
	synctest.Test(t, testStartOnceStopWaitsAndRestarts)
}

func testStartOnceStopWaitsAndRestarts(t *testing.T) {
	var s Service
	s.Stop() // before Start: nothing to stop
	var runs atomic.Int32
	release := make(chan struct{})
	run := func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
		<-release
	}
	if !s.Start(t.Context(), run) {
		t.Fatal("first Start did not start")
	}
	if s.Start(t.Context(), run) {
		t.Fatal("second Start started a second loop")
	}
	<-s.Started()
	stopped := s.Stopped()
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	synctest.Wait()
	select {
	case <-done:
		t.Fatal("Stop returned before the loop did")
	default:
	}
	close(release)
	<-done
	<-stopped
	s.Stop() // twice: nothing
	if !s.Start(t.Context(), func(ctx context.Context) { runs.Add(1) }) {
		t.Fatal("Start after Stop did not start")
	}
	<-s.Stopped()
	s.Stop()
	if got := runs.Load(); got != 2 {
		t.Fatalf("runs = %d, want 2", got)
	}
}

func TestStartOutlivesCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Service
		ctx, cancel := context.WithCancel(t.Context())
		s.Start(ctx, func(ctx context.Context) { <-ctx.Done() })
		cancel()
		synctest.Wait()
		select {
		case <-s.Stopped():
			t.Fatal("the loop ended with the caller's context")
		default:
		}
		s.Stop()
	})
}

func TestGuardTurnsPanicIntoError(t *testing.T) {
	err := Guard(slog.New(slog.DiscardHandler), "testing", func() error { panic("boom") })
	if err == nil || err.Error() != "panic: boom" {
		t.Fatalf("Guard = %v, want panic: boom", err)
	}
}

func TestEveryRunsOnTheTickAndGoesOnAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var passes atomic.Int32
		var s Service
		s.Start(t.Context(), func(ctx context.Context) {
			Every(ctx, slog.New(slog.DiscardHandler), time.Second, PassLog{Doing: "testing"}, func(context.Context) error {
				switch passes.Add(1) {
				case 1:
					panic("first pass")
				case 2:
					return errors.New("second pass")
				}
				return nil
			})
		})
		time.Sleep(3500 * time.Millisecond)
		if got := passes.Load(); got != 3 {
			t.Errorf("passes after 3.5s = %d, want 3", got)
		}
		s.Stop()
	})
}
