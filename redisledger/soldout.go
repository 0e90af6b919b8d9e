package redisledger

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill"
)

// soldOutEntry is what the sold-out memory (Ledger.soldOut) knows of a
// voucher: until when it is known sold out, and the fence word
// (fenceSeen) it was learnt under. The memory changes about once a
// second per voucher on sale, and is read by every buy.
type soldOutEntry struct {
	until int64  // Unix ns
	fence uint64 // the fence word when it was found sold out
}

// setSoldOut makes the voucher known sold out as e; an e.until of 0
// forgets it, if it is still was. Expired entries are dropped.
func (l *Ledger) setSoldOut(voucherID int64, e, was soldOutEntry, now int64) {
	l.soldOut.Update(func(next map[int64]soldOutEntry) bool {
		if e.until == 0 && next[voucherID] != was {
			return false // renewed meanwhile
		}
		for id, o := range next {
			if o.until <= now {
				delete(next, id)
			}
		}
		if e.until != 0 {
			next[voucherID] = e
		} else {
			delete(next, voucherID)
		}
		return true
	})
}

// knownSoldOut reports whether the voucher was found sold out less than
// SoldOutFor ago, while this process has seen the server checked
// (fenceSeen) without a doubt since: fence is the word now. An entry
// that has expired, or was learnt under another word, is dropped: a server
// that came back with older data may have stock, and lack the slot of a
// buyer who holds an order.
func (l *Ledger) knownSoldOut(voucherID int64, fence uint64) bool {
	e, _ := l.soldOut.Load(voucherID)
	if e.until == 0 {
		return false
	}
	now := l.now().UnixNano()
	if now < e.until && e.fence == fence && checkedIn(fence) {
		return true
	}
	l.setSoldOut(voucherID, soldOutEntry{}, e, now)
	return false
}

// noteSoldOut remembers that the voucher is sold out, for SoldOutFor, as
// learnt under the fence word fence (read before the admission). A
// sharded voucher is so only when a borrow found every shard at 0 with
// nothing in flight (borrow), not when the buyer's home shard alone was;
// its buyers are then answered from their home shards' slots
// (SoldOutReader).
func (l *Ledger) noteSoldOut(voucherID int64, fence uint64) {
	wait := l.SoldOutFor
	if wait == 0 {
		wait = time.Second
	}
	if wait > 0 && checkedIn(fence) && l.SoldOut != nil {
		now := l.now().UnixNano()
		l.setSoldOut(voucherID, soldOutEntry{until: now + int64(wait), fence: fence}, soldOutEntry{}, now)
	}
}

// soldOutAnswer answers a buyer of a voucher known sold out: their own
// order if they have one (G5), read from their slot or a copy of it; else
// sold out. It returns nil when Redis cannot vouch for the slot, and the
// caller admits: its server is not checked (ErrCacheUnverified: it may
// have come back with older data; the memory is then doubted, and the
// admission checks the server), or the voucher is not loaded
// (ErrVoucherNotLoaded: its data lost, or being rebuilt; the memory of it
// is dropped, and the admission rebuilds it).
func (l *Ledger) soldOutAnswer(ctx context.Context, userID, voucherID int64) error {
	existing, err := l.SoldOut.SoldOutBuyerOrder(ctx, userID, voucherID)
	switch {
	case errors.Is(err, seckill.ErrCacheUnverified):
		l.Fence.seen.doubt()
		return nil
	case errors.Is(err, seckill.ErrVoucherNotLoaded):
		e, _ := l.soldOut.Load(voucherID)
		l.setSoldOut(voucherID, soldOutEntry{}, e, l.now().UnixNano())
		return nil
	case err != nil:
		return &seckill.Error{Kind: seckill.ErrUnavailable, Message: "cannot read your order right now; try again", RetryAfter: time.Second}
	case existing != 0:
		return duplicate(existing)
	}
	return soldOutErr(voucherID)
}

// AnswerSoldOut answers a buyer of v as Admit would from the sold-out
// memory (seckill.SoldOutAnswers); nil when it does not know, or the read
// cannot vouch (the buy asks for a solution then).
//
// The memory lasts SoldOutFor (1 s) and only an admission renews it; of a
// challenge voucher's buys after the sell-out, those that carry no
// solution never reach an admission. So, for them (probe), a memory that
// lapsed is renewed here from the stock: one read per voucher per
// soldOutProbeEvery, whatever the number of buyers. Only for an unsharded
// voucher: a sharded one is sold out when a borrow says so, not when its
// shards' stocks add up to 0 for an instant.
func (l *Ledger) AnswerSoldOut(ctx context.Context, v *seckill.Voucher, userID int64, probe bool) error {
	if l.SoldOut == nil {
		return nil
	}
	fence := l.Fence.seen.load()
	if !l.knownSoldOut(v.ID, fence) && (!probe || v.ShardCount() > 1 || !l.probeSoldOut(ctx, v.ID, fence)) {
		return nil
	}
	err := l.soldOutAnswer(ctx, userID, v.ID)
	if errors.Is(err, seckill.ErrSoldOut) || (errors.Is(err, seckill.ErrDuplicateOrder) && !l.Confirmed) {
		return err
	}
	return nil
}

// soldOutProbeEvery is how often, at most, a voucher's stock is read to
// renew the memory that it is sold out (AnswerSoldOut).
const soldOutProbeEvery = 100 * time.Millisecond

// probeSoldOut reads the voucher's stock, unless it was read less than
// soldOutProbeEvery ago (or is being read), and notes the voucher sold
// out, under the fence word read before, when it is at 0. It reports
// whether the voucher is now known sold out.
func (l *Ledger) probeSoldOut(ctx context.Context, voucherID int64, fence uint64) bool {
	now := l.now().UnixNano()
	last, _ := l.probed.LoadOrStore(voucherID, new(atomic.Int64))
	at := last.(*atomic.Int64)
	prev := at.Load()
	if now-prev < int64(soldOutProbeEvery) || !at.CompareAndSwap(prev, now) {
		return false
	}
	left, err := l.Cache.Remaining(ctx, voucherID)
	if n, loaded := left[voucherID]; err != nil || !loaded || n > 0 {
		return false
	}
	l.noteSoldOut(voucherID, fence)
	return l.knownSoldOut(voucherID, fence)
}
