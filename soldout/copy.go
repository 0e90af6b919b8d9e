package soldout

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/startstop"
)

// buyersCopy is one voucher's (or shard's) copy of its buyers' slots.
type buyersCopy struct {
	// sharded: a shard's of a voucher with more than one, trusted only
	// while drained (Version.soldOutIn).
	sharded bool
	// view is the copy, set before confirmed is first set and replaced
	// whole by each change.
	view atomic.Pointer[copyView]
	// trusted: until when (mono) the copy may answer alone: Trust after a
	// read that found it true and the voucher sold out (a shard at 0 and
	// drained) was sent.
	trusted atomic.Int64
	// confirmed: when (mono) the last read that found the copy true was
	// sent, sold out or not; 0 before the first.
	confirmed atomic.Int64
	// used: when (mono) it was last asked for, at copyPoll's grain.
	used atomic.Int64
	// retry: a failed copy, kept in the map so that no other is tried
	// before this (mono); 0 for a live one.
	retry int64
	// polled is closed, and replaced, when a poll ends (for good once
	// ended is set): what awaitPoll waits on.
	polled atomic.Pointer[chan struct{}]
	// stale: the copy missed a change and waits to be made again; no answer
	// waits for it.
	stale atomic.Bool
	// ended: the poller stopped; the copy answers no more waits.
	ended atomic.Bool
	// wake asks the poller to poll now, not at its next tick.
	wake chan struct{}
	// poller runs keepCopy; a failed copy kept for its retry has none.
	poller startstop.Service
}

// newBuyersCopy returns a copy being made.
func newBuyersCopy() *buyersCopy {
	cp := &buyersCopy{wake: make(chan struct{}, 1)}
	ch := make(chan struct{})
	cp.polled.Store(&ch)
	return cp
}

// pollEnded wakes the answers waiting for a poll.
func (cp *buyersCopy) pollEnded() {
	ch := make(chan struct{})
	close(*cp.polled.Swap(&ch))
}

// awaitPoll waits for a poll sent at or after came (mono) to find the copy
// true, and answers from the copy: as of that read, made after the
// question came. It reports false if the copy ended or went stale, ctx
// ended, or copyWaits polls ended without one (Redis did not answer).
func (cp *buyersCopy) awaitPoll(ctx context.Context, userID, came int64) (int64, bool) {
	for waits := 0; ; waits++ {
		polled := *cp.polled.Load() // before the checks: no wake-up is missed
		if cp.confirmed.Load() >= came {
			return cp.view.Load().order(userID), true
		}
		if cp.ended.Load() || cp.stale.Load() || waits == copyWaits {
			return 0, false
		}
		select {
		case cp.wake <- struct{}{}:
		default:
		}
		select {
		case <-polled:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// confirm records that a read sent at sent (mono) found the copy true, of
// the version v.
func (cp *buyersCopy) confirm(sent int64, v Version) {
	cp.confirmed.Store(sent)
	if v.soldOutIn(cp.sharded) {
		cp.trusted.Store(sent + int64(Trust))
	}
}

// copyView is a copy's buyers as of one read: those scanned when it was
// made (base, never changed after: any number of answers read it) and the
// slots changed since (delta, 0 for none), with their number.
type copyView struct {
	base, delta map[int64]int64
	size        int64
}

// order returns the order the user's slot holds in the view, or 0.
func (v *copyView) order(userID int64) int64 {
	if o, ok := v.delta[userID]; ok {
		return o
	}
	return v.base[userID]
}

// with returns the view with the slots changed as given (0: none). Past
// maxCopyDelta changes it merges them into a new base.
func (v *copyView) with(changes map[int64]int64) *copyView {
	if len(changes) == 0 {
		return v
	}
	next := &copyView{base: v.base, size: v.size, delta: make(map[int64]int64, len(v.delta)+len(changes))}
	maps.Copy(next.delta, v.delta)
	for u, o := range changes {
		switch was := v.order(u); {
		case was == 0 && o != 0:
			next.size++
		case was != 0 && o == 0:
			next.size--
		}
		next.delta[u] = o
	}
	if len(next.delta) <= maxCopyDelta {
		return next
	}
	base := maps.Clone(v.base)
	for u, o := range next.delta {
		if o == 0 {
			delete(base, u)
		} else {
			base[u] = o
		}
	}
	return &copyView{base: base, size: next.size}
}

// next returns the view made true by ch, a read of what changed since the
// view was true against at; false if it cannot be: the read does not list
// every change, the voucher was unloaded or changed generation or epoch
// (a rebuild), or the view so changed does not hold as many buyers as
// Redis does (it missed an admission whose entry was trimmed, or a scan
// skipped some).
func (v *copyView) next(at Version, ch Changes) (*copyView, bool) {
	now := ch.Version
	if !ch.Complete || !now.HasStock || now.Gen != at.Gen || now.Epoch != at.Epoch {
		return nil, false
	}
	nv := v.with(ch.Slots)
	return nv, nv.size == now.Buyers
}

// errNoCopy: the voucher's buyers cannot be copied now (not sold out, too
// many, or they changed in a way the copy cannot follow).
var errNoCopy = errors.New("soldout: no copy of the buyers")

// keepCopy makes the copy cp of the shard's buyers, then keeps it true
// with the changes polls find, until it is not asked for in copyIdle, the
// server is not armed, a whole copy fails, or ctx ends.
func (s *Copies) keepCopy(ctx context.Context, sh seckill.Shard, cp *buyersCopy) {
	defer func() {
		cp.ended.Store(true)
		cp.pollEnded()
	}()
	var held int64 // buyers counted in s.buyers for this copy
	defer func() { s.buyers.Add(-held) }()
	idle := func() bool { return s.mono()-cp.used.Load() > int64(copyIdle) }
	var (
		at   Version // what the copy is true against
		last int64   // when the last poll was sent (mono)
	)
	t := time.NewTicker(copyPoll)
	defer t.Stop()
	for {
		if cp.view.Load() == nil || cp.stale.Load() {
			if !s.awaitCopy(ctx, s.copyFrom(sh), idle) {
				s.put(sh, nil, cp)
				return
			}
			began := s.mono()
			view, v, sent, err := s.copyAll(ctx, sh, cp.sharded, &held)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Debug("could not copy a sold-out voucher's buyers", "voucher", sh.VoucherID, "shard", sh.Index, "err", err)
					s.put(sh, &buyersCopy{sharded: cp.sharded, retry: s.mono() + int64(copyRetry)}, cp)
				}
				return
			}
			again := cp.confirmed.Load() != 0
			s.logger.Debug("answering a sold-out voucher's buyers from a copy", "voucher", sh.VoucherID, "shard", sh.Index, "buyers", view.size,
				"took", time.Duration(s.mono()-began), "again", again)
			if !again {
				cp.used.Store(s.mono()) // idle from now, not from before the scan
			}
			at = v
			cp.view.Store(view)
			cp.stale.Store(false)
			cp.confirm(sent, v)
		} else {
			ch, sent, err := s.readChanges(ctx, sh, &at)
			last = sent
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, seckill.ErrCacheUnverified):
				s.put(sh, nil, cp)
				return
			case err != nil:
				// Unheard: the trust lapses by itself; poll again.
			default:
				if view, ok := cp.view.Load().next(at, ch); ok {
					at = ch.Version
					cp.view.Store(view)
					cp.confirm(sent, at)
				} else {
					// Answers read their slots until it is made again.
					cp.stale.Store(true)
				}
			}
		}
		cp.pollEnded() // (on a return, the deferred one, with ended set)
		if idle() {
			s.put(sh, nil, cp)
			return
		}
		if cp.stale.Load() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cp.wake: // an answer waits
			if !sleepCtx(ctx, time.Duration(last+int64(copyWoken)-s.mono())) {
				return
			}
		}
	}
}

// readChanges reads what changed since the version since (nil: the
// version alone), and returns when (mono) the read was sent: taken before
// the call, so no later than the read itself, which is all that the trust
// it gives needs.
func (s *Copies) readChanges(ctx context.Context, sh seckill.Shard, since *Version) (Changes, int64, error) {
	sent := s.mono()
	ch, err := s.r.ReadChanges(ctx, sh, since)
	return ch, sent, err
}

// sleepCtx waits d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// awaitCopy waits until next (mono), and reports false if ctx ends or the
// copy goes idle first.
func (s *Copies) awaitCopy(ctx context.Context, next int64, idle func() bool) bool {
	for {
		wait := next - s.mono()
		if idle() || ctx.Err() != nil {
			return false
		}
		if wait <= 0 {
			return true
		}
		sleepCtx(ctx, min(time.Duration(wait), copyIdle/4))
	}
}

// copyAll copies the shard's buyers whole: it reads the shard's version,
// scans the buyers (so that Redis is not held for long by a large hash),
// and applies what changed since that read as a poll does, which also
// finds the buyers a scan continued on another server skipped. The copy is
// true as of that last read, sent at sent. held is the number of buyers
// counted in the copies' budget for this copy.
func (s *Copies) copyAll(ctx context.Context, sh seckill.Shard, sharded bool, held *int64) (*copyView, Version, int64, error) {
	var scanned int64
	defer func() { s.spent(sh, scanned) }()
	first, _, err := s.readChanges(ctx, sh, nil)
	if err != nil {
		return nil, Version{}, 0, err
	}
	if !first.Version.soldOutIn(sharded) {
		return nil, Version{}, 0, errNoCopy
	}
	if s.buyers.Add(first.Version.Buyers-*held) > maxCopyBuyers {
		s.buyers.Add(*held - first.Version.Buyers)
		return nil, Version{}, 0, errNoCopy
	}
	*held = first.Version.Buyers
	scanned = first.Version.Buyers
	buyers, err := s.r.ScanBuyers(ctx, sh, first.Version.Buyers)
	if err != nil {
		return nil, Version{}, 0, err
	}
	ch, sent, err := s.readChanges(ctx, sh, &first.Version)
	if err != nil {
		return nil, Version{}, 0, err
	}
	view, ok := (&copyView{base: buyers, size: int64(len(buyers))}).next(first.Version, ch)
	if !ok {
		return nil, Version{}, 0, errNoCopy
	}
	s.copies.Add(1)
	return view, ch.Version, sent, nil
}
