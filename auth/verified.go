package auth

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"
)

// The cache's shape: verifiedSets sets of verifiedWays tokens each (a set
// is one 64-byte cache line of hashes and pointers), so at most 131,072
// tokens (about 30 MB with tokens of 200 bytes) however many
// buyers come: a flash sale's buyers click within seconds of each other,
// and a token evicted is only verified again.
const (
	verifiedWays = 4
	verifiedSets = 1 << 15
)

// verifiedCache remembers tokens verified, each until its expiry. It is a
// set-associative table of immutable entries behind atomic pointers: a
// lookup takes no lock and allocates nothing, and two cores verifying at
// once never wait for each other. The key is the whole token, signature
// included, compared in full: a forged token never hits.
type verifiedCache struct {
	seed  maphash.Seed
	slots []verifiedSlot
}

// verifiedSlot holds an entry and its token's hash. The hash is only a
// filter (it and the entry are not written together: the entry's own hash
// and token decide), so that a lookup reads one cache line per set and
// follows no pointer but the one that matches.
type verifiedSlot struct {
	hash  atomic.Uint64
	entry atomic.Pointer[verifiedEntry]
}

// verifiedEntry is a verified token, whom it names and when it expires.
type verifiedEntry struct {
	hash  uint64
	token string
	id    Identity
	exp   time.Time
}

func (c *verifiedCache) init() {
	c.seed = maphash.MakeSeed()
	c.slots = make([]verifiedSlot, verifiedSets*verifiedWays)
}

// set returns the slots where a token of hash h may be.
func (c *verifiedCache) set(h uint64) []verifiedSlot {
	i := int(h%verifiedSets) * verifiedWays
	return c.slots[i : i+verifiedWays]
}

// get returns whom token names if it was verified and has not expired at
// now.
func (c *verifiedCache) get(token string, now time.Time) (Identity, bool) {
	h := maphash.String(c.seed, token)
	set := c.set(h)
	for i := range set {
		if set[i].hash.Load() != h {
			continue
		}
		if e := set[i].entry.Load(); e != nil && e.hash == h && e.token == token {
			return e.id, now.Before(e.exp)
		}
	}
	return Identity{}, false
}

// put remembers token, verified at now, as naming id until exp. It takes
// the place of the same token, an empty or expired slot, or else the
// entry of its set that expires first.
func (c *verifiedCache) put(token string, id Identity, exp, now time.Time) {
	h := maphash.String(c.seed, token)
	set := c.set(h)
	victim := 0
	var victimExp time.Time
	for i := range set {
		e := set[i].entry.Load()
		if e == nil || (e.hash == h && e.token == token) || !now.Before(e.exp) {
			victim = i
			break
		}
		if i == 0 || e.exp.Before(victimExp) {
			victim, victimExp = i, e.exp
		}
	}
	// A copy: the token is a piece of its request's Authorization header,
	// which may be much longer (padding), and would be kept with it.
	set[victim].entry.Store(&verifiedEntry{hash: h, token: strings.Clone(token), id: id, exp: exp})
	set[victim].hash.Store(h)
}
