package worker

import (
	"errors"
	"time"

	"github.com/seckill/seckill"
)

// reclaimAll runs the reclaimer over every stream being read (each shard of
// each voucher): it takes over messages idle longer than the lease (their
// consumer died or hangs), each batch claimed into a free slot; it removes
// consumers long dead with nothing pending, and trims what every consumer
// is done with.
//
// It also finishes the transfers of stock between the shards of a voucher
// that have been under way longer than staleTransfer: their process died
// between two steps, or lost Redis (Stream.FinishTransfers: each step
// is idempotent, so whoever finds a transfer stale finishes it, and no
// unit stays in flight, neither sold nor sellable, after its borrower
// died).
func (p *Pool) reclaimAll() {
	for _, v := range p.watched() {
		if p.readCtx.Err() != nil {
			return
		}
		p.reclaim(v)
	}
	for _, v := range p.watchedVouchers() {
		if v.ShardCount() > 1 && p.readCtx.Err() == nil {
			p.finishTransfers(v.ID)
		}
	}
}

// staleTransfer is how long a transfer may be under way before anyone
// finishes it: its steps follow each other within milliseconds.
const staleTransfer = time.Second

func (p *Pool) finishTransfers(voucherID int64) {
	n, err := p.stream.FinishTransfers(p.readCtx, voucherID, staleTransfer)
	switch {
	case err != nil && p.readCtx.Err() == nil:
		p.logger.Warn("could not finish the stale transfers of stock between a voucher's shards", "voucher", voucherID, "err", err)
	case n > 0:
		p.logger.Info("finished stale transfers of stock between a voucher's shards", "voucher", voucherID, "transfers", n)
	}
}

func (p *Pool) reclaim(s seckill.Shard) {
	ctx := p.readCtx
	log := shardLogger(p.logger, s)
	// A batch's worth at a time: ClaimStale bounds each of its scripts.
	count := p.cfg.BatchSize
	for ctx.Err() == nil {
		var deleted []string
		n, err := p.withSlot(ctx, func() ([]seckill.OrderMessage, error) {
			msgs, gone, err := p.stream.ClaimStale(ctx, s, p.cfg.Consumer, p.cfg.Lease, count)
			deleted = gone
			return msgs, err
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, seckill.ErrStreamLost) {
				log.Warn("could not reclaim stale orders", "err", err)
			}
			// A lost stream is the reader's to rebuild.
			return
		}
		if len(deleted) > 0 {
			// Entries gone from the stream while pending: only a loss of
			// Redis data does that. Their orders are admitted and not in the
			// database; reconcile finds them.
			p.metrics.deletedEntries.Add(float64(len(deleted)))
			log.Error("ALERT: pending order messages were deleted from the stream; run seckill reconcile", "entries", deleted)
		}
		if n == 0 {
			break
		}
		p.metrics.reclaimed.Add(float64(n))
		log.Info("reclaimed order messages from a consumer that stopped or fell behind", "messages", n)
		// A claim that found fewer than it asked for looked at the whole
		// pending list: nothing more is stale. (Claims of 100 compared
		// with the batch size stopped every pass after one claim: a dead
		// instance's 16,000 messages took 160 passes,
		// TestReclaimKilledInstanceBacklog.)
		if n < count {
			break
		}
	}
	if reaped, err := p.stream.ReapConsumers(ctx, s, p.cfg.Consumer, 2*p.cfg.Lease); err != nil {
		if ctx.Err() == nil && !errors.Is(err, seckill.ErrStreamLost) {
			log.Warn("could not remove dead consumers", "err", err)
		}
	} else if len(reaped) > 0 {
		log.Info("removed dead consumers with nothing pending", "consumers", reaped)
	}
	if _, err := p.stream.TrimOrders(ctx, s); err != nil && ctx.Err() == nil && !errors.Is(err, seckill.ErrStreamLost) {
		log.Warn("could not trim the order stream", "err", err)
	}
}
