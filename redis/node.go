package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Leaser is what a node lease keeps informed: an order-id generator
// (package orderid).
type Leaser interface {
	Lease(node int, lastUnixMs int64, validUntil time.Time)
	Extend(validUntil time.Time)
	Revoke()
	LastUnixMilli() int64
}

// NodeCount is how many node ids there are to lease (orderid.Nodes).
const NodeCount = 1024

// NodeLease keeps a node id leased in Redis for an order-id generator, so
// that no two running instances make ids with one node id (docs/design.md, Order ids).
//
// The lease lasts TTL in Redis and is renewed every Renew; the generator may
// use it only until Valid after the start of its last confirmed renewal.
// Valid is shorter than TTL: an instance that cannot reach Redis stops
// making ids long before its node id can be leased by another. If Redis
// loses its data, a holder learns it at its next renewal (within Renew) and
// stops at once; a newcomer then waits until FreshWait has passed since the
// leases were first written again, so the two never overlap.
//
// Redis may also come back with leases older than what their holders hold
// (a restart from an older snapshot, a failover to a lagging replica): a
// node id in use may show free. So the leases record the identity of the
// server they are written on (run_id/master_replid, as for the fence), and
// leases found written on another server are new for a newcomer as lost
// ones are: it waits FreshWait. A holder whose lease did not come back
// fails its next renewal, and one whose lease did keeps it: no one else
// can take it meanwhile (docs/design.md, Order ids).
type NodeLease struct {
	// TTL, Renew and Valid: see the type's comment. Defaults 15s, 1s, 5s;
	// on the embedded server 60s, 1s, 45s. Valid leaves room for renewals
	// delayed by a loaded machine: a late one stops order ids until it
	// lands. The embedded server's renewals wait behind the sale's
	// admissions on its one connection, and that server lives and dies
	// with this process, so its leases are long.
	TTL, Renew, Valid time.Duration
	// FreshWait is how long after the leases were written anew a newcomer
	// waits before making ids. Default Valid; zero where no holder can be
	// older than the leases: the embedded server, which lives and dies with
	// this process, or a key prefix private to a test.
	FreshWait time.Duration
	// OnPanic, if set before Start, is called each time the renewal
	// recovers from a panic, which it logs: for the caller to count it.
	OnPanic func()

	c      *Client
	gen    Leaser
	logger *slog.Logger
	token  string
	node   atomic.Int64 // -1 until leased
	// confirmed is when the last renewal confirmed was sent (nil before
	// the first of a lease): node_renew renews a lease past its expiry for
	// a holder whose last renewal is within Valid.
	confirmed atomic.Pointer[time.Time]

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewNodeLease returns a lease, not yet taken, for gen.
func (c *Client) NewNodeLease(gen Leaser, logger *slog.Logger) *NodeLease {
	var b [8]byte
	rand.Read(b[:])
	l := &NodeLease{TTL: 15 * time.Second, Renew: time.Second, Valid: 5 * time.Second,
		c: c, gen: gen, logger: logger, token: hex.EncodeToString(b[:])}
	l.node.Store(-1)
	if c.server == nil {
		l.FreshWait = l.Valid
	} else {
		l.TTL, l.Valid = time.Minute, 45*time.Second
	}
	return l
}

// Node returns the node id held, or -1.
func (l *NodeLease) Node() int { return int(l.node.Load()) }

// Start takes a node id, waiting if Redis has just lost its leases, and
// keeps it renewed in the background until Stop.
func (l *NodeLease) Start(ctx context.Context) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go l.run(ctx)
	return nil
}

// Stop stops renewing and gives the node id back. It is safe to call twice.
func (l *NodeLease) Stop() {
	l.once.Do(func() {
		if l.cancel == nil {
			return
		}
		l.cancel()
		<-l.done
		l.gen.Revoke()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := l.c.scripts.get("node_release").Exec(ctx, l.c.rdb, []string{l.c.keys.nodes()},
			[]string{strconv.Itoa(l.Node()), l.token, strconv.FormatInt(l.gen.LastUnixMilli(), 10)}).Error()
		if err != nil {
			l.logger.Warn("could not give the node id back; it frees itself when its lease ends", "node", l.Node(), "err", err)
		}
	})
}

func (l *NodeLease) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.tick(ctx)
	}
}

// tick renews the lease, or takes another if it was lost. A panic is
// recovered, logged and counted, and renewal goes on at the next tick: the
// generator stops on its own while renewals do not confirm its lease.
func (l *NodeLease) tick(ctx context.Context) {
	defer func() {
		if v := recover(); v != nil {
			l.logger.Error("node lease renewal panicked; going on", "node", l.Node(), "panic", v, "stack", string(debug.Stack()))
			if l.OnPanic != nil {
				l.OnPanic()
			}
		}
	}()
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
				select {
				case <-ctx.Done():
				case <-time.After(l.Renew):
				}
			}
		}
	}
}

// renew extends the lease, and the generator's validity from the time the
// renewal was sent.
func (l *NodeLease) renew(ctx context.Context) (bool, error) {
	sent := time.Now()
	recent := "0"
	if c := l.confirmed.Load(); c != nil && sent.Sub(*c) < l.Valid {
		recent = "1"
	}
	n, err := l.c.scripts.get("node_renew").Exec(ctx, l.c.rdb, []string{l.c.keys.nodes()},
		[]string{strconv.Itoa(l.Node()), l.token, strconv.FormatInt(l.TTL.Milliseconds(), 10), strconv.FormatInt(l.gen.LastUnixMilli(), 10), recent},
	).AsInt64()
	if err != nil {
		return false, redisErr("renew node lease", err)
	}
	if n != 1 {
		return false, nil
	}
	l.confirmed.Store(&sent)
	l.gen.Extend(sent.Add(l.Valid))
	return true, nil
}

// acquire leases a free node id and hands it to the generator.
func (l *NodeLease) acquire(ctx context.Context) error {
	first, _ := rand.Int(rand.Reader, big.NewInt(NodeCount))
	res, err := l.c.scripts.get("node_acquire").Exec(ctx, l.c.rdb, []string{l.c.keys.nodes()},
		[]string{l.token, strconv.FormatInt(l.TTL.Milliseconds(), 10), first.String(), strconv.Itoa(NodeCount), l.c.nodeServer()},
	).ToArray()
	if err != nil {
		return redisErr("take a node id", err)
	}
	node, _ := res[0].AsInt64()
	if node < 0 {
		return errors.New("redis: every node id is leased: too many instances")
	}
	nums := make([]int64, 3)
	for i := range nums {
		s, _ := res[i+1].ToString()
		if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("redis: take a node id: value %q: %w", s, err)
		}
	}
	last, epoch, now := nums[0], nums[1], nums[2]
	// Leases written anew, or found written on another server, less than
	// FreshWait ago: a holder from before may still be making ids with
	// this node id, which showed free. Wait until it has stopped: its last
	// confirmed renewal ran before the epoch (one since would have kept the
	// node id from being free), so it stops within Valid of it.
	if wait := time.Duration(epoch-now)*time.Millisecond + l.FreshWait; l.FreshWait > 0 && wait > 0 {
		l.logger.Info("Redis's node leases are new (first written, or Redis restarted or failed over since they were): waiting before making order ids", "wait", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	l.node.Store(node)
	l.confirmed.Store(nil)
	l.gen.Lease(int(node), last, time.Time{})
	ok, err := l.renew(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redis: node lease lost while it was being taken")
	}
	l.logger.Info("node id leased for order ids", "node", node)
	return nil
}

// nodeServer is the server identity node_acquire is given: "" (it reads it
// from INFO), or the embedded server's, which lives and dies with this
// process and whose INFO does not name it.
func (c *Client) nodeServer() string {
	if c.embedded {
		return embeddedIdentity
	}
	return ""
}
