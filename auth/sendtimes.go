package auth

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// sendTimes keeps how long the last sends took, so that the answer to a
// phone whose code stands, which sends nothing, comes as late as the answer
// to one that is sent a code: otherwise its speed would tell that the phone
// has a code outstanding. Its zero value is ready.
type sendTimes struct {
	mu   sync.Mutex
	ring [32]time.Duration
	n    int // times kept, up to len(ring)
	next int // where the next one goes
}

// record keeps the time a send took.
func (s *sendTimes) record(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring[s.next] = d
	s.next = (s.next + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
}

// sample returns the time of one of the recent sends, drawn at random, so
// that the waits spread as the sends do; zero before the first send.
func (s *sendTimes) sample() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return 0
	}
	return s.ring[rand.IntN(s.n)]
}

// wait waits as long as a recent send took, or until ctx ends.
func (s *sendTimes) wait(ctx context.Context) {
	d := s.sample()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
