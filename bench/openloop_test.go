package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallingServer answers at once, except that every request arriving in
// the window from 300 ms after the first request, for stall, waits for the
// window's end: the whole server pauses once, as in a long GC pause.
type stallingServer struct {
	*httptest.Server
	stall time.Duration
	once  sync.Once
	from  time.Time // set by the first request
	ready chan struct{}
}

func newStallingServer(t *testing.T, stall time.Duration) *stallingServer {
	t.Helper()
	s := &stallingServer{stall: stall, ready: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.once.Do(func() {
			s.from = time.Now().Add(300 * time.Millisecond)
			close(s.ready)
		})
		<-s.ready
		if now := time.Now(); !now.Before(s.from) && now.Before(s.from.Add(s.stall)) {
			time.Sleep(s.from.Add(s.stall).Sub(now))
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

// runOpen runs an open loop against the server and returns each request's
// latency, by index, and the loop's stats.
func runOpen(t *testing.T, s *stallingServer, loop openLoop) ([]time.Duration, openStats) {
	t.Helper()
	client := newClient(loop.inflight)
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, loop.n)
	var recorded atomic.Int64
	st := loop.run(context.Background(), func(ctx context.Context, i int64) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		return err
	}, func(i int64, d time.Duration, err error) {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if lat[i] != 0 {
			t.Errorf("request %d recorded twice", i)
		}
		lat[i] = d
		recorded.Add(1)
	})
	if n := recorded.Load(); n != st.sent {
		t.Errorf("%d requests recorded, %d sent", n, st.sent)
	}
	return lat, st
}

// due is request i's intended send time, as openLoop schedules it.
func due(st openStats, rate float64, i int) time.Time {
	return st.start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
}

// checkStallCounted: every request due during the stall has a latency,
// from its due time, that reaches at least the stall's end.
func checkStallCounted(t *testing.T, s *stallingServer, st openStats, rate float64, lat []time.Duration) (during int) {
	t.Helper()
	end := s.from.Add(s.stall)
	for i := range lat {
		d := due(st, rate, i)
		if d.Before(s.from) || !d.Before(end) {
			continue
		}
		during++
		if want := end.Sub(d); lat[i] < want {
			t.Errorf("request %d, due %v into the %v stall: latency %v, want at least %v (to the stall's end)",
				i, d.Sub(s.from), s.stall, lat[i], want)
		}
	}
	return during
}

// TestOpenLoopCountsStall: with senders to spare, a 200 ms stall of the
// server shows in every request due during it, not only in the few a
// closed loop would have had in flight. The deadline is far (the default,
// 3 s, passed on a loaded machine and dropped requests): what is tested
// is that nothing is skipped, and the deadline's drop has its own test.
func TestOpenLoopCountsStall(t *testing.T) {
	t.Parallel()
	s := newStallingServer(t, 200*time.Millisecond)
	const rate = 1000.0
	lat, st := runOpen(t, s, openLoop{rate: rate, n: 1000, inflight: 400, deadline: time.Minute})
	if st.sent != 1000 || st.dropped != 0 {
		t.Fatalf("sent %d, dropped %d; want 1000, 0", st.sent, st.dropped)
	}
	if during := checkStallCounted(t, s, st, rate, lat); during < 150 {
		t.Errorf("%d requests due during the stall, want about 200", during)
	}
	slow := 0
	for _, d := range lat {
		if d >= 100*time.Millisecond {
			slow++
		}
	}
	// About the 100 requests due in the stall's first half waited 100 ms
	// or more; a closed loop of 16 would have shown 16.
	if slow < 90 {
		t.Errorf("%d requests took 100 ms or more, want about 100", slow)
	}
}

// TestOpenLoopFallsBehindWithoutSkipping: with too few senders, the loop
// sends late, counts them, skips none, and their latencies still run from
// their due times.
func TestOpenLoopFallsBehindWithoutSkipping(t *testing.T) {
	t.Parallel()
	s := newStallingServer(t, 200*time.Millisecond)
	const rate = 1000.0
	lat, st := runOpen(t, s, openLoop{rate: rate, n: 600, inflight: 4, deadline: time.Minute})
	if st.sent != 600 || st.dropped != 0 {
		t.Fatalf("sent %d, dropped %d; want 600, 0: a late sender must not skip", st.sent, st.dropped)
	}
	if st.late < 150 {
		t.Errorf("%d requests sent late, want about the 200 due during the stall", st.late)
	}
	if st.lag < 150*time.Millisecond {
		t.Errorf("the most a request was sent late: %v, want about the stall's 200 ms", st.lag)
	}
	checkStallCounted(t, s, st, rate, lat)
}

// TestOpenLoopDropsAtDeadline: requests that cannot be sent by the
// deadline are counted as dropped, not hidden.
func TestOpenLoopDropsAtDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	var sent atomic.Int64
	st := openLoop{rate: 1000, n: 100, inflight: 2, deadline: 50 * time.Millisecond}.run(context.Background(),
		func(ctx context.Context, i int64) error {
			if sent.Add(1) == 2 {
				time.AfterFunc(100*time.Millisecond, func() { release <- struct{}{}; release <- struct{}{} })
			}
			res, err := http.Post(srv.URL, "text/plain", nil)
			if err == nil {
				res.Body.Close()
			}
			return err
		}, func(int64, time.Duration, error) {})
	if st.sent != 2 || st.dropped != 98 || st.late != 1 {
		t.Errorf("sent %d, late %d, dropped %d; want 2 (both senders stuck), 1 (the third, waiting), 98", st.sent, st.late, st.dropped)
	}
}
