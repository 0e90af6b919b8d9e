package orderid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/startstop"
)

// LeaseStore keeps the node leases that running instances share: package
// redis implements it, one method per Lua script. Times are the store's
// own clock's.
type LeaseStore interface {
	// AcquireNode leases, for ttl, a node id of the count there are that
	// no running instance holds: first, or the next free one after it,
	// wrapping. It returns the node id; the newest id time its last holder
	// reported, in unix milliseconds; and how long ago the leases were
	// written anew (first written, or found written on another server: a
	// restart, perhaps from an older snapshot, or a failover). It fails
	// when every node id is held.
	AcquireNode(ctx context.Context, token string, ttl time.Duration, first, count int) (node int, lastUnixMs int64, age time.Duration, err error)
	// RenewNode extends the lease of node held under token to ttl from now
	// and records lastUnixMs. recent says that the holder's last confirmed
	// renewal was sent less than its validity ago: a lease past its
	// expiry is renewed only then. It returns false when the lease is not
	// the holder's any more, or ran out.
	RenewNode(ctx context.Context, node int, token string, ttl time.Duration, lastUnixMs int64, recent bool) (bool, error)
	// ReleaseNode gives node back, recording lastUnixMs for its next
	// holder.
	ReleaseNode(ctx context.Context, node int, token string, lastUnixMs int64) error
}

// LeaseTimes are the durations of a node lease (see Lease).
type LeaseTimes struct {
	// The lease lasts TTL in the store and is renewed every Renew; the
	// generator may use it only until Valid after the start of its last
	// confirmed renewal. Valid is shorter than TTL: an instance that
	// cannot reach the store stops making ids long before its node id can
	// be leased by another. Valid leaves room for renewals delayed by a
	// loaded machine: a late one stops order ids until it lands.
	TTL, Renew, Valid time.Duration
	// FreshWait is how long after the leases were written anew a newcomer
	// waits before making ids; zero where no holder can be older than the
	// leases (a store that lives and dies with this process, or a key
	// prefix private to a test).
	FreshWait time.Duration
}

// retryTake bounds how long a lease that lost its node id waits before it
// tries again to take one, after a take that failed.
const retryTake = time.Second

// SharedLeaseTimes suit a store that running instances share and that
// outlives them (a Redis server): NewLease's.
var SharedLeaseTimes = LeaseTimes{TTL: 15 * time.Second, Renew: time.Second, Valid: 5 * time.Second, FreshWait: 5 * time.Second}

// EmbeddedLeaseTimes suit the embedded Redis server, which lives and dies
// with this process, its one holder: its renewals wait behind the sale's
// admissions on its one connection, so its leases are long, and no holder
// can be older than its leases, so a newcomer does not wait.
var EmbeddedLeaseTimes = LeaseTimes{TTL: time.Minute, Renew: time.Second, Valid: 45 * time.Second}

// Lease keeps a node id leased in a LeaseStore for a Generator, so that no
// two running instances make ids with one node id (docs/design/orderids.md, Order
// ids). Start takes it and keeps it renewed in the background; Stop gives
// it back.
//
// If the store loses its data, a holder learns it at its next renewal
// (within Renew) and stops at once; a newcomer then waits until FreshWait
// has passed since the leases were first written again, so the two never
// overlap.
//
// The store may also come back with leases older than what their holders
// hold (a restart from an older snapshot, a failover to a lagging
// replica): a node id in use may show free. So the store records the
// identity of the server the leases are written on (run_id/master_replid,
// as for the fence), and leases found written on another server are new
// for a newcomer as lost ones are: it waits FreshWait. A holder whose
// lease did not come back fails its next renewal, and one whose lease did
// keeps it: no one else can take it meanwhile (docs/design/orderids.md, Order ids).
type Lease struct {
	// LeaseTimes default to SharedLeaseTimes.
	LeaseTimes
	// OnPanic, if set before Start, is called each time the renewal
	// recovers from a panic, which it logs: for the caller to count it.
	OnPanic func()

	store  LeaseStore
	gen    *Generator
	logger *slog.Logger
	token  string
	node   atomic.Int64 // -1 until leased
	// confirmed is when the last renewal confirmed was sent (nil before
	// the first of a lease): a lease past its expiry is renewed for a
	// holder whose last renewal is within Valid.
	confirmed atomic.Pointer[time.Time]

	loop startstop.Service
	once sync.Once // Stop's
}

// NewLease returns a lease of a node id in store for gen, not yet taken,
// with SharedLeaseTimes.
func NewLease(store LeaseStore, gen *Generator, logger *slog.Logger) *Lease {
	var b [8]byte
	rand.Read(b[:])
	l := &Lease{LeaseTimes: SharedLeaseTimes, store: store, gen: gen, logger: logger, token: hex.EncodeToString(b[:])}
	l.node.Store(-1)
	return l
}

// Node returns the node id held, or -1.
func (l *Lease) Node() int { return int(l.node.Load()) }

// Start takes a node id, waiting if the store has just lost its leases,
// and keeps it renewed in the background until Stop.
func (l *Lease) Start(ctx context.Context) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	l.loop.Start(ctx, l.run)
	return nil
}

// Stop stops renewing and gives the node id back. It is safe to call twice.
func (l *Lease) Stop() {
	l.once.Do(func() {
		select {
		case <-l.loop.Started():
		default:
			return // not taken: nothing to give back
		}
		l.loop.Stop()
		l.gen.Revoke()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := l.store.ReleaseNode(ctx, l.Node(), l.token, l.gen.LastUnixMilli()); err != nil {
			l.logger.Warn("could not give the node id back; it frees itself when its lease ends", "node", l.Node(), "err", err)
		}
	})
}

// run renews the lease every Renew until ctx ends. A panic in a renewal
// is logged and counted, and renewal goes on at the next tick: the
// generator stops on its own while renewals do not confirm its lease.
func (l *Lease) run(ctx context.Context) {
	t := time.NewTicker(l.Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := startstop.Guard(l.logger.With("node", l.Node()), "renewing the node lease", func() error {
			l.tick(ctx)
			return nil
		})
		if err != nil && l.OnPanic != nil {
			l.OnPanic()
		}
	}
}

// tick renews the lease, or takes another if it was lost.
func (l *Lease) tick(ctx context.Context) {
	ok, err := l.renew(ctx)
	switch {
	case err != nil:
		// The generator stops on its own when Valid passes unconfirmed.
		l.logger.Warn("could not renew the node lease", "node", l.Node(), "err", err)
	case !ok:
		l.gen.Revoke()
		l.confirmed.Store(nil)
		l.logger.Error("node lease lost (Redis lost it, or it lapsed); taking another", "node", l.Node())
		for ctx.Err() == nil {
			if err := l.acquire(ctx); err == nil {
				break
			} else if ctx.Err() == nil {
				l.logger.Error("could not take a node id", "err", err)
				// Ids are stopped until a take succeeds: try again soon,
				// however long the renewals are spaced.
				select {
				case <-ctx.Done():
				case <-time.After(min(l.Renew, retryTake)):
				}
			}
		}
	}
}

// renew extends the lease, and the generator's validity from the time the
// renewal was sent.
func (l *Lease) renew(ctx context.Context) (bool, error) {
	sent := time.Now()
	c := l.confirmed.Load()
	recent := c != nil && sent.Sub(*c) < l.Valid
	ok, err := l.store.RenewNode(ctx, l.Node(), l.token, l.TTL, l.gen.LastUnixMilli(), recent)
	if err != nil || !ok {
		return false, err
	}
	l.confirmed.Store(&sent)
	l.gen.Extend(sent.Add(l.Valid))
	return true, nil
}

// acquire leases a free node id and hands it to the generator.
func (l *Lease) acquire(ctx context.Context) error {
	node, last, age, err := l.store.AcquireNode(ctx, l.token, l.TTL, mrand.IntN(Nodes), Nodes)
	if err != nil {
		return err
	}
	// Leases written anew, or found written on another server, less than
	// FreshWait ago: a holder from before may still be making ids with
	// this node id, which showed free. Wait until it has stopped: its last
	// confirmed renewal ran before then (one since would have kept the
	// node id from being free), so it stops within Valid of it.
	if wait := l.FreshWait - age; l.FreshWait > 0 && wait > 0 {
		l.logger.Info("Redis's node leases are new (first written, or Redis restarted or failed over since they were): waiting before making order ids", "wait", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	l.node.Store(int64(node))
	l.confirmed.Store(nil)
	l.gen.Lease(node, last, time.Time{})
	ok, err := l.renew(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("orderid: node lease lost while it was being taken")
	}
	l.logger.Info("node id leased for order ids", "node", node)
	return nil
}
