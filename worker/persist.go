package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
)

// persist writes a batch of one stream's messages (a voucher's, or one of
// its shards'): each ends persisted
// and acknowledged, or dead-lettered, or (stopping, an error of unknown
// kind, a panic) left pending for a later delivery.
func (p *Pool) persist(msgs []seckill.OrderMessage) {
	stop := p.keepClaimed(msgs)
	panicked := p.persistGuarded(msgs)
	stop()
	if len(panicked) > 0 {
		// They stay pending, and this delivery counts (giveUp): a message
		// that panics every time reaches the dead letters.
		p.giveUp(p.workCtx, panicked)
	}
}

// persistGuarded is persistBatch with a panic recovered. A batch that panics
// is persisted again one message at a time, each under its own guard, so
// that a message that panics every time holds back only itself: without
// that, every delivery of the batch counted for all its messages, and a
// batch of up to --batch-size orders went to the dead letters with its one
// bad message. It returns the messages that panicked alone.
func (p *Pool) persistGuarded(msgs []seckill.OrderMessage) []seckill.OrderMessage {
	if p.guard.do("persist", func() { p.persistBatch(msgs) }) {
		return nil
	}
	if len(msgs) == 1 {
		return msgs
	}
	// Those the batch persisted or dead-lettered before the panic are no
	// longer held.
	held, err := p.held(p.workCtx, msgs)
	if err != nil {
		return msgs
	}
	var panicked []seckill.OrderMessage
	for _, m := range held {
		panicked = append(panicked, p.persistGuarded([]seckill.OrderMessage{m})...)
	}
	return panicked
}

// persistBatch dead-letters the messages that cannot be orders (malformed,
// or delivered more than MaxDeliveries times) and saves the rest.
func (p *Pool) persistBatch(msgs []seckill.OrderMessage) {
	ctx := p.workCtx
	start := time.Now()
	var good []seckill.OrderMessage
	for _, m := range msgs {
		switch {
		case m.Err != nil:
			p.deadLetter(ctx, m, seckill.DeadLetter{Reason: m.Err.Error()})
		case m.Deliveries > p.cfg.MaxDeliveries:
			p.deadLetter(ctx, m, seckill.DeadLetter{Reason: fmt.Sprintf("delivered %d times without being persisted", m.Deliveries)})
		default:
			good = append(good, m)
		}
	}
	if len(good) > 0 {
		p.save(ctx, good)
	}
	p.metrics.batchSeconds.Observe(time.Since(start).Seconds())
	p.metrics.batchSize.Observe(float64(len(msgs)))
}

// save writes batch in one transaction, retrying in place the failures
// that are the database's state (blame). A batch the database refuses
// otherwise is saved again one order at a time, each once, so that an
// order that fails alone is told from a database that fails them all
// (docs/design/persistence.md, What counts as a delivery): an order the database
// refuses as bad is dead-lettered; one that fails for no known reason
// while other orders of its voucher save counts a delivery (failed), as
// does a message read alone that fails so while the database commits
// writes. If none saves, the failure is taken for the database's state
// though it does not say so: what is left is saved again whole, in place,
// behind the circuit breaker, counting nothing, until it saves or other
// orders of the voucher save again (then it is saved one at a time again).
func (p *Pool) save(ctx context.Context, batch []seckill.OrderMessage) {
	voucher := batch[0].VoucherID
	mark := p.savedSoFar(voucher)
	msgs, err := p.saveOnce(ctx, batch, nil)
	for first := true; err != nil; first = false {
		type failure struct {
			m   seckill.OrderMessage
			err error
		}
		var left []failure
		switch {
		case len(msgs) == 1 && first:
			p.failed(ctx, msgs[0], err)
			return
		case len(msgs) == 1:
			left = []failure{{msgs[0], err}}
		default:
			p.logger.Warn("batch failed; saving its orders one at a time", "voucher", voucher, "orders", len(msgs), "err", err)
			for _, m := range msgs {
				if _, err := p.saveOnce(ctx, []seckill.OrderMessage{m}, nil); err != nil {
					left = append(left, failure{m, err})
				}
			}
		}
		var unknown []seckill.OrderMessage
		for _, f := range left {
			if refused(f.err) || p.savedSoFar(voucher) != mark {
				// The database refuses the row, or takes other orders of
				// the voucher meanwhile: this order fails alone.
				p.failed(ctx, f.m, f.err)
			} else {
				unknown = append(unknown, f.m)
			}
		}
		if len(unknown) == 0 {
			return
		}
		p.logger.Warn("orders fail for no known reason and none of their voucher's saves: taken for the database's state; retrying them",
			"voucher", voucher, "orders", len(unknown), "err", left[0].err)
		mark = p.savedSoFar(voucher)
		msgs, err = p.saveOnce(ctx, unknown, &mark)
	}
}

// saveOnce writes batch in one transaction, retrying in place the failures
// that are the database's state, and applies the outcomes of what it wrote. It returns nil
// when batch is done with: acknowledged or dead-lettered, held by another consumer, or left
// pending (stopping, Redis unreadable); else the messages the database
// refused, and why. With hold, a failure of no known kind is the
// database's state too, retried in place, as long as no batch of the
// voucher saves (savedSoFar is still *hold).
func (p *Pool) saveOnce(ctx context.Context, batch []seckill.OrderMessage, hold *int64) ([]seckill.OrderMessage, error) {
	var (
		msgs     = batch
		outcomes []seckill.SaveOutcome
	)
	err := p.retryDB(ctx, "save orders", func() (err error) {
		// Save only what this consumer still holds, each try: messages it
		// no longer holds went to another consumer, which saves them; or
		// Redis lost them, and a voucher rebuilt since must not find its
		// units taken by orders it was never told of.
		if msgs, err = p.held(ctx, batch); err != nil || len(msgs) == 0 {
			return err
		}
		orders := make([]*seckill.Order, len(msgs))
		for i := range msgs {
			o := msgs[i].Order
			orders[i] = &o
		}
		err = blame(ctx, p.store, func() (err error) {
			outcomes, err = p.store.SaveOrders(ctx, orders)
			return err
		})
		if hold != nil && unknown(ctx, err) && p.savedSoFar(batch[0].VoucherID) == *hold {
			return fmt.Errorf("%w: %w (and no order of the voucher saves)", seckill.ErrTransient, err)
		}
		return err
	})
	switch {
	case err == nil && len(msgs) == 0:
	case err == nil:
		p.applyOutcomes(ctx, msgs, outcomes)
	case errors.Is(err, seckill.ErrStreamLost):
		p.logger.Warn("order messages lost with their stream in Redis before they were saved", "voucher", batch[0].VoucherID, "orders", len(batch))
	case ctx.Err() != nil:
		// Stopping: the messages stay pending for another consumer.
	case len(msgs) == 0:
		p.logger.Error("could not tell which order messages this consumer holds; they stay pending", "voucher", batch[0].VoucherID, "err", err)
	default:
		return msgs, err
	}
	return nil, nil
}

// savedSoFar counts the batches of the voucher this pool has saved, new
// orders committed (a redelivery's AlreadySaved commits nothing): a change
// tells that the database takes the voucher's orders.
func (p *Pool) savedSoFar(voucherID int64) int64 {
	if n, ok := p.saves.Load(voucherID); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// countSaved adds a saved batch to the voucher's count.
func (p *Pool) countSaved(voucherID int64) {
	n, _ := p.saves.LoadOrStore(voucherID, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// refused reports whether err is the database refusing an order itself:
// no stock for it, no such voucher, an invalid row.
func refused(err error) bool {
	return errors.Is(err, seckill.ErrSoldOut) || errors.Is(err, seckill.ErrVoucherNotFound) ||
		errors.Is(err, seckill.ErrInvalidArgument)
}

// blame runs write, and tells a failure that is the database's state from
// one that may be its orders': it returns the error marked ErrTransient if
// it is the database's, and then the write is retried in place, behind the
// circuit breaker, and counts no delivery (docs/design/persistence.md, Dead letters).
//
// The stores mark the failures they know as the database's state
// (transient: a lost connection, a server that refuses writes, a timeout,
// a disk full) or as the orders' (refused). An error of no known kind is
// the database's if it refuses a write that changes nothing
// (Store.Writable): after a failover a standby refuses writes with errors
// a store may not know, and blaming the orders for them sent good orders
// to the dead letters. If it takes that write, the write is tried once more
// (the connection that failed may be gone since, closed as read-only), and
// a second failure of no known kind is returned as it is, for the caller
// to tell whether the orders fail alone.
func blame(ctx context.Context, store interface{ Writable(context.Context) error }, write func() error) error {
	err := write()
	for try := 0; try < 2 && unknown(ctx, err); try++ {
		if werr := store.Writable(ctx); werr != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: %w (and the database refuses writes: %w)", seckill.ErrTransient, err, werr)
		}
		if try == 0 {
			err = write()
		}
	}
	return err
}

// unknown reports whether err is a failure of no kind a store knows: not
// the database's state, not a refusal of the orders.
func unknown(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !refused(err) &&
		!errors.Is(err, seckill.ErrTransient) && !errors.Is(err, seckill.ErrUnavailable)
}

// held returns the messages of msgs that this consumer still holds.
func (p *Pool) held(ctx context.Context, msgs []seckill.OrderMessage) ([]seckill.OrderMessage, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EntryID
	}
	held, err := p.stream.Held(ctx, msgs[0].Stream(), p.cfg.Consumer, ids...)
	if err != nil {
		return nil, err
	}
	if len(held) == len(msgs) {
		return msgs, nil
	}
	kept := make([]seckill.OrderMessage, 0, len(held))
	for _, m := range msgs {
		if held[m.EntryID] {
			kept = append(kept, m)
		}
	}
	return kept, nil
}

// failed handles a message whose save failed for good.
func (p *Pool) failed(ctx context.Context, m seckill.OrderMessage, err error) {
	switch {
	case errors.Is(err, seckill.ErrSoldOut):
		// The database has no stock for it: Redis sold more than the
		// database holds. Giving the stock back in Redis would sell it again.
		p.logger.Error("the database has no stock for an order Redis admitted; run seckill reconcile", "voucher", m.VoucherID, "order", m.Order.ID, "err", err)
		p.deadLetter(ctx, m, seckill.DeadLetter{Reason: "sold out in the database", KeepStock: true})
	case errors.Is(err, seckill.ErrVoucherNotFound):
		p.deadLetter(ctx, m, seckill.DeadLetter{Reason: "voucher not found in the database", KeepStock: true})
	case errors.Is(err, seckill.ErrInvalidArgument):
		p.deadLetter(ctx, m, seckill.DeadLetter{Reason: "the database refused the order as invalid"})
	default:
		// Of unknown kind: leave it pending. It is delivered again after the
		// lease, and goes to the dead letters after MaxDeliveries.
		p.logger.Error("could not save an order; it stays pending", "voucher", m.VoucherID, "order", m.Order.ID, "entry", m.EntryID, "err", err)
		p.giveUp(ctx, []seckill.OrderMessage{m})
	}
}

// giveUp abandons the messages of msgs this consumer still holds
// (Stream.GiveUp): they are delivered again after the lease, and this
// delivery counts.
func (p *Pool) giveUp(ctx context.Context, msgs []seckill.OrderMessage) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EntryID
	}
	err := p.retry(ctx, "count a failed delivery", func() error {
		return p.stream.GiveUp(ctx, msgs[0].Stream(), p.cfg.Consumer, ids...)
	})
	if err != nil && ctx.Err() == nil {
		p.logger.Warn("could not count a failed delivery of order messages; they stay pending", "voucher", msgs[0].VoucherID, "err", err)
	}
}

// applyOutcomes acts on what SaveOrders did with each message's order: it
// acknowledges those in the database and dead-letters those the database
// refused as conflicts.
func (p *Pool) applyOutcomes(ctx context.Context, msgs []seckill.OrderMessage, outcomes []seckill.SaveOutcome) {
	ack := make([]string, 0, len(msgs))
	var (
		saved []*seckill.Order
		saves bool
	)
	for i, m := range msgs {
		switch outcomes[i] {
		case seckill.Saved:
			p.metrics.persisted.Inc()
			saves = true
			ack = append(ack, m.EntryID)
			saved = append(saved, &m.Order)
		case seckill.AlreadySaved:
			p.metrics.redelivered.Inc()
			ack = append(ack, m.EntryID)
			saved = append(saved, &m.Order)
		case seckill.BuyerConflict:
			// Redis admitted a buyer twice: it lost the buyer's first order
			// (a restart without AOF, a failover), and with it the unit that
			// order took, in one script's writes. This admission's unit now
			// counts the database's order: keep it taken, and keep the
			// database's order as the buyer's in Redis.
			existing := p.buyerOrder(ctx, m.Order)
			p.metrics.doubleAdmissions.Inc()
			p.logger.Error("ALERT: Redis admitted a buyer twice; the second order goes to the dead letters",
				"voucher", m.VoucherID, "user", m.Order.UserID, "order", m.Order.ID, "kept_order", existing)
			p.deadLetter(ctx, m, seckill.DeadLetter{Reason: fmt.Sprintf("buyer already has order %d", existing), BuyerOrder: existing, KeepStock: existing != 0})
		case seckill.IDConflict:
			p.logger.Error("ALERT: an order id is used by another order", "voucher", m.VoucherID, "order", m.Order.ID)
			p.deadLetter(ctx, m, seckill.DeadLetter{Reason: "order id already used by another order"})
		}
	}
	if saves {
		p.countSaved(msgs[0].VoucherID)
	}
	p.ack(ctx, msgs[0].Stream(), ack, saved)
}

// buyerOrder returns the id of the buyer's order of the voucher in the
// database that holds a unit (created or paid), or 0.
func (p *Pool) buyerOrder(ctx context.Context, o seckill.Order) int64 {
	var id int64
	p.retryDB(ctx, "read the buyer's orders", func() (err error) {
		id, err = findBuyerOrder(ctx, p.store, &o)
		return err
	})
	return id
}

// findBuyerOrder returns the id of o's buyer's order of o's voucher in
// the database that holds a unit (created, or paid since), or 0 if there
// is none. A cancelled one holds none: its unit went back with the
// cancellation.
func findBuyerOrder(ctx context.Context, store Store, o *seckill.Order) (int64, error) {
	orders, err := store.UserOrders(ctx, o.UserID, 1000)
	if err != nil {
		return 0, err
	}
	for _, s := range orders {
		if s.VoucherID == o.VoucherID && s.Status.HoldsUnit() {
			return s.ID, nil
		}
	}
	return 0, nil
}

// ack acknowledges persisted messages. If it fails they stay pending, are
// delivered again, and find their orders saved: then they are acknowledged.
//
// If fewer were pending than acknowledged, another delivery acknowledged some,
// or Redis lost the stream since they were read, and maybe rebuilt the
// voucher from a database that did not hold these orders yet: then Redis is
// told to count the orders saved, so that it does not sell their units
// again (count_persisted.lua; a no-op for orders it knows).
func (p *Pool) ack(ctx context.Context, s seckill.Shard, ids []string, saved []*seckill.Order) {
	if len(ids) == 0 {
		return
	}
	voucherID := s.VoucherID
	var acked int64
	err := p.retry(ctx, "acknowledge orders", func() (err error) {
		acked, err = p.stream.AckOrders(ctx, s, ids...)
		return err
	})
	if err != nil && !errors.Is(err, seckill.ErrStreamLost) {
		if ctx.Err() == nil {
			p.logger.Error("could not acknowledge persisted orders; they will be delivered again", "voucher", voucherID, "err", err)
		}
		return
	}
	if acked == int64(len(ids)) || len(saved) == 0 {
		return
	}
	if err := p.retry(ctx, "count persisted orders in Redis", func() error { return p.stream.CountPersisted(ctx, voucherID, saved) }); err != nil && ctx.Err() == nil {
		p.logger.Error("could not make Redis count persisted orders; run seckill reconcile", "voucher", voucherID, "err", err)
	}
}

// deadLetter records m's order as failed in the database, then moves m to
// the dead letters, giving back its stock and buyer slot as dl says. If the
// database cannot record the failure the message stays pending: nothing
// fails silently.
func (p *Pool) deadLetter(ctx context.Context, m seckill.OrderMessage, dl seckill.DeadLetter) {
	log := p.logger.With("voucher", m.VoucherID, "entry", m.EntryID, "order", m.Order.ID, "reason", dl.Reason)
	if m.Order.ID > 0 && m.Order.UserID > 0 {
		o := m.Order
		o.Status, o.Reason = seckill.OrderFailed, dl.Reason
		if err := p.retryDB(ctx, "record a failed order", func() error { return p.store.FailOrder(ctx, &o) }); err != nil {
			log.Error("could not record the failed order; the message stays pending", "err", err)
			return
		}
		// A concurrent delivery may have saved it after all: then it is
		// done, and its stock stays taken.
		var st map[int64]seckill.OrderStatus
		if err := p.retryDB(ctx, "read the order's status", func() (err error) {
			st, err = p.store.OrderStatuses(ctx, []int64{o.ID})
			return err
		}); err != nil {
			log.Error("could not read the order's status; the message stays pending", "err", err)
			return
		}
		// Written, and perhaps paid or cancelled since (its unit given
		// back, or being given back, by the cancellation): done either
		// way, never dead-lettered, which would give its unit back again.
		if s, ok := st[o.ID]; ok && s != seckill.OrderFailed {
			var holding []*seckill.Order
			if s.HoldsUnit() {
				written := m.Order
				holding = append(holding, &written)
			}
			p.ack(ctx, m.Stream(), []string{m.EntryID}, holding)
			return
		}
	}
	var moved bool
	if err := p.retry(ctx, "dead-letter an order", func() (err error) {
		moved, err = p.stream.DeadLetter(ctx, m, dl)
		return err
	}); err != nil {
		log.Error("could not dead-letter the message; it stays pending", "err", err)
		return
	}
	if moved {
		p.metrics.deadLetters.Inc()
		log.Warn("order message dead-lettered; its order is failed")
	}
}

// keepClaimed renews the claim on msgs every Lease/3 until the returned
// func is called, so that no reclaimer takes a batch that is slow, not dead:
// one that waits on the database or its circuit breaker. The read or claim
// that gave this consumer msgs, just before, made their claim fresh.
func (p *Pool) keepClaimed(msgs []seckill.OrderMessage) func() {
	keeper := new(startstop.Service)
	keeper.Start(p.workCtx, func(ctx context.Context) {
		startstop.Every(ctx, p.logger, p.cfg.Lease/3, startstop.PassLog{Doing: "running the workers' keep_claimed"}, func(context.Context) error {
			p.guard.do("keep_claimed", func() { p.renew(msgs) })
			return nil
		})
	})
	return keeper.Stop
}

// renew renews the claim on the messages of msgs this consumer still holds:
// XCLAIM would take back one another consumer has claimed meanwhile.
func (p *Pool) renew(msgs []seckill.OrderMessage) {
	held, err := p.held(p.workCtx, msgs)
	if err == nil && len(held) > 0 {
		ids := make([]string, len(held))
		for i, m := range held {
			ids[i] = m.EntryID
		}
		err = p.stream.RefreshClaims(p.workCtx, msgs[0].Stream(), p.cfg.Consumer, ids...)
	}
	if err != nil && p.workCtx.Err() == nil {
		p.logger.Warn("could not renew the claim on a slow batch", "voucher", msgs[0].VoucherID, "err", err)
	}
}

// retryDB is retry for calls that reach the database: each try waits for
// the circuit breaker, and its outcome moves it.
func (p *Pool) retryDB(ctx context.Context, what string, fn func() error) error {
	return p.retry(ctx, what, func() error {
		probe, ok := p.breaker.wait(ctx)
		if !ok {
			return ctx.Err()
		}
		err := fn()
		switch {
		case err == nil:
			p.breaker.result(probe, false)
		case errors.Is(err, seckill.ErrTransient):
			p.breaker.result(probe, true)
		case errors.Is(err, seckill.ErrUnavailable):
			p.breaker.abort(probe) // Redis failed, not the database
		default:
			p.breaker.result(probe, false) // the database answered
		}
		return err
	})
}

// retry runs fn until it succeeds, fails for a reason other than a
// transient one, or ctx ends, waiting with backoff between tries.
func (p *Pool) retry(ctx context.Context, what string, fn func() error) error {
	b := p.backoff()
	for {
		err := fn()
		if err == nil || !(errors.Is(err, seckill.ErrTransient) || errors.Is(err, seckill.ErrUnavailable)) {
			return err
		}
		p.metrics.retries.Inc()
		p.logger.Warn("transient failure; retrying", "op", what, "err", err)
		if !b.wait(ctx) {
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, ctx.Err())
		}
	}
}
