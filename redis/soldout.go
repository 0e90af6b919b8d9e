package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
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
	// copyTrust is how long after it was sent a read that found a copy true
	// and its voucher sold out lets the copy answer. It must stay below
	// Hold.
	copyTrust = 100 * time.Millisecond
	// copyWaits bounds the polls an answer waits for when its copy's trust
	// has lapsed (see awaitPoll): the second to end after it came was sent
	// after it came.
	copyWaits = 3
	// copyWoken spaces the polls that answers waiting for one ask for: while
	// a unit given back is not sold again every answer waits for a poll,
	// and without it the poller would read back to back.
	copyWoken = 5 * time.Millisecond
	// copyIdle is how long a copy nobody asks for is kept (and polled).
	copyIdle = 2 * time.Second
	// copyRetry is how long after a copy could not be made (the voucher was
	// not sold out, or Redis did not answer) no other is tried.
	copyRetry = 250 * time.Millisecond
	// copyDuty spaces the whole copies of one voucher's buyers (pacing):
	// each costs copyDuty times the Redis CPU its scan takes (copyScanCost
	// a buyer; copyRetry at least), and one begins only while the cost of
	// those before is paid off but for one. Changes are applied one by
	// one; only those that cannot be (see copy_changes.lua) copy the
	// buyers whole again, and so an instance spends at most about
	// 1/copyDuty of a Redis core copying a voucher, whatever changes it,
	// yet copies at once after a quiet spell.
	copyDuty = 20
	// copyScanCost is what Redis spends to HSCAN one buyer, generously
	// (0.5 to 2.4 µs measured, the latter on a loaded machine).
	copyScanCost = 2 * time.Microsecond
	// maxCopyBuyers bounds the buyers an instance holds in copies, all
	// vouchers together (about 40 bytes each): a voucher whose buyers do
	// not fit is not copied (its buyers' slots are read one by one).
	maxCopyBuyers = 1 << 20
	// maxCopyChanges bounds the changes (bumps of ver), and the admissions,
	// that one read of a copy's changes takes; more, and the buyers are
	// copied whole again. The log of changes keeps as many.
	maxCopyChanges = 1024
	// maxCopyDelta bounds the slots changed since a copy was made that are
	// kept apart from it (copyView); then they are merged into it.
	maxCopyDelta = 4096
)

var (
	// changeLogLen and changeLogTTL are how many entries the log of a
	// voucher's changes keeps (as many as one read takes), and how long it
	// is kept after the last (scripts/release.lua): a copy reads the
	// changes within copyPoll, and one that finds the log gone copies the
	// buyers whole again.
	changeLogLen = strconv.Itoa(maxCopyChanges)
	changeLogTTL = strconv.FormatInt((10 * time.Minute).Milliseconds(), 10)
)

// soldOutCopies holds, per voucher the service found sold out, a copy of its
// buyers' slots, so that the flood of buyers who ask after the sell-out is
// answered without a round trip to Redis (SoldOutBuyerOrder).
//
// A copy is made only while the voucher's stock is 0 or less: its state
// (stock, gen, epoch, ver, the number of buyers and the last order entry)
// is read, the buyers are scanned (HSCAN), and what changed meanwhile is
// applied. Then, every copyPoll, what changed since is read
// (copy_changes.lua) and applied: the slots changed by the scripts that
// bump ver (release, dead_letter, count_persisted), which log the buyers
// they change, and by admissions, whose buyers the order stream names. A
// copy that, so changed, does not hold as many buyers as Redis does missed
// a change (an HSCAN continued on another server skips some; an admission's
// entry may be trimmed before it is read), and so does one whose voucher
// changed generation or epoch, or whose log does not reach back to its
// ver: it answers no more until its buyers are copied whole again, no
// sooner than copyDuty times as long as the last whole copy took.
//
// Every read is sent with a probe that admission is armed on the server
// (admitProbe): where it is not, the server was not checked since it came
// up (maybe with older data), the copy is dropped, and a slot read there
// answers ErrCacheUnverified.
//
// A copy answers alone only while a read sent less than copyTrust ago found
// it true and the voucher sold out. An admission needs stock, which on a
// sold-out voucher only a unit given back or a rebuild makes, and those
// hold it for Hold > copyTrust. So a buyer admitted after that read was
// admitted at least Hold after it: any answer given after that admission
// is given after the copy's trust lapsed. A copy never tells a buyer who
// holds an order "sold out".
//
// Under thousands of connections at once a poll's round trip (its reply
// waits in Go's run queue behind every request's goroutine) can take longer
// than copyTrust, and the trust lapses between polls; while a unit given
// back is not sold again, no read gives any. An answer then waits for a
// poll sent after it came to find the copy true (awaitPoll): the copy is
// then the voucher's buyers as of a read made after the question, which
// needs no clock and no hold.
type soldOutCopies struct {
	mu     sync.Mutex                            // held to change m
	m      atomic.Pointer[map[int64]*buyersCopy] // read by every sold-out answer
	epoch  time.Time                             // mono measures from it
	ctx    context.Context                       // ends the pollers at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool // under mu: no poller starts
	// off: no copies (Config.NoSoldOutCopy); SoldOutBuyerOrder reads the
	// slot.
	off bool
	// buyers counts the buyers held in copies, bounded by maxCopyBuyers.
	buyers atomic.Int64
	// copies counts the whole copies made (tests tell by it a change
	// applied from one that made the buyers be copied again).
	copies atomic.Int64
	// pace holds, under mu, the pacing of the vouchers whose whole copies
	// must wait.
	pace map[int64]pacing
}

// pacing spaces one voucher's whole copies: ready is when the cost of
// those made is paid off (mono), cost that of the last. A copy may begin
// from ready-cost on: one at once after a quiet spell, then one per cost.
type pacing struct{ ready, cost int64 }

// copyFrom returns when (mono) the voucher's next whole copy may begin.
func (s *soldOutCopies) copyFrom(voucherID int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pace[voucherID]
	return p.ready - p.cost
}

// spent records a whole copy of the voucher, made or failed, that scanned
// that many buyers.
func (s *soldOutCopies) spent(voucherID, scanned int64) {
	ended := s.mono()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.pace {
		if p.ready <= ended { // paid off: as if none was made
			delete(s.pace, id)
		}
	}
	if s.pace == nil {
		s.pace = map[int64]pacing{}
	}
	cost := max(copyDuty*scanned*int64(copyScanCost), int64(copyRetry))
	s.pace[voucherID] = pacing{ready: max(s.pace[voucherID].ready, ended) + cost, cost: cost}
}

// buyersCopy is one voucher's copy of its buyers' slots.
type buyersCopy struct {
	// view is the copy, set before confirmed is first set and replaced
	// whole by each change.
	view atomic.Pointer[copyView]
	// trusted: until when (mono) the copy may answer alone: copyTrust after
	// a read that found it true and the voucher sold out was sent.
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
// soldOutCopies for why a copy may answer. Unlike BuyerOrder it answers
// only for a server where admission is armed and a voucher that is loaded:
// else (a server not checked since it came up, maybe with older data; a
// voucher being rebuilt) it answers ErrCacheUnverified or
// ErrVoucherNotLoaded, and the caller admits, which checks the server or
// rebuilds the voucher.
func (c *Client) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	s := c.soldOut
	if s.off {
		return c.fencedBuyerOrder(ctx, userID, voucherID)
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
		if now < cp.trusted.Load() {
			return cp.view.Load().order(userID), nil
		}
		if cp.confirmed.Load() != 0 {
			if order, ok := cp.awaitPoll(ctx, userID, now); ok {
				return order, nil
			}
		}
	}
	return c.fencedBuyerOrder(ctx, userID, voucherID)
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

// admitProbe asks whether admission is armed on the server that holds the
// voucher (ArmAdmission, fence.go), sent with a read, on the same
// connection: where it is not, the server was not checked since it came
// up, and its data may be older than the database's. On one server (or
// Sentinel's master) it is SCRIPT EXISTS of the admission script; on a
// Cluster, whose client sends a command without keys to any node, it is
// the admission script itself, run so that it admits nobody (for a
// generation no voucher has it answers "not loaded" before it writes),
// which answers NOSCRIPT where it is not loaded. See probeErr.
func (c *Client) admitProbe(k *voucherKeys) rueidis.Completed {
	sha := c.scripts.get("admit").sha
	if c.Kind() != KindCluster {
		return c.rdb.B().ScriptExists().Sha1(sha).Build()
	}
	return c.rdb.B().Evalsha().Sha1(sha).Numkeys(4).Key(k.Stock, k.Meta, k.Buyers, k.Orders).
		Arg("0", "0", k.ID, "0", "-", "0").Build()
}

// probeErr returns what admitProbe's answer says of the server:
// ErrCacheUnverified where admission is not armed.
func probeErr(res rueidis.RedisResult) error {
	const op = "read a sold-out voucher's buyers"
	unverified := fmt.Errorf("redis: %s: the server is not checked: %w", op, seckill.ErrCacheUnverified)
	arr, err := res.ToArray()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		return unverified
	}
	if err != nil {
		return redisErr(op, err)
	}
	switch len(arr) {
	case 1: // SCRIPT EXISTS
		if n, err := arr[0].AsInt64(); err == nil {
			if n == 1 {
				return nil
			}
			return unverified
		}
	case 2: // the admission script
		if code, err := arr[0].AsInt64(); err == nil && code == admitNotLoaded {
			return nil
		}
	}
	return fmt.Errorf("redis: %s: the probe of admission answered %v", op, arr)
}

// fencedBuyerOrder is BuyerOrder read only where admission is armed
// (else ErrCacheUnverified) and while the voucher is loaded: without its
// stock (unloaded, being rebuilt, or lost with Redis's data) its slots may
// lack buyers who hold an order, and it is ErrVoucherNotLoaded.
func (c *Client) fencedBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	k := c.hotVoucher(voucherID)
	res := c.rdb.DoMulti(ctx, c.admitProbe(k), c.rdb.B().Exists().Key(k.Stock).Build(),
		c.rdb.B().Hget().Key(k.Buyers).Field(strconv.FormatInt(userID, 10)).Build())
	if err := probeErr(res[0]); err != nil {
		return 0, err
	}
	switch n, err := res[1].AsInt64(); {
	case err != nil:
		return 0, redisErr("read buyer", err)
	case n == 0:
		return 0, fmt.Errorf("redis: read buyer: voucher %d: %w", voucherID, seckill.ErrVoucherNotLoaded)
	}
	id, err := res[2].AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, redisErr("read buyer", err)
	}
	return id, nil
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

// errNoCopy: the voucher's buyers cannot be copied now (not sold out, too
// many, or they changed in a way the copy cannot follow).
var errNoCopy = errors.New("redis: no copy of the buyers")

// keepCopy makes the copy cp of the voucher's buyers, then keeps it true
// with the changes polls find, until it is not asked for in copyIdle, the
// server is not armed, a whole copy fails, or ctx ends.
func (c *Client) keepCopy(ctx context.Context, voucherID int64, cp *buyersCopy) {
	s := c.soldOut
	k := c.keys.voucher(voucherID)
	defer func() {
		cp.ended.Store(true)
		cp.pollEnded()
	}()
	var held int64 // buyers counted in s.buyers for this copy
	defer func() { s.buyers.Add(-held) }()
	idle := func() bool { return s.mono()-cp.used.Load() > int64(copyIdle) }
	var (
		at   copyState // what the copy is true against
		last int64     // when the last poll was sent (mono)
	)
	t := time.NewTicker(copyPoll)
	defer t.Stop()
	for {
		if cp.view.Load() == nil || cp.stale.Load() {
			if !c.awaitCopy(ctx, s.copyFrom(voucherID), idle) {
				s.put(voucherID, nil, cp)
				return
			}
			began := s.mono()
			view, st, sent, err := c.copyAll(ctx, voucherID, &k, &held)
			if err != nil {
				if ctx.Err() == nil {
					c.logger.Debug("could not copy a sold-out voucher's buyers", "voucher", voucherID, "err", err)
					s.put(voucherID, &buyersCopy{retry: s.mono() + int64(copyRetry)}, cp)
				}
				return
			}
			again := cp.confirmed.Load() != 0
			c.logger.Debug("answering a sold-out voucher's buyers from a copy", "voucher", voucherID, "buyers", view.size,
				"took", time.Duration(s.mono()-began), "again", again)
			if !again {
				cp.used.Store(s.mono()) // idle from now, not from before the scan
			}
			at = st
			cp.view.Store(view)
			cp.stale.Store(false)
			cp.confirm(sent, st)
		} else {
			rd, sent, err := c.readChanges(ctx, &k, &at)
			last = sent
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, seckill.ErrCacheUnverified):
				s.put(voucherID, nil, cp)
				return
			case err != nil:
				// Unheard: the trust lapses by itself; poll again.
			default:
				if view, ok := cp.view.Load().next(at, rd); ok {
					at = rd.state
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
			s.put(voucherID, nil, cp)
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
func (c *Client) awaitCopy(ctx context.Context, next int64, idle func() bool) bool {
	for {
		wait := next - c.soldOut.mono()
		if idle() || ctx.Err() != nil {
			return false
		}
		if wait <= 0 {
			return true
		}
		sleepCtx(ctx, min(time.Duration(wait), copyIdle/4))
	}
}

// confirm records that a read sent at sent (mono) found the copy true, of
// the state st.
func (cp *buyersCopy) confirm(sent int64, st copyState) {
	cp.confirmed.Store(sent)
	if st.soldOut() {
		cp.trusted.Store(sent + int64(copyTrust))
	}
}

// copyAll copies the voucher's buyers whole: it reads the voucher's state,
// scans the buyers (HSCAN, so that Redis is not held for long by a large
// hash), and applies what changed since that read as a poll does, which
// also finds the buyers a scan continued on another server skipped. The
// copy is true as of that last read, sent at sent. held is the number of
// buyers counted in the copies' budget for this copy.
func (c *Client) copyAll(ctx context.Context, voucherID int64, k *voucherKeys, held *int64) (*copyView, copyState, int64, error) {
	s := c.soldOut
	var scanned int64
	defer func() { s.spent(voucherID, scanned) }()
	first, _, err := c.readChanges(ctx, k, nil)
	if err != nil {
		return nil, copyState{}, 0, err
	}
	if !first.state.soldOut() {
		return nil, copyState{}, 0, errNoCopy
	}
	if s.buyers.Add(first.state.buyers-*held) > maxCopyBuyers {
		s.buyers.Add(*held - first.state.buyers)
		return nil, copyState{}, 0, errNoCopy
	}
	*held = first.state.buyers
	scanned = first.state.buyers
	buyers, err := c.scanBuyers(ctx, k.Buyers, first.state.buyers)
	if err != nil {
		return nil, copyState{}, 0, err
	}
	rd, sent, err := c.readChanges(ctx, k, &first.state)
	if err != nil {
		return nil, copyState{}, 0, err
	}
	view, ok := (&copyView{base: buyers, size: int64(len(buyers))}).next(first.state, rd)
	if !ok {
		return nil, copyState{}, 0, errNoCopy
	}
	s.copies.Add(1)
	return view, rd.state, sent, nil
}

// next returns the view made true by rd, a read of what changed since the
// view was true against at; false if it cannot be: the read does not list
// every change, the voucher was unloaded or changed generation or epoch
// (a rebuild), or the view so changed does not hold as many buyers as
// Redis does (it missed an admission whose entry was trimmed, or a scan
// skipped some).
func (v *copyView) next(at copyState, rd copyRead) (*copyView, bool) {
	st := rd.state
	if !rd.complete || !st.hasStock || st.gen != at.gen || st.epoch != at.epoch {
		return nil, false
	}
	nv := v.with(rd.changes)
	return nv, nv.size == st.buyers
}

// copyState is what a copy is true against: the voucher's stock,
// generation, epoch and version as strings ("" if absent), its number of
// buyers, and the id of the last order entry the copy holds the buyer of.
type copyState struct {
	stock, gen, epoch, ver string
	hasStock               bool
	buyers                 int64
	last                   string
}

// soldOut reports a loaded voucher with no stock left.
func (v copyState) soldOut() bool {
	n, err := strconv.ParseInt(v.stock, 10, 64)
	return v.hasStock && err == nil && n <= 0
}

// copyRead is what one read of a copy's changes found: the voucher's state
// and, if complete, the slots that changed since the copy's state, with
// what each holds now (0: none).
type copyRead struct {
	state    copyState
	complete bool
	changes  map[int64]int64
}

// readChanges runs copy_changes.lua, after the probe of admission, for a
// copy true against from (nil: the state alone), and returns the time
// (mono) the read was sent. A server where admission is not armed is
// ErrCacheUnverified.
func (c *Client) readChanges(ctx context.Context, k *voucherKeys, from *copyState) (copyRead, int64, error) {
	const op = "read a sold-out voucher's changes"
	ver, last := "", "0-0"
	if from != nil {
		ver, last = cmp.Or(from.ver, "0"), cmp.Or(from.last, "0-0")
	}
	script := c.scripts.get("copy_changes")
	keys, args := []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.Changes}, []string{ver, last, changeLogLen}
	var (
		sent int64
		out  []rueidis.RedisMessage
		err  error
	)
	for loaded := false; ; loaded = true {
		sent = c.soldOut.mono()
		res := c.rdb.DoMulti(ctx, c.admitProbe(k),
			c.rdb.B().Evalsha().Sha1(script.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if err := probeErr(res[0]); err != nil {
			return copyRead{}, sent, err
		}
		out, err = res[1].ToArray()
		if re, ok := rueidis.IsRedisErr(err); !ok || !re.IsNoScript() || loaded {
			break
		}
		// Not loaded on this server yet: running it loads it; that read,
		// not sent with the probe, is not used.
		if err := script.Exec(ctx, c.rdb, keys, args).Error(); err != nil {
			return copyRead{}, sent, redisErr(op, err)
		}
	}
	if err != nil {
		return copyRead{}, sent, redisErr(op, err)
	}
	if len(out) < 7 || (len(out)-7)%2 != 0 {
		return copyRead{}, sent, fmt.Errorf("redis: %s: %d values returned", op, len(out))
	}
	var rd copyRead
	str := func(m rueidis.RedisMessage) (string, bool) {
		s, err := m.ToString()
		return s, err == nil
	}
	rd.state.stock, rd.state.hasStock = str(out[0])
	rd.state.gen, _ = str(out[1])
	rd.state.epoch, _ = str(out[2])
	rd.state.ver, _ = str(out[3])
	rd.state.last, _ = str(out[5])
	if rd.state.buyers, err = out[4].AsInt64(); err != nil {
		return copyRead{}, sent, fmt.Errorf("redis: %s: buyers: %w", op, err)
	}
	complete, err := out[6].AsInt64()
	if err != nil {
		return copyRead{}, sent, fmt.Errorf("redis: %s: complete: %w", op, err)
	}
	rd.complete = complete == 1
	rd.changes = make(map[int64]int64, (len(out)-7)/2)
	for i := 7; i < len(out); i += 2 {
		u, _ := str(out[i])
		user, err := strconv.ParseInt(u, 10, 64)
		var order int64
		if err == nil && !out[i+1].IsNil() {
			o, _ := str(out[i+1])
			order, err = strconv.ParseInt(o, 10, 64)
		}
		if err != nil {
			// Not what admission writes: leave this voucher to the slot
			// reads, whose read of such a slot is an error, not "no order".
			return copyRead{}, sent, fmt.Errorf("redis: %s: slot of %q: not a user and order id", op, u)
		}
		rd.changes[user] = order
	}
	return rd, sent, nil
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
