package redisledger

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
	"github.com/seckill/seckill/redis"
)

// Group commit of the admissions that wait for replicas
// (--redis-wait-replicas).
//
// WAIT covers every write made before it on its connection. So instead of
// a connection, a script and a WAIT per admission (a replica round trip
// each), the admissions bound for one master queue up; a batch takes all
// that are queued (at most maxBatch) and package redis sends it
// (redis.Client.SendBatch): the scripts pipelined on a dedicated
// connection, one WAIT after them. A master has at most
// redis.Config.WaitBatches batches in flight, each from a lane of its
// own: while they are all out, new admissions queue, and the next batch
// takes them all. Under a light load a batch is one admission; under a
// heavy one a WAIT confirms hundreds.

// maxBatch bounds the admissions one batch pipelines: a batch's scripts
// run back to back on the master, and the admissions queued behind a full
// batch go in the next.
const maxBatch = 512

// Batches is what the group commit asks of package redis: plain calls, each
// one round trip or none (*redis.Client).
type Batches interface {
	// Kind is the deployment's kind (redis.KindCluster: batches by master).
	Kind() string
	// WaitBatches is how many batches a master may have in flight.
	WaitBatches() int
	// SendBatch sends one batch to a master and WAITs once.
	SendBatch(addr string, b redis.Batch) error
	// HeldTopology, RefreshTopology: the topology at hand, and a read of
	// it afresh (topology.go).
	HeldTopology() (*redis.Topology, time.Time, uint64)
	RefreshTopology(ctx context.Context, gen uint64) error
}

var _ Batches = (*redis.Client)(nil)

// GroupCommit batches the admissions that wait for replicas by master: a
// redis.Batcher, set on the client at wiring (redis.Client.SetBatcher).
// Its lanes and its reads of the topology run from Start to Stop; an
// admission outside them runs alone.
type GroupCommit struct {
	cache  Batches
	logger *slog.Logger
	topo   topologyRefresh
	lanes  int

	mu      sync.Mutex
	ctx     context.Context // the lanes' context; nil when not started
	masters map[string]*commitQueue
}

var _ redis.Batcher = (*GroupCommit)(nil)

// NewGroupCommit returns the group commit of cache's admissions, not
// started. A nil clock is time.Now.
func NewGroupCommit(cache Batches, logger *slog.Logger, clock seckill.Clock) *GroupCommit {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &GroupCommit{cache: cache, logger: logger, lanes: max(cache.WaitBatches(), 1),
		topo: topologyRefresh{cache: cache, logger: logger, clock: clock, kick: make(chan uint64, 1)}}
}

// Start starts the reads of the topology; a master's lanes start with its
// first admission.
func (g *GroupCommit) Start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx != nil {
		return
	}
	g.ctx = context.WithoutCancel(ctx)
	g.topo.svc.Start(g.ctx, g.topo.run)
}

// Stop stops the lanes, once their batches are answered, and the reads of
// the topology; the admissions still queued, and any after, run alone.
// Safe to call twice, and before Start.
func (g *GroupCommit) Stop() {
	g.mu.Lock()
	masters := g.masters
	g.ctx, g.masters = nil, nil
	g.mu.Unlock()
	for _, q := range masters {
		for i := range q.lanes {
			q.lanes[i].Stop()
		}
		q.mu.Lock()
		q.closed = true
		waiting := q.waiting
		q.waiting = nil
		q.mu.Unlock()
		for _, p := range waiting {
			p.answer(nil, redis.ErrRunAlone) // no batch holds it: only Stop answers it
		}
	}
	g.topo.stop()
}

// commitQueue is one master's queue: admissions waiting for a batch, and
// the lanes that take them.
type commitQueue struct {
	addr string // "" outside a Cluster: the one master
	// wake holds a token for each lane due to take batches: inflight
	// counts the lanes so taken (busy, or about to be).
	wake  chan struct{}
	lanes []startstop.Service

	mu       sync.Mutex
	waiting  []*pendingAdmission
	inflight int
	closed   bool // stopped: nothing more is queued
}

// pendingAdmission is one admission in a queue, and its answer once its
// batch gives it (done closed).
type pendingAdmission struct {
	cmd rueidis.Completed
	// Guarded by the queue's mu: a batch sent it on a connection it holds
	// (sent); or its caller left before it was sent (abandoned: skipped,
	// never run, never answered).
	sent, abandoned bool

	// answered, out and err are written once, by the lane that answers it
	// (or by Stop), and read once done is closed.
	answered bool
	done     chan struct{}
	out      []rueidis.RedisMessage
	err      error
}

// answer answers p, unless it was answered already.
func (p *pendingAdmission) answer(out []rueidis.RedisMessage, err error) {
	if p.answered {
		return
	}
	p.answered = true
	p.out, p.err = out, err
	close(p.done)
}

// queue returns the queue of the master at addr, its lanes started; nil
// when the group commit is not started.
func (g *GroupCommit) queue(addr string) *commitQueue {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil {
		return nil
	}
	if g.masters == nil {
		g.masters = make(map[string]*commitQueue)
	}
	q := g.masters[addr]
	if q == nil {
		q = g.startQueue(addr)
		g.masters[addr] = q
	}
	return q
}

// startQueue returns a queue for the master at addr, its lanes started.
// Apart from queue, whose q its lanes' closure would move to the heap on
// every call. Called with g.mu held.
func (g *GroupCommit) startQueue(addr string) *commitQueue {
	q := &commitQueue{addr: addr, wake: make(chan struct{}, g.lanes), lanes: make([]startstop.Service, g.lanes)}
	for i := range q.lanes {
		q.lanes[i].Start(g.ctx, func(ctx context.Context) { g.lane(ctx, q) })
	}
	return q
}

// Admit runs the admission cmd (on the key key) in a batch of its master
// and returns its answer: the script's reply only once enough replicas
// have what it wrote. redis.ErrRunAlone when no batch can take it.
func (g *GroupCommit) Admit(ctx context.Context, key string, cmd rueidis.Completed) ([]rueidis.RedisMessage, error) {
	addr := ""
	if g.cache.Kind() == redis.KindCluster {
		// The batch runs on the master's own connections: rueidis' cluster
		// client keeps a dedicated connection to one slot, and a batch
		// holds the admissions of every voucher of the master. Which
		// master comes from the topology at hand, never a read of it.
		if addr = g.topo.master(key); addr == "" {
			return nil, redis.ErrRunAlone // no topology yet: alone, as rueidis routes it
		}
	}
	q := g.queue(addr)
	if q == nil {
		return nil, redis.ErrRunAlone
	}
	p := &pendingAdmission{cmd: cmd, done: make(chan struct{})}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, redis.ErrRunAlone
	}
	q.waiting = append(q.waiting, p)
	wake := q.inflight < g.lanes
	if wake {
		q.inflight++
	}
	q.mu.Unlock()
	if wake {
		// Sent once q.mu is free, which the lane takes at once. Never
		// blocks: at most lanes tokens are out.
		q.wake <- struct{}{}
	}
	select {
	case <-p.done:
		return p.out, p.err
	case <-ctx.Done():
		q.mu.Lock()
		p.abandoned = !p.sent
		q.mu.Unlock()
		// Taken or not, answered as one whose reply was lost: the service
		// must not settle it by reading the buyer's slot, whose order (an
		// earlier unconfirmed one, or this one if it ran) no replica may
		// have.
		return nil, redis.NotConfirmed("the request ended before its batch was confirmed", ctx.Err())
	}
}

// lane is one of q's lanes: woken by a token, it runs batches of q until
// q is empty, and waits for the next.
func (g *GroupCommit) lane(ctx context.Context, q *commitQueue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		g.runBatches(ctx, q)
	}
}

// runBatches runs batches of q until it is empty, or until ctx ends (Stop
// answers what is left), and gives its lane back.
func (g *GroupCommit) runBatches(ctx context.Context, q *commitQueue) {
	for {
		q.mu.Lock()
		if ctx.Err() != nil {
			q.inflight--
			q.mu.Unlock()
			return
		}
		batch := make([]*pendingAdmission, 0, min(len(q.waiting), maxBatch))
		n := 0
		for _, p := range q.waiting {
			if len(batch) == maxBatch {
				break
			}
			n++
			if !p.abandoned {
				batch = append(batch, p)
			}
		}
		q.waiting = q.waiting[n:]
		if len(q.waiting) == 0 {
			q.waiting = nil // let the backing array go
		}
		if len(batch) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		g.runBatch(q, batch)
	}
}

// runBatch has batch sent to q's master. A panic while sending it is
// logged, and what it left unanswered is answered as unconfirmed: it
// may have run.
func (g *GroupCommit) runBatch(q *commitQueue, batch []*pendingAdmission) {
	b := &sendBatch{q: q, batch: batch}
	err := startstop.Guard(g.logger, "sending a batch of admissions that wait for replicas", func() error {
		return g.cache.SendBatch(q.addr, b)
	})
	switch {
	case b.taken == nil:
		// Not sent (a master the client does not know, or a panic before
		// anything was taken): each caller runs its own alone.
		b.taken = batch
		b.answerRest(nil, redis.ErrRunAlone)
	case err != nil:
		b.answerRest(nil, redis.NotConfirmed("the batch failed", err))
	}
}

// sendBatch is one batch as redis.Client.SendBatch takes it.
type sendBatch struct {
	q     *commitQueue
	batch []*pendingAdmission
	// taken are the admissions Take returned; nil until it is called.
	taken []*pendingAdmission
}

// Take returns the commands of the admissions whose callers are still
// waiting, marked sent (a caller who leaves now is answered as if the
// reply were lost).
func (b *sendBatch) Take() []rueidis.Completed {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	live := b.batch[:0]
	for _, p := range b.batch {
		if !p.abandoned {
			p.sent = true
			live = append(live, p)
		}
	}
	b.taken = live
	cmds := make([]rueidis.Completed, len(live))
	for i, p := range live {
		cmds[i] = p.cmd
	}
	return cmds
}

// Answer answers the i-th admission taken.
func (b *sendBatch) Answer(i int, out []rueidis.RedisMessage, err error) {
	b.taken[i].answer(out, err)
}

// answerRest answers the admissions taken that are not answered yet.
func (b *sendBatch) answerRest(out []rueidis.RedisMessage, err error) {
	for _, p := range b.taken {
		p.answer(out, err)
	}
}
