// Package worker persists admitted orders. It reads each voucher's order
// stream (each shard's, for a voucher with shards) as one consumer of the
// stream's group, writes the orders to the database in batches, one
// transaction each, and acknowledges them only after the commit
// (docs/design/persistence.md, Persistence). A reclaimer takes over the messages of
// consumers that died, and messages that cannot be persisted go to the
// dead letters with their stock given back, never silently dropped.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
)

// Store is what the workers need of the database.
type Store interface {
	SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error)
	FailOrder(ctx context.Context, o *seckill.Order) error
	OrderStatuses(ctx context.Context, ids []int64) (map[int64]seckill.OrderStatus, error)
	UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error)
	UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error)
	Writable(ctx context.Context) error
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
	// BacklogHigh is the backlog of a stream (a voucher's, or a shard's)
	// at which admission to it pauses (Refusing reports true) until it
	// falls to BacklogLow: so that Redis never fills up while the database
	// is slow or down. Zero: never.
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
	// writes. Default DefaultBatchSize.
	BatchSize int
	// Block is how long a read waits for messages. Default 2s.
	Block time.Duration
	// Lease is how long a message may sit unacknowledged with its consumer
	// before another takes it over. A worker busy with a message renews its
	// claim every Lease/3. A message taken from a consumer that is alive
	// (active within Lease/2) does not count a delivery. Default 30s.
	Lease time.Duration
	// MaxDeliveries is how many times a message may be delivered before it
	// goes to the dead letters: a message whose consumers keep dying on it,
	// or failing on it (an error of unknown kind, a panic). Default 5.
	MaxDeliveries int64
	// ReclaimEvery is how often the reclaimer looks for abandoned messages,
	// dead consumers and stream entries to trim. Default 5s.
	ReclaimEvery time.Duration
	// WatchEvery is how often the list of vouchers to read is refreshed
	// from the database. Default 5s.
	WatchEvery time.Duration
	// Retention is how long after its sale ends a voucher's
	// stream is still read; after it, once drained, the voucher's keys are
	// deleted. Default seckill.DefaultRetention.
	Retention time.Duration
	// BackoffMin and BackoffMax bound the wait between retries after a
	// transient failure; the wait doubles, with jitter. Defaults 50ms, 5s.
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout bounds how long Stop waits for batches in flight.
	// Default 15s.
	DrainTimeout time.Duration
	// Clock tells the time; tests set it. Default (nil) time.Now.
	Clock seckill.Clock
}

// DefaultBatchSize is how many orders a batch holds at most unless
// Config.BatchSize or QueueConfig.BatchSize says otherwise. Measured
// draining a backlog of 50,000 orders of one voucher, batches of 1,000
// cost a third to 45% less CPU per order than batches of 100, in the
// workers and in MariaDB or PostgreSQL alike, and 20% to 30% less than
// batches of 500; beyond 1,000 little changes. A read takes what is there,
// up to the size, so a small backlog still makes small batches that wait
// for nothing.
const DefaultBatchSize = 1000

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
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5
	}
	def(&c.Block, 2*time.Second)
	def(&c.Lease, 30*time.Second)
	def(&c.ReclaimEvery, 5*time.Second)
	def(&c.WatchEvery, 5*time.Second)
	def(&c.Retention, seckill.DefaultRetention)
	def(&c.BackoffMin, 50*time.Millisecond)
	def(&c.BackoffMax, 5*time.Second)
	def(&c.DrainTimeout, 15*time.Second)
	return c
}

// Pool is the workers of one instance: a reader per voucher stream (one
// per shard of a voucher with shards), a bounded number of batches
// persisted at once, and a reclaimer.
//
// A batch takes its slot before it is read or claimed: a message is never
// held waiting for a free worker, where no one renews its claim and other
// consumers would take it over again and again.
type Pool struct {
	cfg     Config
	stream  Stream
	store   Store
	rebuild func(ctx context.Context, voucherID int64) error
	logger  *slog.Logger
	metrics *metrics
	guard   recoverer

	slots   *slots
	breaker *breaker

	// refusing holds the streams whose admission is paused (high water),
	// and refusals how many; shards the shard count of each voucher read,
	// for Refusing to find a buyer's home shard without a lock.
	refusing sync.Map // seckill.Shard → struct{}
	refusals atomic.Int64
	shards   sync.Map // voucher id → int
	// saves counts the batches saved per voucher (savedSoFar).
	saves sync.Map // voucher id → *atomic.Int64

	// readCtx ends when Stop begins: no more reads. workCtx ends when the
	// batches in flight have had DrainTimeout to finish.
	readCtx, workCtx      context.Context
	stopReading, stopWork context.CancelFunc
	// loops are the refresh, reclaim and backlog loops. persisters persist
	// the batches the readers and the reclaimer take (batches), WorkersMax
	// of them, of which the slots let work as many at once as they allow;
	// they end once Stop closes batches.
	loops      [3]startstop.Service
	persisters []startstop.Service
	batches    chan []seckill.OrderMessage
	mu         sync.Mutex
	watching   map[int64]*watch
	// readers are the streams' readers that run, under mu: Stop waits for
	// them. A reader whose watch ends (unwatch) ends by itself.
	readers map[*startstop.Service]struct{}
	// refreshed: the first refresh, which looks further back, is done.
	// undrained: vouchers past their retention already warned about.
	refreshed                   atomic.Bool
	undrained                   sync.Map // voucher id → true
	initOnce, started, stopOnce sync.Once
}

// New returns a pool. rebuild puts a voucher back in Redis from the
// database (redisledger.Ledger.Rebuild); the pool calls it when a
// stream's group is gone.
func New(cfg Config, stream Stream, store Store, rebuild func(ctx context.Context, voucherID int64) error, reg prometheus.Registerer, logger *slog.Logger) (*Pool, error) {
	cfg = cfg.withDefaults()
	if cfg.Consumer == "" {
		return nil, errors.New("worker: Config.Consumer is required")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	panics, err := PanicCounter(reg)
	if err != nil {
		return nil, err
	}
	logger = logger.With("consumer", cfg.Consumer)
	return &Pool{
		cfg:      cfg,
		stream:   stream,
		store:    store,
		rebuild:  rebuild,
		logger:   logger,
		metrics:  m,
		guard:    recoverer{panics: panics, logger: logger},
		slots:    newSlots(cfg.Workers),
		breaker:  newBreaker(cfg.BreakerThreshold, cfg.BreakerMin, cfg.BreakerMax, cfg.Clock),
		watching: map[int64]*watch{},
		readers:  map[*startstop.Service]struct{}{},
	}, nil
}

// Start begins reading the streams of the vouchers on sale, and of those
// whose sale ended within Config.Retention. It returns at once.
func (p *Pool) Start(ctx context.Context) error {
	p.started.Do(func() {
		p.init(ctx)
		// Not fatal if it fails: the next refresh tries again.
		p.guard.do("refresh", p.refreshLogged)
		for i, l := range []struct {
			where string
			every time.Duration
			pass  func()
		}{
			{"refresh", p.cfg.WatchEvery, p.refreshLogged},
			{"reclaim", p.cfg.ReclaimEvery, p.reclaimAll},
			{"backlog", p.cfg.BacklogEvery, p.watchBacklog},
		} {
			// A pass that panics is counted as where's, and the next one
			// runs on time.
			p.loops[i].Start(ctx, func(ctx context.Context) {
				startstop.Every(ctx, p.logger, l.every, startstop.PassLog{Doing: "running the workers' " + l.where}, func(context.Context) error {
					p.guard.do(l.where, l.pass)
					return nil
				})
			})
		}
	})
	return nil
}

// init makes the pool's contexts and starts its persisters: what Start
// does before it starts reading. Once.
func (p *Pool) init(ctx context.Context) {
	p.initOnce.Do(func() {
		base := context.WithoutCancel(ctx)
		p.readCtx, p.stopReading = context.WithCancel(base)
		p.workCtx, p.stopWork = context.WithCancel(base)
		p.batches = make(chan []seckill.OrderMessage)
		p.persisters = make([]startstop.Service, p.cfg.WorkersMax)
		for i := range p.persisters {
			// Ended by Stop closing batches, not by its context: a batch
			// in flight ends on workCtx.
			p.persisters[i].Start(ctx, func(context.Context) {
				for msgs := range p.batches {
					p.guard.do("persist", func() {
						defer p.slots.release()
						p.persist(msgs)
					})
				}
			})
		}
	})
}

// Stop stops reading, lets the batches in flight finish and be
// acknowledged (for up to DrainTimeout), and returns. Messages read and not
// finished stay pending, for a live consumer to reclaim. Safe to call twice.
func (p *Pool) Stop() {
	p.stopOnce.Do(func() {
		if p.stopReading == nil {
			return
		}
		// Under mu: Watch starts no reader after this.
		p.mu.Lock()
		p.stopReading()
		readers := slices.Collect(maps.Keys(p.readers))
		p.mu.Unlock()
		for i := range p.loops {
			p.loops[i].Stop()
		}
		for _, r := range readers {
			r.Stop()
		}
		// No batch is taken any more: the persisters end once those in
		// flight are done.
		close(p.batches)
		drain := time.NewTimer(p.cfg.DrainTimeout)
		defer drain.Stop()
		for i := range p.persisters {
			select {
			case <-p.persisters[i].Stopped():
			case <-drain.C:
				p.logger.Warn("batches still in flight at the end of the drain time; they stay pending for another consumer")
				p.stopWork()
			}
			p.persisters[i].Stop()
		}
		p.stopWork()
	})
}

// watch is a voucher being read: a reader on each of its shards' streams.
type watch struct {
	shards int
	ctx    context.Context    // the readers'
	stop   context.CancelFunc // ends ctx
}

// Watch starts reading the streams of the voucher's shards now
// (v.ShardCount() of them), those not read already. Only v's ID and Shards
// are read.
func (p *Pool) Watch(v *seckill.Voucher) {
	if p.readCtx == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.readCtx.Err() != nil {
		return // stopping
	}
	w := p.watching[v.ID]
	if w == nil {
		ctx, cancel := context.WithCancel(p.readCtx)
		w = &watch{ctx: ctx, stop: cancel}
		p.watching[v.ID] = w
	}
	// A voucher's shards never change, but a watch begun with fewer (from
	// a row that did not tell them) gets the readers it lacks.
	for i := w.shards; i < v.ShardCount(); i++ {
		p.startReader(w.ctx, seckill.Shard{VoucherID: v.ID, Index: i})
	}
	w.shards = max(w.shards, v.ShardCount())
	p.shards.Store(v.ID, w.shards)
}

// startReader starts the reader of the shard's stream, which ends at Stop
// or when watch does (unwatch, which does not wait for it: a reader may
// unwatch its own voucher). Called with mu held.
func (p *Pool) startReader(watch context.Context, s seckill.Shard) {
	r := new(startstop.Service)
	p.readers[r] = struct{}{}
	r.Start(watch, func(ctx context.Context) {
		defer func() {
			p.mu.Lock()
			delete(p.readers, r)
			p.mu.Unlock()
		}()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(watch, cancel)()
		p.read(ctx, s)
	})
}

// watched returns the streams being read: every shard of every voucher.
func (p *Pool) watched() []seckill.Shard {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []seckill.Shard
	for id, w := range p.watching {
		for i := range w.shards {
			all = append(all, seckill.Shard{VoucherID: id, Index: i})
		}
	}
	return all
}

// watchedVouchers returns the vouchers being read, as much of each as
// Watch needs.
func (p *Pool) watchedVouchers() []*seckill.Voucher {
	p.mu.Lock()
	defer p.mu.Unlock()
	vs := make([]*seckill.Voucher, 0, len(p.watching))
	for id, w := range p.watching {
		vs = append(vs, &seckill.Voucher{ID: id, Shards: w.shards})
	}
	return vs
}

func (p *Pool) refreshLogged() {
	if err := p.refresh(); err != nil && p.readCtx.Err() == nil {
		p.logger.Error("could not list the vouchers to read", "err", err)
	}
}

// retireLookback is how far before the retention the first refresh looks
// for vouchers to retire: those that passed it while no instance ran.
const retireLookback = 7 * 24 * time.Hour

// refresh starts a reader for every voucher whose orders may still come,
// and retires the vouchers whose sale ended longer than the retention ago (see
// retire). The first one also retires vouchers that passed the retention while no
// instance ran, a week back.
func (p *Pool) refresh() error {
	since := p.cfg.Clock.Now().Add(-p.cfg.Retention)
	from := since
	if !p.refreshed.Load() {
		from = since.Add(-retireLookback)
	}
	vs, err := p.store.UnendedVouchers(p.readCtx, from)
	if err != nil {
		return fmt.Errorf("worker: list vouchers: %w", err)
	}
	p.refreshed.Store(true)
	listed := make(map[int64]bool, len(vs))
	var past []*seckill.Voucher
	for _, v := range vs {
		listed[v.ID] = true
		if v.EndTime.After(since) {
			p.Watch(v)
		} else {
			past = append(past, v)
		}
	}
	for _, v := range p.watchedVouchers() {
		if !listed[v.ID] {
			past = append(past, v)
		}
	}
	for _, v := range past {
		p.retire(v)
	}
	return nil
}

// retire deletes the keys of a voucher whose sale ended longer than the retention
// ago, once its stream is drained, and stops reading it; until then its
// reader goes on, so that its last orders are written. Its dead letters'
// orders are failed in the database already (deadLetter records that
// first); that is made sure of first, so that nothing an operator saw is
// gone without a trace. Only v's ID and Shards are read.
func (p *Pool) retire(v *seckill.Voucher) {
	voucherID := v.ID
	ctx := p.readCtx
	log := p.logger.With("voucher", voucherID)
	recs, err := p.stream.DeadLetters(ctx, voucherID)
	if err != nil {
		log.Warn("could not read the dead letters of a voucher past its retention", "err", err)
		return
	}
	for _, r := range recs {
		if r.OrderID <= 0 || r.UserID <= 0 {
			continue
		}
		o := &seckill.Order{ID: r.OrderID, UserID: r.UserID, VoucherID: voucherID, Status: seckill.OrderFailed, Reason: r.Reason}
		if err := p.retryDB(ctx, "record a dead letter's order failed", func() error { return p.store.FailOrder(ctx, o) }); err != nil {
			log.Warn("could not record a dead letter's order failed; the voucher's keys stay", "order", r.OrderID, "err", err)
			return
		}
	}
	dropped, err := p.stream.DropVoucher(ctx, voucherID)
	switch {
	case err != nil:
		log.Warn("could not delete the keys of a voucher past its retention", "err", err)
	case dropped:
		p.unwatch(voucherID)
		log.Info("voucher past its retention, its orders all written: its keys are deleted from Redis; a late buy is answered ended", "retention", p.cfg.Retention.String())
	default:
		p.Watch(v)
		if _, warned := p.undrained.LoadOrStore(voucherID, true); !warned {
			log.Warn("voucher past its retention still has orders in its stream: its keys stay until they are written", "retention", p.cfg.Retention.String())
		}
	}
}

// unwatch stops reading the voucher's streams.
func (p *Pool) unwatch(voucherID int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.watching[voucherID]; w != nil {
		w.stop()
		delete(p.watching, voucherID)
	}
	p.shards.Delete(voucherID)
	p.undrained.Delete(voucherID)
}

// read is the reader of one stream, shard s's: first the messages this
// consumer was given before and never acknowledged, then new ones, each
// batch read into a free slot and persisted there.
func (p *Pool) read(ctx context.Context, s seckill.Shard) {
	log := shardLogger(p.logger, s)
	retry := p.backoff()
	after := "0" // the last pending message read; "" once they are all read
	for ctx.Err() == nil {
		var err error
		if !p.guard.do("read", func() { after, err = p.readBatch(ctx, s, after) }) {
			retry.wait(ctx) // a panic that recurs must not spin
			continue
		}
		switch {
		case err == nil:
			retry.reset()
		case !p.readFailed(ctx, s.VoucherID, err, log):
			retry.wait(ctx)
		}
	}
}

// shardLogger is logger with the stream's voucher, and its shard if not 0
// (an unsharded voucher's stream logs as it always did).
func shardLogger(logger *slog.Logger, s seckill.Shard) *slog.Logger {
	if s.Index == 0 {
		return logger.With("voucher", s.VoucherID)
	}
	return logger.With("voucher", s.VoucherID, "shard", s.Index)
}

// readBatch reads a batch into a free slot and starts persisting it: this
// consumer's pending messages after the entry id after, or new messages if
// after is "". It returns where to read next. New messages are read
// without waiting; only when there are none does it wait for more, without
// a slot (WaitOrders): a reader of an idle stream must not keep a slot from
// the reader of a busy one, and a busy stream costs one read a batch.
func (p *Pool) readBatch(ctx context.Context, s seckill.Shard, after string) (string, error) {
	if after == "" {
		n, err := p.withSlot(ctx, func() ([]seckill.OrderMessage, error) {
			return p.stream.ReadOrders(ctx, s, p.cfg.Consumer, p.cfg.BatchSize, 0)
		})
		if err != nil || n > 0 {
			return after, err
		}
		// Bounded: a blocking XREAD sends nothing while it waits, so on a
		// connection cut meanwhile (a partition) its answer never comes and,
		// with no deadline, the reader waited forever on the dead connection
		// and this consumer never read the stream again after the network
		// healed (TestPartitionedInstance). With a deadline the Redis client
		// drops the connection, and the next read dials a new one.
		wctx, cancel := context.WithTimeout(ctx, p.cfg.Block+waitGrace)
		defer cancel()
		_, err = p.stream.WaitOrders(wctx, s, p.cfg.Block)
		return after, err
	}
	next := after
	_, err := p.withSlot(ctx, func() ([]seckill.OrderMessage, error) {
		msgs, err := p.stream.ReadPending(ctx, s, p.cfg.Consumer, after, p.cfg.BatchSize)
		if err == nil {
			next = ""
			if len(msgs) > 0 {
				next = msgs[len(msgs)-1].EntryID
			}
		}
		return msgs, err
	})
	return next, err
}

// waitGrace is how long past its block time WaitOrders may wait for
// Redis's answer before the connection is taken for dead.
const waitGrace = 2 * time.Second

// readFailed handles a failed read and reports whether to read again at
// once: after a rebuild of a lost stream.
func (p *Pool) readFailed(ctx context.Context, voucherID int64, err error, log *slog.Logger) bool {
	if ctx.Err() != nil {
		return true
	}
	if errors.Is(err, seckill.ErrStreamLost) {
		// Redis lost its data: put the voucher back from the database
		// (that also makes the group, at the stream's start) before reading.
		// Each lost shard's reader asks; the rebuilds of a voucher are one
		// (redisledger.Ledger.Rebuild), and it rebuilds every lost shard.
		log.Error("order stream lost in Redis; rebuilding the voucher from the database", "err", err)
		p.metrics.streamsLost.Inc()
		if err := p.rebuild(ctx, voucherID); err != nil {
			if errors.Is(err, seckill.ErrEnded) {
				// Past its retention: its keys were deleted once drained.
				log.Info("stopped reading the stream of a voucher past its retention")
				p.unwatch(voucherID)
				return true
			}
			log.Error("could not rebuild the voucher", "err", err)
			return false
		}
		return true
	}
	log.Warn("could not read orders", "err", err)
	return false
}

// withSlot waits for a free slot, then takes a batch with take (a read or
// a claim) and hands it to a persister, which frees the slot when done; if
// take returns no messages, or panics, the slot is freed. It returns how many messages take returned,
// and ctx's error if it ended before a slot was free.
func (p *Pool) withSlot(ctx context.Context, take func() ([]seckill.OrderMessage, error)) (int, error) {
	if !p.slots.acquire(ctx) {
		return 0, ctx.Err()
	}
	started := false
	defer func() {
		if !started {
			p.slots.release()
		}
	}()
	msgs, err := take()
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	started = true
	// At once: a batch holds a slot, and there are as many persisters
	// as slots can be.
	p.batches <- msgs
	return len(msgs), nil
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
