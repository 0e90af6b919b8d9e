// Package orderid makes order ids: 64-bit integers, ordered by time, unique
// across every running instance of the service (docs/design/orderids.md, Order ids).
//
// The layout is Snowflake's: 41 bits of milliseconds since Epoch (enough
// until 2095), 10 bits of node id, 12 bits of sequence within the
// millisecond. Each instance leases its node id (Lease, in a LeaseStore
// that package redis implements) and may make ids only while its lease is
// known to be valid.
package orderid

import (
	"errors"
	"sync"
	"time"

	"github.com/seckill/seckill"
)

// Layout of an id.
const (
	NodeBits = 10
	SeqBits  = 12
	// Nodes is how many node ids there are.
	Nodes   = 1 << NodeBits
	maxSeq  = 1<<SeqBits - 1
	msShift = NodeBits + SeqBits
)

// Epoch is the time of id 0.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrNoLease means the generator holds no valid node lease: it was never
// leased, or its lease could not be confirmed in time. Making an id then
// could repeat another instance's.
var ErrNoLease = errors.New("orderid: no valid node lease")

// Generator makes ids for one node. Its zero value holds no lease.
type Generator struct {
	// Clock tells the time; tests set it. Validity is checked against it,
	// so it must carry a monotonic reading (time.Now, the default, does).
	Clock seckill.Clock

	mu         sync.Mutex
	node       int64
	leased     bool
	validUntil time.Time
	lastMs     int64 // milliseconds since Epoch of the last id
	seq        int64
}

// New returns a generator with no lease.
func New() *Generator { return &Generator{Clock: time.Now} }

// Lease makes the generator use node, valid until validUntil. lastUnixMs is
// the newest id time the node's previous holder used: ids go on after it,
// so that a clock that stepped back since cannot repeat them.
func (g *Generator) Lease(node int, lastUnixMs int64, validUntil time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if int64(node) != g.node || !g.leased {
		g.seq = maxSeq // the next id starts a new millisecond
	}
	g.node, g.leased, g.validUntil = int64(node), true, validUntil
	if last := lastUnixMs - Epoch.UnixMilli(); last > g.lastMs {
		g.lastMs = last
	}
}

// Extend moves the end of the lease's validity to validUntil.
func (g *Generator) Extend(validUntil time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.validUntil = validUntil
}

// Revoke ends the lease at once: the node id may be someone else's.
func (g *Generator) Revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leased = false
}

// Node returns the leased node id and whether the lease is valid now.
func (g *Generator) Node() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int(g.node), g.leased && g.Clock.Now().Before(g.validUntil)
}

// LastUnixMilli returns the time of the newest id made, in unix
// milliseconds, for the lease to record.
func (g *Generator) LastUnixMilli() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastMs + Epoch.UnixMilli()
}

// Next returns a new id, greater than every id the generator made before.
// When the clock steps back, ids go on from the last millisecond used; when
// a millisecond's 4,096 ids run out, they go on in the next one, ahead of
// the clock: neither waits nor repeats.
func (g *Generator) Next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.Clock.Now()
	if !g.leased || !now.Before(g.validUntil) {
		return 0, ErrNoLease
	}
	ms := now.UnixMilli() - Epoch.UnixMilli()
	switch {
	case ms > g.lastMs:
		g.lastMs, g.seq = ms, 0
	case g.seq < maxSeq:
		g.seq++
	default:
		g.lastMs, g.seq = g.lastMs+1, 0
	}
	return g.lastMs<<msShift | g.node<<SeqBits | g.seq, nil
}

// Time returns the time an id was made at, to the millisecond.
func Time(id int64) time.Time {
	return time.UnixMilli(id>>msShift + Epoch.UnixMilli()).UTC()
}

// NodeOf returns the node id that made an id.
func NodeOf(id int64) int {
	return int(id >> SeqBits & (Nodes - 1))
}
