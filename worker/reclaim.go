package worker

import (
	"errors"

	"github.com/seckill/seckill"
)

// reclaimAll runs the reclaimer over every voucher being read: it takes over
// messages idle longer than the lease (their consumer died or hangs), each
// batch claimed into a free slot; it removes consumers long dead with
// nothing pending, and trims what every consumer is done with.
func (p *Pool) reclaimAll() {
	for _, v := range p.watched() {
		if p.readCtx.Err() != nil {
			return
		}
		p.reclaim(v)
	}
}

// reclaimCount bounds the messages one reclaim claims. The claim is one
// script that looks at ten times as many pending entries, and admissions on
// that Redis wait while it runs: with 1,000 (the batch size) one call took
// 12.9 ms on a stream of 20,000 pending entries, with 100 2.5 ms.
const reclaimCount = 100

func (p *Pool) reclaim(voucherID int64) {
	ctx := p.readCtx
	log := p.logger.With("voucher", voucherID)
	for ctx.Err() == nil {
		var deleted []string
		n, err := p.withSlot(ctx, func() ([]seckill.OrderMessage, error) {
			msgs, gone, err := p.stream.ClaimStale(ctx, voucherID, p.cfg.Consumer, p.cfg.Lease, min(p.cfg.BatchSize, reclaimCount))
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
		if n < p.cfg.BatchSize {
			break
		}
	}
	if reaped, err := p.stream.ReapConsumers(ctx, voucherID, p.cfg.Consumer, 2*p.cfg.Lease); err != nil {
		if ctx.Err() == nil && !errors.Is(err, seckill.ErrStreamLost) {
			log.Warn("could not remove dead consumers", "err", err)
		}
	} else if len(reaped) > 0 {
		log.Info("removed dead consumers with nothing pending", "consumers", reaped)
	}
	if _, err := p.stream.TrimOrders(ctx, voucherID); err != nil && ctx.Err() == nil && !errors.Is(err, seckill.ErrStreamLost) {
		log.Warn("could not trim the order stream", "err", err)
	}
}
