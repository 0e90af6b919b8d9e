package redisledger

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
	"github.com/seckill/seckill/redis"
)

// topologyRead bounds a read of the topology for the batches, and
// topologyRetry is how long after a failed one the next may begin: not at
// the sale's rate.
const (
	topologyRead  = time.Second
	topologyRetry = 100 * time.Millisecond
)

// topologyRefresh routes a Cluster's admissions to their masters by the
// topology at hand, and has it read afresh, one read at a time, on a loop
// of its own: the admissions must never wait on a read that a hung node
// can stall.
type topologyRefresh struct {
	cache  Batches
	logger *slog.Logger
	clock  seckill.Clock
	svc    startstop.Service
	// kick carries a read's generation to the loop (redis.HeldTopology).
	kick chan uint64

	// reading says a read is asked for or under way, and failed when the
	// last one failed.
	mu      sync.Mutex
	reading bool
	failed  time.Time
}

// master returns the master that holds key from the topology at hand,
// without waiting for Redis: "" when there is none (forgotten after a
// failover, or not read yet) or it names none for key (its master is
// down). A topology older than redis.TopologyFor is still used, and read
// afresh in the background. The read leaves out a shard whose master is
// down, so that the other masters go on batching.
func (r *topologyRefresh) master(key string) string {
	t, at, gen := r.cache.HeldTopology()
	now := r.clock.Now()
	r.mu.Lock()
	if (t == nil || now.Sub(at) > redis.TopologyFor) && !r.reading && now.Sub(r.failed) > topologyRetry {
		r.reading = true
		r.kick <- gen // never blocks: one read asked for at a time
	}
	r.mu.Unlock()
	if t == nil {
		return ""
	}
	return t.KeyMaster(key)
}

// run reads the topology each time master asks, until ctx ends.
func (r *topologyRefresh) run(ctx context.Context) {
	for {
		var gen uint64
		select {
		case <-ctx.Done():
			return
		case gen = <-r.kick:
		}
		rctx, cancel := context.WithTimeout(ctx, topologyRead)
		err := startstop.Guard(r.logger, "reading the Redis topology for the group commit", func() error {
			return r.cache.RefreshTopology(rctx, gen)
		})
		cancel()
		r.mu.Lock()
		r.reading = false
		if err != nil {
			r.failed = r.clock.Now()
		}
		r.mu.Unlock()
	}
}

// stop ends the loop and drops a read asked for and not begun.
func (r *topologyRefresh) stop() {
	r.svc.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.kick:
	default:
	}
	r.reading = false
}
