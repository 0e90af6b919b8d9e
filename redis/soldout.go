package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Hold is how long units given back to a sold-out voucher (a dead letter, a
// released reservation) or a rebuilt stock wait before they are admitted:
// an admission meanwhile is answered unavailable, to try again. It is what
// keeps the instances' copies of a sold-out voucher's buyers true (see
// soldOutCopies): longer than copyTrust.
const Hold = 250 * time.Millisecond

var holdMillis = strconv.FormatInt(Hold.Milliseconds(), 10)

const (
	// copyPoll is how often a copy's voucher is read again.
	copyPoll = 20 * time.Millisecond
	// copyTrust is how long after it was sent a read that found the voucher
	// unchanged lets its copy answer. It must stay below Hold.
	copyTrust = 100 * time.Millisecond
	// copyWaits bounds the polls an answer waits for when its copy's trust
	// has lapsed (see awaitPoll): the second to end after it came was sent
	// after it came.
	copyWaits = 3
	// copyIdle is how long a copy nobody asks for is kept (and polled).
	copyIdle = 2 * time.Second
	// copyRetry is how long after a copy could not be made (the voucher was
	// not sold out, or Redis did not answer) no other is tried.
	copyRetry = 250 * time.Millisecond
	// maxCopyBuyers bounds the buyers an instance holds in copies, all
	// vouchers together (about 40 bytes each): a voucher whose buyers do
	// not fit is not copied (its buyers' slots are read one by one).
	maxCopyBuyers = 1 << 20
)

// soldOutCopies holds, per voucher the service found sold out, a copy of its
// buyers' slots, so that the flood of buyers who ask after the sell-out is
// answered without a round trip to Redis (SoldOutBuyerOrder).
//
// A copy is made only while the voucher's stock is 0 or less, and is used
// only while a read of its version sent less than copyTrust ago found it as
// when the copy was made, and only if it holds as many buyers as the version
// counts (an HSCAN continued on another server skips some). The version
// (the stock; meta's gen, epoch and ver; the number of buyers) changes
// with every change of a slot other than an admission: ver is bumped by the
// scripts that free, hand over or record a slot (release, dead_letter,
// count_persisted), set anew by a rebuild, and a new generation changes gen.
// An admission needs stock, which on a sold-out voucher only a unit given
// back or a rebuild makes, and those hold it for Hold > copyTrust. So a buyer
// admitted after a copy was made was admitted at least Hold after the version
// changed; any answer given after that admission is given after a read that
// saw the change, and the copy is no longer used. A copy never tells a buyer
// who holds an order "sold out".
//
// Under thousands of connections at once a poll's round trip (its reply
// waits in Go's run queue behind every request's goroutine) can take longer
// than copyTrust, and the trust lapses between polls. An answer then waits
// for a poll sent after it came to find the voucher unchanged (awaitPoll):
// the copy is then the voucher's buyers as of a read made after the
// question, which needs no clock and no hold.
type soldOutCopies struct {
	mu     sync.Mutex                            // held to change m
	m      atomic.Pointer[map[int64]*buyersCopy] // read by every sold-out answer
	epoch  time.Time                             // mono measures from it
	ctx    context.Context                       // ends the pollers at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool // under mu: no poller starts
	// off: no copies (Config.NoSoldOutCopy); SoldOutBuyerOrder is
	// BuyerOrder.
	off bool
	// buyers counts the buyers held in copies, bounded by maxCopyBuyers.
	buyers atomic.Int64
}

// buyersCopy is one voucher's copy of its buyers' slots.
type buyersCopy struct {
	// buyers is set, once, before trusted is first set.
	buyers map[int64]int64
	// trusted: until when (mono) the copy may answer; 0 while it is made.
	trusted atomic.Int64
	// used: when (mono) it was last asked for, at copyPoll's grain.
	used atomic.Int64
	// retry: a failed copy, kept in the map so that no other is tried
	// before this (mono); 0 for a live one.
	retry int64
	// polled is closed, and replaced, when a poll ends (for good once
	// ended is set): what awaitPoll waits on.
	polled atomic.Pointer[chan struct{}]
	// ended: the poller stopped; the copy answers no more waits.
	ended atomic.Bool
	// wake asks the poller to poll now, not at its next tick.
	wake chan struct{}
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

func newSoldOutCopies() *soldOutCopies {
	ctx, cancel := context.WithCancel(context.Background())
	return &soldOutCopies{epoch: time.Now(), ctx: ctx, cancel: cancel}
}

// mono is the monotonic time since the copies were set up.
func (s *soldOutCopies) mono() int64 { return int64(time.Since(s.epoch)) }

// close stops the pollers and waits for them.
func (s *soldOutCopies) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// get returns the voucher's copy, or nil.
func (s *soldOutCopies) get(voucherID int64) *buyersCopy {
	if m := s.m.Load(); m != nil {
		return (*m)[voucherID]
	}
	return nil
}

// put sets (or, with nil, removes) the voucher's copy, if it still is was.
func (s *soldOutCopies) put(voucherID int64, cp, was *buyersCopy) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(voucherID, cp, was)
}

func (s *soldOutCopies) putLocked(voucherID int64, cp, was *buyersCopy) bool {
	var old map[int64]*buyersCopy
	if p := s.m.Load(); p != nil {
		old = *p
	}
	if old[voucherID] != was {
		return false
	}
	next := make(map[int64]*buyersCopy, len(old)+1)
	for id, c := range old {
		next[id] = c
	}
	if cp != nil {
		next[voucherID] = cp
	} else {
		delete(next, voucherID)
	}
	s.m.Store(&next)
	return true
}

// SoldOutBuyerOrder is BuyerOrder for a voucher the caller found sold out:
// from this instance's copy of the voucher's buyers while the copy is known
// to be true, else read from Redis (and a copy is started). See
// soldOutCopies for why a copy may answer.
func (c *Client) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	s := c.soldOut
	if s.off {
		return c.BuyerOrder(ctx, userID, voucherID)
	}
	cp := s.get(voucherID)
	now := s.mono()
	switch {
	case cp == nil:
		c.startCopy(voucherID, nil)
	case cp.retry != 0:
		if now >= cp.retry {
			c.startCopy(voucherID, cp)
		}
	default:
		// Asked for, trusted or not: a copy being made is not idle.
		if now-cp.used.Load() > int64(copyPoll) {
			cp.used.Store(now)
		}
		trusted := cp.trusted.Load()
		if now < trusted {
			return cp.buyers[userID], nil
		}
		if trusted != 0 {
			if order, ok := cp.awaitPoll(ctx, userID, now); ok {
				return order, nil
			}
		}
	}
	return c.BuyerOrder(ctx, userID, voucherID)
}

// awaitPoll waits for a poll sent at or after came (mono) to find the
// voucher unchanged, and answers from the copy: as of that read, made after
// the question came. It reports false if the copy ended, ctx did, or
// copyWaits polls ended without one (Redis did not answer).
func (cp *buyersCopy) awaitPoll(ctx context.Context, userID, came int64) (int64, bool) {
	for waits := 0; ; waits++ {
		polled := *cp.polled.Load() // before the checks: no wake-up is missed
		if cp.trusted.Load()-int64(copyTrust) >= came {
			return cp.buyers[userID], true
		}
		if cp.ended.Load() || waits == copyWaits {
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

// startCopy starts copying the voucher's buyers, unless another caller
// replaced was first.
func (c *Client) startCopy(voucherID int64, was *buyersCopy) {
	s := c.soldOut
	cp := newBuyersCopy()
	cp.used.Store(s.mono())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.putLocked(voucherID, cp, was) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.keepCopy(s.ctx, voucherID, cp)
	}()
}

// keepCopy makes the copy cp of the voucher's buyers, then keeps it trusted
// while polls find the voucher unchanged, until it is not asked for in
// copyIdle, the voucher changes, or ctx ends.
func (c *Client) keepCopy(ctx context.Context, voucherID int64, cp *buyersCopy) {
	s := c.soldOut
	k := c.keys.voucher(voucherID)
	fail := func() {
		s.put(voucherID, &buyersCopy{retry: s.mono() + int64(copyRetry)}, cp)
	}
	began := time.Now()
	first, _, err := c.copyVersion(ctx, &k)
	if err != nil || !first.soldOut() {
		fail()
		return
	}
	if s.buyers.Add(first.buyers) > maxCopyBuyers {
		s.buyers.Add(-first.buyers)
		fail()
		return
	}
	defer s.buyers.Add(-first.buyers)
	buyers, err := c.scanBuyers(ctx, k.Buyers, first.buyers)
	// A scan that went on on another server (a failover, a slot migrated)
	// may skip buyers: its cursor means nothing there. The version is the
	// same, so the buyers are those HLEN counted.
	if err != nil || int64(len(buyers)) != first.buyers {
		fail()
		return
	}
	cp.buyers = buyers
	defer func() {
		cp.ended.Store(true)
		cp.pollEnded()
	}()
	t := time.NewTicker(copyPoll)
	defer t.Stop()
	for {
		v, sent, err := c.copyVersion(ctx, &k)
		same := err == nil && v.same(first)
		if same {
			if cp.trusted.Load() == 0 {
				cp.used.Store(s.mono()) // idle from now, not from before the scan
				c.logger.Debug("answering a sold-out voucher's buyers from a copy", "voucher", voucherID, "buyers", len(buyers), "took", time.Since(began))
			}
			cp.trusted.Store(sent + int64(copyTrust)) // before the wake-up
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// Unheard: the trust lapses by itself; poll again.
		case !same:
			// Changed: drop it; the next sold-out answer starts another.
			s.put(voucherID, nil, cp)
			return
		}
		cp.pollEnded() // (on a return, the deferred one, with ended set)
		if s.mono()-cp.used.Load() > int64(copyIdle) {
			s.put(voucherID, nil, cp)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cp.wake: // an answer waits
		}
	}
}

// copyState is what a copy depends on: the voucher's stock, generation,
// epoch and version as strings ("" if absent), and its number of buyers
// (which the version keeps, but a scan that missed some is found by it).
type copyState struct {
	stock, gen, epoch, ver string
	hasStock               bool
	buyers                 int64
}

// soldOut reports a loaded voucher with no stock left.
func (v copyState) soldOut() bool {
	n, err := strconv.ParseInt(v.stock, 10, 64)
	return v.hasStock && err == nil && n <= 0
}

// same reports whether nothing a copy depends on changed.
func (v copyState) same(w copyState) bool {
	return v.hasStock == w.hasStock && v.stock == w.stock && v.gen == w.gen && v.epoch == w.epoch && v.ver == w.ver &&
		v.buyers == w.buyers
}

// copyVersion reads the voucher's copyState, and returns the time (mono)
// the read was sent.
func (c *Client) copyVersion(ctx context.Context, k *voucherKeys) (copyState, int64, error) {
	cmds := rueidis.Commands{
		c.rdb.B().Get().Key(k.Stock).Build(),
		c.rdb.B().Hmget().Key(k.Meta).Field("gen", "epoch", "ver").Build(),
		c.rdb.B().Hlen().Key(k.Buyers).Build(),
	}
	sent := c.soldOut.mono()
	res := c.rdb.DoMulti(ctx, cmds...)
	var v copyState
	stock, err := res[0].ToString()
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return v, sent, err
	default:
		v.stock, v.hasStock = stock, true
	}
	meta, err := res[1].ToArray()
	if err != nil {
		return v, sent, err
	}
	for i, dst := range []*string{&v.gen, &v.epoch, &v.ver} {
		if i < len(meta) {
			if s, err := meta[i].ToString(); err == nil {
				*dst = s
			}
		}
	}
	if v.buyers, err = res[2].AsInt64(); err != nil {
		return v, sent, err
	}
	return v, sent, nil
}

// scanBuyers reads a buyers hash whole, with HSCAN so that Redis is not
// held for long by a large one.
func (c *Client) scanBuyers(ctx context.Context, key string, size int64) (map[int64]int64, error) {
	buyers := make(map[int64]int64, size)
	var cursor uint64
	for {
		e, err := c.rdb.Do(ctx, c.rdb.B().Hscan().Key(key).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			user, err1 := strconv.ParseInt(e.Elements[i], 10, 64)
			order, err2 := strconv.ParseInt(e.Elements[i+1], 10, 64)
			if err1 != nil || err2 != nil {
				// Not what admission writes: leave this voucher to BuyerOrder,
				// whose read of such a slot is an error, not "no order".
				return nil, fmt.Errorf("redis: slot %q of %s: not a user and order id", e.Elements[i], key)
			}
			buyers[user] = order
		}
		if cursor = e.Cursor; cursor == 0 {
			return buyers, nil
		}
	}
}
