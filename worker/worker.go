// Package worker persists admitted orders. It reads each voucher's order
// stream as one consumer of the stream's group, writes the orders to the
// database in batches, one transaction each, and acknowledges them only
// after the commit (DESIGN section 2). A reclaimer takes over the messages
// of consumers that died, and messages that cannot be persisted go to the
// dead letters with their stock given back, never silently dropped.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
)

// Store is what the workers need of the database.
type Store interface {
	SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error)
	FailOrder(ctx context.Context, o *seckill.Order) error
	OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error)
	UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error)
	UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error)
}

// Config configures a Pool. Zero fields take the defaults in their comments.
type Config struct {
	// Consumer is this instance's name in the groups; it must be unique
	// among running instances. Required.
	Consumer string
	// Workers is how many batches are persisted at once while the backlog
	// is small. Default 4.
	Workers int
	// WorkersMax is how many batches may be persisted at once when the
	// backlog grows: the pool widens with it. Default 4×Workers.
	WorkersMax int
	// BacklogHigh is the backlog of a voucher's stream at which admission
	// pauses (Refusing reports true) until it falls to BacklogLow: so that
	// Redis never fills up while the database is slow or down. Zero: never.
	BacklogHigh, BacklogLow int64
	// BacklogEvery is how often the backlogs are read. Default 1s.
	BacklogEvery time.Duration
	// BreakerThreshold is how many transient database failures in a row
	// open the circuit breaker; BreakerMin and BreakerMax bound its
	// cool-down, which doubles while the database stays down. Defaults 5,
	// 1s, 30s.
	BreakerThreshold       int
	BreakerMin, BreakerMax time.Duration
	// BatchSize is how many messages one read takes, and one transaction
	// writes. Default 100.
	BatchSize int
	// Block is how long a read waits for messages. Default 2s.
	Block time.Duration
	// Lease is how long a message may sit unacknowledged with its consumer
	// before another takes it over. A worker busy with a message renews its
	// claim every Lease/3. Default 30s.
	Lease time.Duration
	// MaxDeliveries is how many times a message may be delivered before it
	// goes to the dead letters: a message whose consumers keep dying on it.
	// Default 5.
	MaxDeliveries int64
	// ReclaimEvery is how often the reclaimer looks for abandoned messages,
	// dead consumers and stream entries to trim. Default 5s.
	ReclaimEvery time.Duration
	// WatchEvery is how often the list of vouchers to read is refreshed
	// from the database. Default 5s.
	WatchEvery time.Duration
	// Recent is how long after its sale ends a voucher's stream is still
	// read. Default seckill.Recent.
	Recent time.Duration
	// BackoffMin and BackoffMax bound the wait between retries after a
	// transient failure; the wait doubles, with jitter. Defaults 50ms, 5s.
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout bounds how long Stop waits for batches in flight.
	// Default 15s.
	DrainTimeout time.Duration
	// Now returns the current time; tests replace it.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.WorkersMax < c.Workers {
		c.WorkersMax = 4 * c.Workers
	}
	if c.BacklogLow <= 0 || c.BacklogLow > c.BacklogHigh {
		c.BacklogLow = c.BacklogHigh / 2
	}
	if c.BreakerThreshold <= 0 {
		c.BreakerThreshold = 5
	}
	def(&c.BacklogEvery, time.Second)
	def(&c.BreakerMin, time.Second)
	def(&c.BreakerMax, 30*time.Second)
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5
	}
	def(&c.Block, 2*time.Second)
	def(&c.Lease, 30*time.Second)
	def(&c.ReclaimEvery, 5*time.Second)
	def(&c.WatchEvery, 5*time.Second)
	def(&c.Recent, seckill.Recent)
	def(&c.BackoffMin, 50*time.Millisecond)
	def(&c.BackoffMax, 5*time.Second)
	def(&c.DrainTimeout, 15*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Pool is the workers of one instance: a reader per voucher stream, a
// bounded number of batches persisted at once, and a reclaimer.
type Pool struct {
	cfg     Config
	stream  seckill.OrderStream
	store   Store
	rebuild func(ctx context.Context, voucherID int64) error
	logger  *slog.Logger
	metrics *metrics

	slots   *slots
	breaker *breaker

	// refusing holds the vouchers whose admission is paused (high water).
	refusing sync.Map // voucher id → struct{}

	// readCtx ends when Stop begins: no more reads. workCtx ends when the
	// batches in flight have had DrainTimeout to finish.
	readCtx, workCtx      context.Context
	stopReading, stopWork context.CancelFunc
	loops, inflight       sync.WaitGroup
	mu                    sync.Mutex
	watching              map[int64]context.CancelFunc // stops a voucher's reader
	started, stopOnce     sync.Once
}

// New returns a pool. rebuild puts a voucher back in Redis from the
// database (seckill.VoucherService.Rebuild); the pool calls it when a
// stream's group is gone.
func New(cfg Config, stream seckill.OrderStream, store Store, rebuild func(ctx context.Context, voucherID int64) error, reg prometheus.Registerer, logger *slog.Logger) (*Pool, error) {
	cfg = cfg.withDefaults()
	if cfg.Consumer == "" {
		return nil, errors.New("worker: Config.Consumer is required")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Pool{
		cfg:      cfg,
		stream:   stream,
		store:    store,
		rebuild:  rebuild,
		logger:   logger.With("consumer", cfg.Consumer),
		metrics:  m,
		slots:    newSlots(cfg.Workers),
		breaker:  newBreaker(cfg.BreakerThreshold, cfg.BreakerMin, cfg.BreakerMax, cfg.Now),
		watching: map[int64]context.CancelFunc{},
	}, nil
}

// Start begins reading the streams of the vouchers on sale, and of those
// whose sale ended within Config.Recent. It returns at once.
func (p *Pool) Start(ctx context.Context) error {
	p.started.Do(func() {
		p.init(ctx)
		if err := p.refresh(); err != nil {
			// Not fatal: the next refresh tries again.
			p.logger.Error("could not list the vouchers to read", "err", err)
		}
		p.loops.Add(3)
		go p.loop(p.cfg.WatchEvery, p.refreshLogged)
		go p.loop(p.cfg.ReclaimEvery, p.reclaimAll)
		go p.loop(p.cfg.BacklogEvery, p.watchBacklog)
	})
	return nil
}

// init makes the pool's contexts: what Start does before it starts reading.
func (p *Pool) init(ctx context.Context) {
	base := context.WithoutCancel(ctx)
	p.readCtx, p.stopReading = context.WithCancel(base)
	p.workCtx, p.stopWork = context.WithCancel(base)
}

// Stop stops reading, lets the batches in flight finish and be
// acknowledged (for up to DrainTimeout), and returns. Messages read and not
// finished stay pending, for a live consumer to reclaim. Safe to call twice.
func (p *Pool) Stop() {
	p.stopOnce.Do(func() {
		if p.stopReading == nil {
			return
		}
		p.stopReading()
		done := make(chan struct{})
		go func() {
			p.loops.Wait()
			p.inflight.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(p.cfg.DrainTimeout):
			p.logger.Warn("batches still in flight at the end of the drain time; they stay pending for another consumer")
			p.stopWork()
			<-done
		}
		p.stopWork()
	})
}

// Watch starts reading the voucher's stream now, if not already.
func (p *Pool) Watch(voucherID int64) {
	if p.readCtx == nil || p.readCtx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watching[voucherID] != nil {
		return
	}
	ctx, cancel := context.WithCancel(p.readCtx)
	p.watching[voucherID] = cancel
	p.loops.Add(1)
	go p.read(ctx, voucherID)
}

// watched returns the vouchers being read.
func (p *Pool) watched() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]int64, 0, len(p.watching))
	for id := range p.watching {
		ids = append(ids, id)
	}
	return ids
}

func (p *Pool) loop(every time.Duration, fn func()) {
	defer p.loops.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.readCtx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (p *Pool) refreshLogged() {
	if err := p.refresh(); err != nil && p.readCtx.Err() == nil {
		p.logger.Error("could not list the vouchers to read", "err", err)
	}
}

// refresh starts a reader for every voucher whose orders may still come,
// and stops those of vouchers whose sale ended longer than Recent ago.
func (p *Pool) refresh() error {
	vs, err := p.store.UnendedVouchers(p.readCtx, p.cfg.Now().Add(-p.cfg.Recent))
	if err != nil {
		return fmt.Errorf("worker: list vouchers: %w", err)
	}
	open := make(map[int64]bool, len(vs))
	for _, v := range vs {
		open[v.ID] = true
		p.Watch(v.ID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, stop := range p.watching {
		if !open[id] {
			stop()
			delete(p.watching, id)
		}
	}
	return nil
}

// read is the reader of one voucher's stream: first the messages this
// consumer was given before and never acknowledged, then new ones, each
// batch handed to a worker.
func (p *Pool) read(ctx context.Context, voucherID int64) {
	defer p.loops.Done()
	log := p.logger.With("voucher", voucherID)
	retry := p.backoff()
	after := "0"
	for ctx.Err() == nil {
		msgs, err := p.stream.ReadPending(ctx, voucherID, p.cfg.Consumer, after, p.cfg.BatchSize)
		if err == nil && len(msgs) == 0 {
			break
		}
		if err != nil {
			if !p.readFailed(ctx, voucherID, err, log) {
				retry.wait(ctx)
			}
			continue
		}
		after = msgs[len(msgs)-1].EntryID
		p.inflight.Add(1)
		p.persist(msgs)
	}
	retry.reset()
	for ctx.Err() == nil {
		msgs, err := p.stream.ReadOrders(ctx, voucherID, p.cfg.Consumer, p.cfg.BatchSize, p.cfg.Block)
		if err != nil {
			if !p.readFailed(ctx, voucherID, err, log) {
				retry.wait(ctx)
			}
			continue
		}
		retry.reset()
		if len(msgs) > 0 && !p.dispatch(msgs) {
			return
		}
	}
}

// readFailed handles a failed read and reports whether to read again at
// once: after a rebuild of a lost stream.
func (p *Pool) readFailed(ctx context.Context, voucherID int64, err error, log *slog.Logger) bool {
	if ctx.Err() != nil {
		return true
	}
	if errors.Is(err, seckill.ErrStreamLost) {
		// Redis lost its data: put the voucher back from the database
		// (that also makes the group, at the stream's start) before reading.
		log.Error("order stream lost in Redis; rebuilding the voucher from the database", "err", err)
		p.metrics.streamsLost.Inc()
		if err := p.rebuild(ctx, voucherID); err != nil {
			log.Error("could not rebuild the voucher", "err", err)
			return false
		}
		return true
	}
	log.Warn("could not read orders", "err", err)
	return false
}

// dispatch hands msgs to a worker when one is free, and reports false if
// the pool stopped first.
func (p *Pool) dispatch(msgs []seckill.OrderMessage) bool {
	if !p.slots.acquire(p.workCtx) {
		return false
	}
	p.inflight.Add(1)
	go func() {
		defer p.slots.release()
		p.persist(msgs)
	}()
	return true
}

// backoff is an exponential wait with full jitter.
type backoff struct {
	min, max, next time.Duration
}

func (p *Pool) backoff() *backoff {
	return &backoff{min: p.cfg.BackoffMin, max: p.cfg.BackoffMax, next: p.cfg.BackoffMin}
}

func (b *backoff) reset() { b.next = b.min }

// wait sleeps a random time up to the current step, doubles the step, and
// reports false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	d := time.Duration(rand.Int64N(int64(b.next)) + 1)
	b.next = min(2*b.next, b.max)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
