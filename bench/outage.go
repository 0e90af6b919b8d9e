package bench

import (
	"context"
	"time"
)

// Outage makes the server's database unreachable for a while during the
// sale, e.g. with a LatencyProxy's Down and Up: the database stopped
// mid-run and back. The books are checked after it is back, as after any
// sale: nothing answered 200 may be lost.
type Outage struct {
	// At is how long after the sale starts Down is called; For, how long
	// after that Up is. The sale waits for Up before it ends.
	At, For time.Duration
	// Down and Up cut the database off and let it back. Required.
	Down, Up func()
}

// OutageReport is when an outage was, from the sale's start.
type OutageReport struct {
	Down time.Duration `json:"downAfterNs"`
	Up   time.Duration `json:"upAfterNs"`
}

// run calls Down at At after start and Up For later, and returns when it
// did; when ctx ends first, Up is still called if Down was.
func (o *Outage) run(ctx context.Context, start time.Time) *OutageReport {
	if !sleepUntil(ctx, start.Add(o.At)) {
		return nil
	}
	o.Down()
	rep := &OutageReport{Down: time.Since(start)}
	sleepUntil(ctx, start.Add(rep.Down+o.For))
	o.Up()
	rep.Up = time.Since(start)
	return rep
}

// sleepUntil waits until t, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// probeDBLatency measures, a quarter into the sale (or at once without a
// Duration), what the database's delaying proxy adds under the sale's
// load, and reports it. A probe that fails (the sale ended, the database
// is out) is left out of the report, saying so.
func (r *run) probeDBLatency(ctx context.Context, probe func(context.Context) (Added, error)) {
	if !sleepUntil(ctx, time.Now().Add(r.cfg.Duration/4)) {
		return
	}
	a, err := probe(ctx)
	if err != nil {
		r.say("the database's added round trip during the sale: not measured: %v", err)
		return
	}
	r.report.DBLatencyUnderLoad = &a
}
