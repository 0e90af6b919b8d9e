// Package soldout keeps, per instance, a copy of each sold-out voucher's
// buyers, so that the flood of buyers who ask after the sell-out is
// answered without a round trip to Redis (Copies.SoldOutBuyerOrder). A
// sharded voucher's copy is one per shard, each of the buyers whose home
// the shard is, each kept as an unsharded voucher's is.
//
// The copies read Redis only through a Reader, which redis.Client
// implements; they own the goroutines that keep them true (one poller per
// voucher, or shard, copied), started when it is first asked for and
// stopped by Close. docs/design/soldout.md, "Sold-out copies", says why a copy
// may answer.
package soldout

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/cow"
	"github.com/seckill/seckill/internal/startstop"
)

const (
	// Trust is how long after it was sent a read that found a copy true
	// and its voucher sold out lets the copy answer alone. It must stay
	// below the hold on stock given back (redis.Hold checks it).
	Trust = 100 * time.Millisecond
	// copyPoll is how often a copy's voucher is read again.
	copyPoll = 20 * time.Millisecond
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
	// one; only those that cannot be (see Changes.Complete) copy the
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
	// maxCopyDelta bounds the slots changed since a copy was made that are
	// kept apart from it (copyView); then they are merged into it.
	maxCopyDelta = 4096
)

// Reader is the Redis I/O the copies need. *redis.Client implements it.
// An unsharded voucher is its own shard 0.
type Reader interface {
	// SoldOutBuyerOrder reads the order the user's slot of the voucher
	// holds (0: none; a cancelled buyer's, their cancelled order, as
	// admission answers them), on the user's home shard, only where admission is
	// armed (else seckill.ErrCacheUnverified) and while that shard is
	// loaded (else seckill.ErrVoucherNotLoaded): the answer when no copy
	// may give it.
	SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
	// ReadChanges reads, at one instant and only where admission is armed
	// (else seckill.ErrCacheUnverified), the shard's version and the
	// slots changed since the version since, with what each holds now;
	// with since nil, the version alone, its Last the newest order entry.
	ReadChanges(ctx context.Context, shard seckill.Shard, since *Version) (Changes, error)
	// ScanBuyers reads the shard's slots whole (user id → order id: the
	// buyer's order, else the cancelled order that keeps them from buying
	// again, as admission answers them), without holding Redis for long;
	// size is how many it expects.
	ScanBuyers(ctx context.Context, shard seckill.Shard, size int64) (map[int64]int64, error)
	// Shards is how many shards the voucher has (1: unsharded), without
	// a round trip once it is known.
	Shards(ctx context.Context, voucherID int64) (int, error)
}

// Version is what a copy is true against: the voucher's (or shard's)
// stock, generation, epoch and version as Redis holds them ("" if
// absent), its number of slots (buyers, and cancelled buyers who may not
// buy again), and the id of the last order entry whose buyer the copy
// holds.
type Version struct {
	Stock, Gen, Epoch, Ver string
	// HasStock: the stock key exists (the voucher is loaded).
	HasStock bool
	// Drained: the shard's meta says drained, set on every shard of a
	// sharded voucher when all were found at 0 with nothing in flight;
	// from then on a transfer that gives the shard units holds them, as
	// a unit given back is held. An unsharded voucher has none.
	Drained bool
	Buyers  int64
	Last    string
}

// SoldOut reports a loaded voucher with no stock left.
func (v Version) SoldOut() bool {
	n, err := strconv.ParseInt(v.Stock, 10, 64)
	return v.HasStock && err == nil && n <= 0
}

// soldOutIn reports a version that lets a copy answer alone: SoldOut, and,
// of a shard of a sharded voucher, Drained. A shard at 0 but not drained
// may get units by a transfer at any moment, not held: its voucher may not
// be sold out, and a transfer before the sell-out is not held.
func (v Version) soldOutIn(sharded bool) bool {
	return v.SoldOut() && (!sharded || v.Drained)
}

// Changes is what one read of a copy's changes found: the voucher's
// version and, if Complete, every slot changed since the copy's version,
// with the order it holds now (0: none). Not Complete: the changes since
// cannot be listed (more than one read takes, a log that does not reach
// back), and the buyers must be copied whole again.
type Changes struct {
	Version  Version
	Complete bool
	Slots    map[int64]int64
}

// Config configures the copies.
type Config struct {
	// Off turns the copies off: every sold-out answer then reads its
	// buyer's slot (Reader.SoldOutBuyerOrder). They need every instance
	// to run this version's scripts: turn them off while instances of an
	// earlier version still run.
	Off bool
}

// Copies holds, per voucher the service found sold out, a copy of its
// buyers' slots, and answers from it while it is known true. A sharded
// voucher has one copy per shard, of the buyers whose home it is
// (seckill.HomeShard), made, polled, paced and trusted on its own: what
// is said below of a voucher is said of each shard, but that a shard's
// copy is made, and answers alone, only while its shard is drained too
// (Version.Drained).
//
// A copy is made only while the voucher's stock is 0 or less: its
// version is read, the buyers are scanned, and what changed meanwhile is
// applied. Then, every copyPoll, what changed since is read and applied.
// A copy that, so changed, does not hold as many buyers as Redis does
// missed a change (a scan continued on another server skips some; an
// admission's entry may be trimmed before it is read), and so does one
// whose voucher changed generation or epoch, or whose changes are not
// Complete: it answers no more until its buyers are copied whole again, no
// sooner than copyDuty times as long as the last whole copy took.
//
// Every read is made only where admission is armed: where it is not, the
// server was not checked since it came up (maybe with older data), the
// copy is dropped, and a slot read answers seckill.ErrCacheUnverified.
//
// A copy answers alone only while a read sent less than Trust ago found it
// true and the voucher sold out. An admission needs stock, which on a
// sold-out voucher only a unit given back or a rebuild makes, and those
// hold it for redis.Hold > Trust (on a drained shard, a transfer's units
// too). So a buyer admitted after that read was admitted at least the hold
// after it: any answer given after that admission is given after the
// copy's trust lapsed. A copy never tells a buyer who holds an order "sold
// out".
//
// Under thousands of connections at once a poll's round trip (its reply
// waits in Go's run queue behind every request's goroutine) can take longer
// than Trust, and the trust lapses between polls; while a unit given back
// is not sold again, no read gives any. An answer then waits for a poll
// sent after it came to find the copy true (awaitPoll): the copy is then
// the voucher's buyers as of a read made after the question, which needs
// no clock and no hold.
type Copies struct {
	r      Reader
	logger *slog.Logger
	off    bool // Config.Off

	// m and shards hold the copies, read by every sold-out answer: m an
	// unsharded voucher's, by its id, as before shards (a lookup by an
	// int64 is the cheaper); shards a sharded one's, by shard.
	m      cow.Map[int64, *buyersCopy]
	shards cow.Map[seckill.Shard, *buyersCopy]
	epoch  time.Time // mono measures from it

	mu     sync.Mutex
	closed bool // under mu: no poller starts
	// pollers holds, under mu, the copies whose pollers run: Close stops
	// them.
	pollers map[*buyersCopy]struct{}
	// pace holds, under mu, the pacing of the vouchers (or shards) whose
	// whole copies must wait.
	pace map[seckill.Shard]pacing

	// buyers counts the buyers held in copies, bounded by maxCopyBuyers.
	buyers atomic.Int64
	// copies counts the whole copies made (tests tell by it a change
	// applied from one that made the buyers be copied again).
	copies atomic.Int64
}

// New returns the copies, reading through r; none is made before a voucher
// is asked for. Close stops them. A nil logger discards.
func New(r Reader, cfg Config, logger *slog.Logger) *Copies {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Copies{r: r, logger: logger, off: cfg.Off, epoch: time.Now(), pollers: map[*buyersCopy]struct{}{}}
}

// Close stops the pollers and waits for them. The answers then read the
// buyers' slots. Safe to call twice.
func (s *Copies) Close() {
	s.mu.Lock()
	s.closed = true
	pollers := slices.Collect(maps.Keys(s.pollers))
	s.mu.Unlock()
	for _, cp := range pollers {
		cp.poller.Stop()
	}
}

// SoldOutBuyerOrder is the order the user holds of a voucher the caller
// found sold out (0: none): from this instance's copy of the voucher's
// buyers (of a sharded voucher, of the user's home shard's) while the copy
// is known to be true, else read from Redis (and a copy is started). See
// Copies for why a copy may answer. It answers only for a server where
// admission is armed and a voucher (its user's home shard) that is loaded:
// else (a server not checked since it came up, maybe with older data; a
// voucher being rebuilt) it answers seckill.ErrCacheUnverified or
// seckill.ErrVoucherNotLoaded, and the caller admits, which checks the
// server or rebuilds the voucher.
func (s *Copies) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	if s.off {
		return s.r.SoldOutBuyerOrder(ctx, userID, voucherID)
	}
	sh := seckill.Shard{VoucherID: voucherID}
	cp, _ := s.m.Load(voucherID)
	sharded := false
	if cp == nil {
		// No copy of it unsharded: it may be sharded, its user's copy
		// that of their home shard.
		k, err := s.r.Shards(ctx, voucherID)
		if err != nil {
			return 0, err
		}
		if sharded = k > 1; sharded {
			sh.Index = seckill.HomeShard(userID, k)
			cp = s.copyOf(sh, true)
		}
	}
	now := s.mono()
	switch {
	case cp == nil:
		s.startCopy(sh, sharded, nil)
	case cp.retry != 0:
		if now >= cp.retry {
			s.startCopy(sh, sharded, cp)
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
	return s.r.SoldOutBuyerOrder(ctx, userID, voucherID)
}

// mono is the monotonic time since the copies were set up.
func (s *Copies) mono() int64 { return int64(time.Since(s.epoch)) }

// copyOf returns the copy of the shard (sharded: of a voucher with more
// than one; else the voucher's), or nil.
func (s *Copies) copyOf(sh seckill.Shard, sharded bool) *buyersCopy {
	if sharded {
		cp, _ := s.shards.Load(sh)
		return cp
	}
	cp, _ := s.m.Load(sh.VoucherID)
	return cp
}

// put sets (or, with nil, removes) the shard's copy, if it still is was;
// cp or was says whether the shard is a sharded voucher's.
func (s *Copies) put(sh seckill.Shard, cp, was *buyersCopy) bool {
	if (cp != nil && cp.sharded) || (was != nil && was.sharded) {
		return putIn(&s.shards, sh, cp, was)
	}
	return putIn(&s.m, sh.VoucherID, cp, was)
}

// putIn sets (or, with nil, removes) m[k] to cp, if it still is was.
func putIn[K comparable](m *cow.Map[K, *buyersCopy], k K, cp, was *buyersCopy) bool {
	return m.Update(func(next map[K]*buyersCopy) bool {
		if next[k] != was {
			return false
		}
		if cp != nil {
			next[k] = cp
		} else {
			delete(next, k)
		}
		return true
	})
}

// startCopy starts copying the shard's buyers (sharded: of a voucher with
// more than one), unless another caller replaced was first.
func (s *Copies) startCopy(sh seckill.Shard, sharded bool, was *buyersCopy) {
	cp := newBuyersCopy()
	cp.sharded = sharded
	cp.used.Store(s.mono())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.put(sh, cp, was) {
		return
	}
	s.pollers[cp] = struct{}{}
	// Not the asker's context: the poller outlives the request.
	cp.poller.Start(context.Background(), func(ctx context.Context) {
		defer s.forget(cp)
		err := startstop.Guard(s.logger, "keeping a sold-out voucher's copy", func() error {
			s.keepCopy(ctx, sh, cp)
			return nil
		})
		if err != nil {
			// Its poller gone, the copy answers no more: the next answer
			// starts another.
			s.put(sh, nil, cp)
		}
	})
}

// forget drops the copy from the pollers once its poller has ended.
func (s *Copies) forget(cp *buyersCopy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pollers, cp)
}

// pacing spaces one voucher's whole copies: ready is when the cost of
// those made is paid off (mono), cost that of the last. A copy may begin
// from ready-cost on: one at once after a quiet spell, then one per cost.
type pacing struct{ ready, cost int64 }

// copyFrom returns when (mono) the shard's next whole copy may begin.
func (s *Copies) copyFrom(sh seckill.Shard) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pace[sh]
	return p.ready - p.cost
}

// spent records a whole copy of the shard, made or failed, that scanned
// that many buyers.
func (s *Copies) spent(sh seckill.Shard, scanned int64) {
	ended := s.mono()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.pace {
		if p.ready <= ended { // paid off: as if none was made
			delete(s.pace, id)
		}
	}
	if s.pace == nil {
		s.pace = map[seckill.Shard]pacing{}
	}
	cost := max(copyDuty*scanned*int64(copyScanCost), int64(copyRetry))
	s.pace[sh] = pacing{ready: max(s.pace[sh].ready, ended) + cost, cost: cost}
}
