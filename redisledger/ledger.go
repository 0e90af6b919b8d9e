package redisledger

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/cow"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/soldout"
)

// Cache is Redis as the ledger uses it (package redis's Client): the
// fence, the admission scripts, the buyers' slots, the stock, and the
// vouchers' loads, rebuilds and controls.
type Cache interface {
	Guard
	// Admit admits the user to the voucher's sale with the order id,
	// atomically: window, stock, one per buyer, and the order appended to
	// the stream of the buyer's home shard. It returns nil if admitted;
	// else an error of kind ErrDuplicateOrder (with the buyer's order id),
	// ErrSoldOut, ErrNotStarted, ErrEnded, ErrPaused, ErrVoucherNotLoaded
	// (not loaded, or loaded for another generation) or ErrCacheUnverified
	// (nothing ran: the server must be checked first); or ErrUnavailable
	// when the outcome is unknown, or (an *seckill.Error of that kind) when
	// too few replicas confirmed it.
	Admit(ctx context.Context, a seckill.Admission) error
	// Reserve is Admit without the stream: the queue mode's admission.
	Reserve(ctx context.Context, a seckill.Admission) error
	// Release gives back what an admission of orderID took, if the buyer's
	// slot still holds it, and reports whether it did.
	Release(ctx context.Context, voucherID, userID, orderID int64) (bool, error)
	// ReturnUnit is seckill.UnitReturner's, in Redis.
	ReturnUnit(ctx context.Context, v *seckill.Voucher, userID, orderID int64) (bool, error)
	// BuyerOrder returns the user's order id in the voucher if Redis
	// records one, else 0.
	BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
	// BuyerOrders returns the user's order id in each of the vouchers where
	// Redis records one.
	BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error)
	// Borrow moves stock to the home shard of a sharded voucher, which an
	// admission found sold out, from the voucher's other shards. It
	// answers Moved > 0 when the home shard has stock now, SoldOut when the
	// whole voucher is sold out (every shard at 0, nothing in flight),
	// neither when no stock can move now (try again); ErrVoucherNotLoaded
	// when a shard must be rebuilt first.
	Borrow(ctx context.Context, voucherID int64, home int) (seckill.Borrowed, error)
	// Remaining returns the stock left of each of ids; an id whose voucher
	// is not loaded is absent from the map.
	Remaining(ctx context.Context, ids ...int64) (map[int64]int64, error)
	// LoadVoucher puts a voucher just created into the cache: its stock,
	// window and generation. State the cache holds under its id for another
	// generation is stale and is replaced (LoadVoucher reports whether there
	// was such state); state of this very generation (rebuilt from the
	// database by a buyer or another instance first) is kept.
	LoadVoucher(ctx context.Context, v *seckill.Voucher) (replaced bool, err error)
	// Rebuild puts v back in the cache from the database, unless the cache
	// holds it (this generation, loaded): its window, its buyers (its
	// created orders, read through orders a page at a time, and the orders
	// still queued), and the stock they leave. State of another generation
	// is replaced. Concurrent rebuilds, here or in other instances, are
	// harmless; an Unload during a rebuild makes it start over.
	Rebuild(ctx context.Context, v *seckill.Voucher, orders seckill.OrderPages) (seckill.Rebuilt, error)
	// State reads what the cache holds of a voucher's sale, at one instant.
	State(ctx context.Context, voucherID int64) (*seckill.CacheState, error)
	// Unload deletes a voucher's stock and buyers from the cache, so that it
	// is rebuilt; admission refuses it until then, and a rebuild in flight
	// starts over.
	Unload(ctx context.Context, voucherID int64) error
	// UnloadStock is Unload that keeps the buyers: the rebuild counts them
	// with those it finds.
	UnloadStock(ctx context.Context, voucherID int64) error
	// Control writes an operator's control into what admission reads, on
	// every shard of v held in this generation: paused (v.Paused), and,
	// if ended, that the sale was ended now (admission then answers
	// ErrEnded whatever the clocks say). The controls outlive Unload, and
	// a rebuild keeps them over the row it read (which may be older);
	// only a cache that lost the voucher takes them from the row again.
	Control(ctx context.Context, v *seckill.Voucher, ended bool) error
	// LockControl takes the voucher's control lock for the caller (token)
	// for ttl, unless another instance holds it, and reports whether it
	// did; UnlockControl ends the caller's hold.
	LockControl(ctx context.Context, voucherID int64, token string, ttl time.Duration) (bool, error)
	UnlockControl(ctx context.Context, voucherID int64, token string) error
	// RenewControl extends the caller's hold on the lock by ttl, and
	// reports false if it no longer held it.
	RenewControl(ctx context.Context, voucherID int64, token string, ttl time.Duration) (bool, error)
}

// SoldOutReader reads the slots of a voucher found sold out, from a copy
// it keeps true without a round trip (soldout.Copies), or from Redis
// (redis.Client).
type SoldOutReader interface {
	// SoldOutBuyerOrder is Cache.BuyerOrder for a voucher the caller found
	// sold out, read only from a server checked since it came up (else
	// ErrCacheUnverified) and while the voucher (of a sharded one, the
	// buyer's home shard) is loaded (else ErrVoucherNotLoaded).
	SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}

// Ledger is the Redis ledger (seckill.Ledger). New makes one.
type Ledger struct {
	Cache Cache
	// Queue is the queue mode's queue of admitted orders: an admission
	// reserves the unit (Cache.Reserve) and the order waits here for the
	// workers. Nil: the stream mode, whose admission appends the order to
	// the voucher's stream.
	Queue seckill.OrderQueue
	// Vouchers gives the vouchers' rows and rebuilds those Redis lost.
	Vouchers *seckill.VoucherService
	// Fence checks the Redis server when an admission finds it must; New
	// makes it.
	Fence *Fence
	// Queued says the orders admitted wait in this process's memory (the
	// queue mode), where a rebuild cannot count them: a Redis that may
	// hold older data then keeps its buyers when it is unloaded, and may
	// undersell a little, never oversell. Set with Queue, or alone by a
	// tool of the queue mode that queues nothing itself.
	Queued bool
	// SoldOut reads a buyer's slot of a voucher found sold out: from a
	// copy kept true (package soldout), or from Redis, fenced. The
	// sold-out memory (SoldOutFor) answers only through it: nil turns the
	// memory off, and every buy runs the admission. (An unfenced read of
	// the slot could tell a buyer who holds an order sold_out, after Redis
	// came back older.)
	SoldOut SoldOutReader
	// Backpressure, if set, pauses the buys of a voucher whose stream
	// holds too many orders (the stream mode's workers).
	Backpressure seckill.Backpressure
	// Confirmed says Redis confirms every admission with replicas before
	// answering it (redis: Config.WaitReplicas > 0): an order found in a
	// buyer's slot by a plain read may then be one no replica has, and a
	// failover would lose it. Such a buyer is answered through the
	// admission (which confirms the order it names), never from the read.
	Confirmed bool
	// SoldOutFor is how long a voucher found sold out is answered sold out
	// here without running the admission: most buyers of a flash sale ask
	// after the stock is gone. Only the fact is kept; a buyer asking again
	// still gets their order back (G5), read from their own slot (one
	// HGET). Stock given back (a dead letter, a repair) is sold again after
	// at most this long. Default 1s; negative turns it off.
	SoldOutFor time.Duration
	// RebuildTimeout bounds a rebuild of a voucher, or of every open one
	// after the Redis server changed. Rebuilds run apart from the requests
	// that wait for them (who get 503 when their own deadline comes
	// first), so that a client going away fails nobody else. A voucher of
	// a million orders takes a few seconds. Default 10m.
	RebuildTimeout time.Duration
	// Lookup bounds the read of the buyer's slot after an admission whose
	// answer was lost. Default 1s.
	Lookup time.Duration
	Logger *slog.Logger
	// Clock tells the time. Default the Vouchers' clock.
	Clock seckill.Clock

	rebuilds singleflight.Group
	// restocks holds, by voucher id, the *restocker that makes additions
	// of stock take turns in Redis (restock).
	restocks sync.Map

	soldOut cow.Map[int64, soldOutEntry]
	// probed holds, by voucher id, when (unix ns) its stock was last read
	// to renew the memory that it is sold out (AnswerSoldOut).
	probed sync.Map
	// borrows makes the admissions of one home shard found sold out at
	// once wait for one borrow (borrowFor), not each run its own.
	borrows singleflight.Group
	// soldOutShards holds, by voucher id, until when (unix ns) a sharded
	// voucher found sold out by a borrow is answered so without borrowing
	// again.
	soldOutShards sync.Map
}

// New returns the Redis ledger over cache for the vouchers of vouchers,
// with its Fence: set the optional fields before the first call.
func New(cache Cache, vouchers *seckill.VoucherService, logger *slog.Logger) *Ledger {
	l := &Ledger{Cache: cache, Vouchers: vouchers, Logger: logger}
	l.Fence = &Fence{Cache: cache, Ledger: l, Logger: logger}
	return l
}

var (
	_ Cache         = (*redis.Client)(nil)
	_ SoldOutReader = (*redis.Client)(nil)
	_ SoldOutReader = (*soldout.Copies)(nil)

	_ seckill.Ledger         = (*Ledger)(nil)
	_ seckill.SoldOutAnswers = (*Ledger)(nil)
	_ seckill.Readmitter     = (*Ledger)(nil)
)

// Admit takes the buyer's unit of o's voucher (seckill.Ledger): from the
// sold-out memory when it knows the voucher sold out; refused while the
// voucher's stream holds too many orders (Backpressure); else by an
// admission (admit), and the order then goes to the queue in the queue
// mode. o stays pending.
func (l *Ledger) Admit(ctx context.Context, o seckill.Order) (seckill.OrderStatus, error) {
	fence := l.Fence.seen.load()
	if l.SoldOut != nil && l.knownSoldOut(o.VoucherID, fence) {
		err := l.soldOutAnswer(ctx, o.UserID, o.VoucherID)
		if err != nil && (!l.Confirmed || !errors.Is(err, seckill.ErrDuplicateOrder)) {
			return "", err
		}
		// A buyer with an order: the admission below confirms it. Or
		// (nil) the server is not checked: the admission checks it.
	}
	if l.Backpressure != nil && l.Backpressure.Refusing(o.VoucherID, o.UserID) {
		return "", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "too many orders are waiting to be written; try again shortly", RetryAfter: time.Second}
	}
	err := l.admit(ctx, seckill.Admission{VoucherID: o.VoucherID, UserID: o.UserID, OrderID: o.ID})
	switch {
	case err == nil && l.Queue != nil:
		// Queued here also when found admitted after a lost answer: the
		// admission that took it never got to.
		queued := o // a copy: o itself stays off the heap on every other path
		return seckill.OrderPending, l.enqueue(ctx, &queued)
	case err == nil:
		return seckill.OrderPending, nil
	case errors.Is(err, seckill.ErrSoldOut):
		l.noteSoldOut(o.VoucherID, fence)
	}
	return "", err
}

// Readmit admits a dead letter's order again (seckill.Readmitter): as a
// buy's admission, with its recoveries, but past the sold-out memory and
// the backpressure, which are the buyers'.
func (l *Ledger) Readmit(ctx context.Context, o *seckill.Order) error {
	return l.admit(ctx, seckill.Admission{VoucherID: o.VoucherID, UserID: o.UserID, OrderID: o.ID})
}

// HeldOrder returns the buyer's order of the voucher as Redis records it
// (seckill.Ledger).
func (l *Ledger) HeldOrder(ctx context.Context, userID, voucherID int64) (seckill.Held, error) {
	id, err := l.Cache.BuyerOrder(ctx, userID, voucherID)
	if err != nil {
		return seckill.Held{}, err
	}
	return seckill.Held{OrderID: id, Unconfirmed: id != 0 && l.Confirmed}, nil
}

// HeldOrders returns the buyer's order in each of the vouchers where
// Redis records one (seckill.Ledger).
func (l *Ledger) HeldOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error) {
	return l.Cache.BuyerOrders(ctx, userID, voucherIDs...)
}

// enqueue puts a reserved order on the queue mode's queue; a full queue
// gives the reservation back and answers unavailable.
func (l *Ledger) enqueue(ctx context.Context, o *seckill.Order) error {
	if l.Queue.Offer(o) {
		return nil
	}
	if _, err := l.Cache.Release(context.WithoutCancel(ctx), o.VoucherID, o.UserID, o.ID); err != nil {
		l.Logger.Error("queue full, and the reservation could not be given back; run seckill reconcile", "voucher", o.VoucherID, "order", o.ID, "err", err)
	}
	return &seckill.Error{Kind: seckill.ErrUnavailable, Message: "too many orders at once; try again", RetryAfter: time.Second}
}

func (l *Ledger) now() time.Time {
	if l.Clock != nil {
		return l.Clock.Now()
	}
	return l.Vouchers.Clock.Now()
}

// duplicate is the answer to a buyer who holds an order of the voucher
// already: that order (G5).
func duplicate(orderID int64) error {
	return &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: orderID}
}

// restoring is the answer to an admission that did not run: try again.
func restoring(msg string) error {
	return &seckill.Error{Kind: seckill.ErrUnavailable, Message: msg, RetryAfter: time.Second}
}

// moving is the answer to a buy of a sharded voucher whose last units are
// on their way between shards: expected near a sell-out, not a failure.
func moving() error {
	return &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the last units are moving to where they are asked for; try again", RetryAfter: time.Second, Expected: true}
}

func soldOutErr(voucherID int64) error {
	return &seckill.Error{Kind: seckill.ErrSoldOut, Message: "voucher " + strconv.FormatInt(voucherID, 10) + " is sold out"}
}

// orDefault returns d, or def if d is not positive: a negative setting
// takes the default, as a zero one does.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
