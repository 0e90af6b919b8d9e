package worker

import (
	"context"
	"slices"
	"sync"

	"github.com/seckill/seckill"
)

var (
	_ seckill.Backpressure = (*Pool)(nil)
	_ seckill.Backlog      = (*Pool)(nil)
)

// slots bounds the batches persisted at once, to a limit that can move.
type slots struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int
	busy  int
}

func newSlots(limit int) *slots {
	s := &slots{limit: limit}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// acquire waits for a free slot, and reports false if ctx ended first.
func (s *slots) acquire(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.busy >= s.limit {
		if ctx.Err() != nil {
			return false
		}
		s.cond.Wait()
	}
	s.busy++
	return true
}

func (s *slots) release() {
	s.mu.Lock()
	s.busy--
	s.cond.Signal()
	s.mu.Unlock()
}

// setLimit moves the limit; batches beyond a lowered one finish first.
func (s *slots) setLimit(n int) {
	s.mu.Lock()
	if n > s.limit {
		s.cond.Broadcast()
	}
	s.limit = n
	s.mu.Unlock()
}

func (s *slots) state() (busy, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy, s.limit
}

// Refusing reports whether admission of the buyer to the voucher is
// paused: the stream of the buyer's home shard reached BacklogHigh and has
// not yet fallen to BacklogLow.
//
// Per shard, not per voucher: each shard's stream is on its own Redis
// master, whose memory the mark protects, and the buyers of the shards
// whose streams drain go on buying. A voucher not read here, or read as
// unsharded, has its one stream.
func (p *Pool) Refusing(voucherID, userID int64) bool {
	if p.refusals.Load() == 0 {
		// Every buy asks: the common answer takes no map lookup.
		return false
	}
	shards := 1
	if n, ok := p.shards.Load(voucherID); ok {
		shards = n.(int)
	}
	_, ok := p.refusing.Load(seckill.Shard{VoucherID: voucherID, Index: seckill.HomeShard(userID, shards)})
	return ok
}

// watchBacklog reads each stream's backlog: it pauses admission to a
// stream (a voucher's, or one of its shards') at the high-water mark and
// resumes it at the low one, and widens or narrows the pool with the total
// backlog.
func (p *Pool) watchBacklog() {
	var total int64
	streams := p.watched()
	for _, s := range streams {
		n, err := p.stream.Backlog(p.readCtx, s)
		if err != nil {
			continue
		}
		total += n
		if p.cfg.BacklogHigh <= 0 {
			continue
		}
		_, paused := p.refusing.Load(s)
		switch {
		case !paused && n >= p.cfg.BacklogHigh:
			p.refusing.Store(s, struct{}{})
			p.refusals.Add(1)
			p.metrics.backpressure.Inc()
			shardLogger(p.logger, s).Warn("the order backlog reached its high-water mark: admission paused until the workers catch up",
				"backlog", n, "high", p.cfg.BacklogHigh, "low", p.cfg.BacklogLow, "breaker", p.breaker.state())
		case paused && n <= p.cfg.BacklogLow:
			p.refusing.Delete(s)
			p.refusals.Add(-1)
			shardLogger(p.logger, s).Info("the order backlog fell to its low-water mark: admission resumes", "backlog", n)
		}
	}
	// Streams no longer read (a voucher retired) refuse nothing more.
	p.refusing.Range(func(k, _ any) bool {
		if !slices.Contains(streams, k.(seckill.Shard)) {
			if _, loaded := p.refusing.LoadAndDelete(k); loaded {
				p.refusals.Add(-1)
			}
		}
		return true
	})
	// One more batch at once for every two batches waiting, within bounds.
	want := p.cfg.Workers + int(total/int64(2*p.cfg.BatchSize))
	p.slots.setLimit(max(p.cfg.Workers, min(want, p.cfg.WorkersMax)))
}

// WorkerStats describes the pool for the stats.
func (p *Pool) WorkerStats() seckill.WorkerStats {
	busy, limit := p.slots.state()
	return seckill.WorkerStats{Consumer: p.cfg.Consumer, Mode: seckill.ModeStream, Busy: busy, Allowed: limit, Breaker: p.breaker.state()}
}

// Backlogged reports whether the backlog of any of the voucher's streams
// (one per shard) is above its high-water mark, admission to it paused:
// the challenges of the voucher grow harder meanwhile
// (seckill.Difficulty).
func (p *Pool) Backlogged(voucherID int64) bool {
	if p.refusals.Load() == 0 {
		return false
	}
	shards := 1
	if n, ok := p.shards.Load(voucherID); ok {
		shards = n.(int)
	}
	for i := range shards {
		if _, ok := p.refusing.Load(seckill.Shard{VoucherID: voucherID, Index: i}); ok {
			return true
		}
	}
	return false
}
