package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
)

// QueueConfig configures a Queue. Zero fields take the defaults in their
// comments.
type QueueConfig struct {
	// Capacity is how many orders the queue holds; a full queue refuses
	// more. Default 10,000.
	Capacity int
	// Workers is how many batches are written at once. Default 4.
	Workers int
	// BatchSize is how many queued orders one transaction writes at most.
	// Default DefaultBatchSize.
	BatchSize int
	// BackoffMin and BackoffMax bound the wait between retries after a
	// transient failure. Defaults 50ms, 5s.
	BackoffMin, BackoffMax time.Duration
	// DrainTimeout bounds how long Stop writes what is still queued.
	// Default 15s.
	DrainTimeout time.Duration
}

// Queue is the queue mode's in-process queue (docs/design/modes.md, Modes): admitted
// orders wait in memory for workers that write them to the database in
// batches. A crash loses what it holds; seckill reconcile then reports the
// drift. It is kept to show why the stream mode exists.
type Queue struct {
	cfg    QueueConfig
	store  Store
	slots  Slots
	logger *slog.Logger
	guard  recoverer

	persisted, full prometheus.Counter
	// saves counts the orders written: a change tells that the database
	// takes orders (save).
	saves atomic.Int64

	mu     sync.RWMutex // guards closed against Offer
	closed bool
	ch     chan *seckill.Order
	// ctx ends when what is queued has had DrainTimeout to be written.
	ctx    context.Context
	cancel context.CancelFunc
	// workers write the batches, until Stop closes ch.
	workers []startstop.Service
}

var _ seckill.OrderQueue = (*Queue)(nil)

// Slots settles in Redis the buyer slot and stock of a queued order that
// cannot be written (redis.Client implements it).
type Slots interface {
	// Release frees the buyer's slot and gives the stock back, if the slot
	// holds orderID.
	Release(ctx context.Context, voucherID, userID, orderID int64) (bool, error)
	// Reassign makes the slot hold keep instead of orderID and keeps the
	// stock, if the slot holds orderID.
	Reassign(ctx context.Context, voucherID, userID, orderID, keep int64) (bool, error)
}

// NewQueue returns a queue that writes to store. slots gives back in Redis
// what an order that cannot be written took (its stock and buyer slot).
func NewQueue(cfg QueueConfig, store Store, slots Slots, reg prometheus.Registerer, logger *slog.Logger) (*Queue, error) {
	if cfg.Capacity <= 0 {
		cfg.Capacity = 10_000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 50 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 15 * time.Second
	}
	q := &Queue{cfg: cfg, store: store, slots: slots, logger: logger, ch: make(chan *seckill.Order, cfg.Capacity),
		persisted: persistedCounter(),
		full: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_queue_full_total",
			Help: "Admissions refused because the queue mode's queue was full (their reservations given back).",
		}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "seckill_queue_orders",
		Help: "Orders waiting in the queue mode's in-memory queue.",
	}, func() float64 { return float64(len(q.ch)) })
	for _, c := range []prometheus.Collector{q.persisted, q.full, depth} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker: register metrics: %w", err)
		}
	}
	panics, err := PanicCounter(reg)
	if err != nil {
		return nil, err
	}
	q.guard = recoverer{panics: panics, logger: logger}
	return q, nil
}

// Start starts the queue's workers. It returns at once.
func (q *Queue) Start(ctx context.Context) error {
	q.ctx, q.cancel = context.WithCancel(context.WithoutCancel(ctx))
	q.workers = make([]startstop.Service, q.cfg.Workers)
	for i := range q.workers {
		// Ended by Stop closing ch, not by its context: a batch in flight
		// ends on q.ctx.
		q.workers[i].Start(ctx, func(context.Context) { q.work() })
	}
	return nil
}

// Offer queues o unless the queue is full or stopped.
func (q *Queue) Offer(o *seckill.Order) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	select {
	case q.ch <- o:
		return true
	default:
		q.full.Inc()
		return false
	}
}

// Stop refuses new orders and writes what is queued, for up to
// DrainTimeout; what is left then is lost, as a crash would lose it. Safe
// to call twice.
func (q *Queue) Stop() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	close(q.ch)
	q.mu.Unlock()
	if q.cancel == nil { // never started: what is queued is lost
		return
	}
	drain := time.NewTimer(q.cfg.DrainTimeout)
	defer drain.Stop()
	for i := range q.workers {
		select {
		case <-q.workers[i].Stopped():
		case <-drain.C:
			q.logger.Error("queued orders not written within the drain time are lost; run seckill reconcile", "left", len(q.ch))
			q.cancel()
		}
		q.workers[i].Stop()
	}
	q.cancel()
}

// work writes batches: the first order waited for, then as many more as are
// queued, up to BatchSize.
func (q *Queue) work() {
	for o := range q.ch {
		batch := []*seckill.Order{o}
	fill:
		for len(batch) < q.cfg.BatchSize {
			select {
			case o, ok := <-q.ch:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		q.saveGuarded(batch)
	}
}

// saveGuarded is save, with a panic recovered: the batch's orders are then
// saved one at a time, so that an order that panics loses itself alone, as
// a crash would lose it, and the worker goes on.
func (q *Queue) saveGuarded(batch []*seckill.Order) {
	if q.guard.do("queue", func() { q.save(batch) }) {
		return
	}
	if len(batch) > 1 {
		for _, o := range batch {
			q.saveGuarded([]*seckill.Order{o})
		}
		return
	}
	q.logger.Error("queued order lost to a panic; run seckill reconcile", "voucher", batch[0].VoucherID, "order", batch[0].ID)
}

// save writes a batch, retrying in place the failures that are the
// database's state (blame). A batch the database refuses otherwise is
// written again one order at a time, each once, as the stream mode's
// Pool.save does: an order the database refuses as bad, or that fails for
// no known reason while others save (or alone, the database committing
// writes), fails; if none saves, the failure is taken for the database's
// state: what is left is written again whole, in place, until it is
// written or other orders are again (then one at a time again).
func (q *Queue) save(batch []*seckill.Order) {
	mark := q.saves.Load()
	err := q.saveOnce(batch, nil)
	for first := true; err != nil; first = false {
		if len(batch) == 1 && first {
			q.fail(batch[0], err)
			return
		}
		var (
			unknown []*seckill.Order
			last    = err
		)
		switch {
		case len(batch) == 1 && refused(err):
			// Held in place, then refused (sold out meanwhile): the
			// refusal is its answer, as the split's (found by review: it
			// was written again at once, without a pause).
			q.fail(batch[0], err)
			return
		case len(batch) == 1:
			unknown = batch
		default:
			for _, o := range batch {
				switch err := q.saveOnce([]*seckill.Order{o}, nil); {
				case err == nil:
				case refused(err):
					q.fail(o, err)
				default:
					unknown, last = append(unknown, o), err
				}
			}
		}
		if q.saves.Load() != mark {
			for _, o := range unknown {
				q.fail(o, last)
			}
			return
		}
		if len(unknown) == 0 {
			return
		}
		q.logger.Warn("queued orders fail for no known reason and none is written: taken for the database's state; retrying them", "orders", len(unknown), "err", last)
		batch = unknown
		err = q.saveOnce(batch, &mark)
	}
}

// saveOnce writes a batch in one transaction, retrying in place the
// failures that are the database's state, and settles the outcomes. It
// returns nil when the batch is done with (written, settled, or lost at
// shutdown), else why the database refused it. With hold, a failure of no
// known kind is the database's state too, retried in place, as long as the
// queue writes no order (saves is still *hold).
func (q *Queue) saveOnce(batch []*seckill.Order, hold *int64) error {
	b := q.backoff()
	for {
		var outcomes []seckill.SaveOutcome
		err := blame(q.ctx, q.store, func() (err error) {
			outcomes, err = q.store.SaveOrders(q.ctx, batch)
			return err
		})
		if hold != nil && unknown(q.ctx, err) && q.saves.Load() == *hold {
			err = fmt.Errorf("%w: %w (and no order is written)", seckill.ErrTransient, err)
		}
		switch {
		case q.ctx.Err() != nil:
			q.logger.Error("queued orders lost at shutdown; run seckill reconcile", "orders", len(batch))
			return nil
		case err == nil:
			for i, o := range batch {
				switch outcomes[i] {
				case seckill.Saved:
					q.saves.Add(1)
					q.persisted.Inc()
				case seckill.BuyerConflict:
					q.failTwice(o)
				case seckill.IDConflict:
					q.fail(o, errors.New("conflicts with an order in the database: "+outcomes[i].String()))
				}
			}
			return nil
		case errors.Is(err, seckill.ErrTransient):
			q.logger.Warn("transient failure writing queued orders; retrying", "err", err)
			if !b.wait(q.ctx) {
				q.logger.Error("queued orders lost at shutdown; run seckill reconcile", "orders", len(batch))
				return nil
			}
		default:
			return err
		}
	}
}

func (q *Queue) backoff() *backoff {
	return &backoff{min: q.cfg.BackoffMin, max: q.cfg.BackoffMax, next: q.cfg.BackoffMin}
}

// fail records o as failed for cause, and gives its reservation back: its
// unit and its buyer's slot. An order the database has no stock for, or
// whose voucher it does not know, keeps both, as the stream mode keeps its
// unit: giving the unit back would sell it again to a buyer the database
// refuses too. Its buyer's slot keeps the failed order, which a buyer who
// asks again is told of. If the failure cannot be recorded the reservation
// is kept: released, the order would be answered and gone, in neither
// table, and its buyer free to buy again.
func (q *Queue) fail(o *seckill.Order, cause error) {
	reason := cause.Error()
	if !q.recordFailed(o, reason) {
		return
	}
	if errors.Is(cause, seckill.ErrSoldOut) || errors.Is(cause, seckill.ErrVoucherNotFound) {
		q.logger.Error("the database refused a queued order its voucher has no stock for; its unit stays taken; run seckill reconcile", "voucher", o.VoucherID, "order", o.ID, "reason", reason)
		return
	}
	if _, err := q.slots.Release(q.ctx, o.VoucherID, o.UserID, o.ID); err != nil {
		q.logger.Error("could not give back a failed order's reservation; run seckill reconcile", "order", o.ID, "err", err)
	}
	q.logger.Warn("queued order failed", "voucher", o.VoucherID, "order", o.ID, "reason", reason)
}

// failTwice handles an order of a buyer Redis admitted twice: it lost
// their first order, which the database holds, together with the unit that
// order took. The second admission's unit counts the first order, so the
// stock stays taken and the buyer's slot goes to the database's order.
func (q *Queue) failTwice(o *seckill.Order) {
	var existing int64
	b := q.backoff()
	for {
		var err error
		if existing, err = findBuyerOrder(q.ctx, q.store, o); err == nil {
			break
		}
		// Unread, the buyer's order would count as none, and the unit
		// it holds would be given back and sold again: keep the
		// reservation until the database answers.
		if !errors.Is(err, seckill.ErrTransient) || !b.wait(q.ctx) {
			q.logger.Error("could not read the order of a buyer Redis admitted twice; the reservation stays taken; run seckill reconcile", "voucher", o.VoucherID, "order", o.ID, "err", err)
			return
		}
	}
	if !q.recordFailed(o, fmt.Sprintf("buyer already has order %d", existing)) {
		return
	}
	if existing == 0 {
		// Not found after all: give the reservation back as for any failure.
		if _, err := q.slots.Release(q.ctx, o.VoucherID, o.UserID, o.ID); err != nil {
			q.logger.Error("could not give back a failed order's reservation; run seckill reconcile", "order", o.ID, "err", err)
		}
		return
	}
	if _, err := q.slots.Reassign(q.ctx, o.VoucherID, o.UserID, o.ID, existing); err != nil {
		q.logger.Error("could not hand a buyer's slot to their order in the database; run seckill reconcile", "order", o.ID, "kept_order", existing, "err", err)
	}
	q.logger.Error("ALERT: Redis admitted a buyer twice; the second order failed", "voucher", o.VoucherID, "user", o.UserID, "order", o.ID, "kept_order", existing)
}

// recordFailed records o as failed for reason, retrying the failures that
// are the database's state until it stops, and reports whether it did.
func (q *Queue) recordFailed(o *seckill.Order, reason string) bool {
	f := *o
	f.Status, f.Reason = seckill.OrderFailed, reason
	b := q.backoff()
	for {
		err := blame(q.ctx, q.store, func() error { return q.store.FailOrder(q.ctx, &f) })
		switch {
		case err == nil:
			return true
		case errors.Is(err, seckill.ErrTransient) && b.wait(q.ctx):
			q.logger.Warn("transient failure recording a failed order; retrying", "order", o.ID, "err", err)
			continue
		}
		q.logger.Error("could not record a failed order; its reservation stays taken; run seckill reconcile", "voucher", o.VoucherID, "order", o.ID, "reason", reason, "err", err)
		return false
	}
}
