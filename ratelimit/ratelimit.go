// Package ratelimit is a token-bucket rate limiter with one bucket per key
// (a buyer, a client address), cheap enough for the hot path of a flash
// sale and bounded in memory however many keys arrive.
//
// Each bucket is kept as the generic cell rate algorithm keeps it: one
// integer, the "theoretical arrival time" (TAT) at which the bucket would
// be full again. That makes a decision integer arithmetic, exact (no
// floating tokens that come back 0.9999 short), and makes "idle long enough
// to be full" a comparison: TAT <= now. A bucket that is full holds nothing
// a new one would not, so it can be dropped at no cost to the limit.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// shardBits gives 64 shards: enough that two cores (or sixteen) rarely meet
// on one mutex, few enough that sweeping them all is cheap.
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// DefaultMaxKeys bounds the buckets a Limiter keeps when Config.MaxKeys is
// zero: about 16 MiB at most, and far more buyers than a sale has at once.
const DefaultMaxKeys = 1 << 18

// maxInterval caps the time a token takes to come back, so that absurdly
// small rates neither overflow a time.Duration nor tell a client to wait
// longer than a day.
const maxInterval = int64(24 * time.Hour)

// Config is a limiter's settings.
type Config struct {
	// Rate is how many tokens a second come back to each bucket. Zero,
	// negative, NaN or infinite: no limit (New returns nil).
	Rate float64
	// Burst is how many tokens a bucket holds: how many requests a key may
	// make at once. Default (zero or negative): one second's worth of Rate,
	// at least 1.
	Burst int
	// MaxKeys bounds the buckets kept. Default DefaultMaxKeys.
	MaxKeys int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Limiter is a token bucket per key. A nil *Limiter is no limit: it allows
// everything, so a caller can keep one whether or not a limit is set.
//
// Buckets are spread over 64 shards by a hash of the key, each with its own
// mutex, so no lock is shared by all requests. Deciding for a key that has
// a bucket allocates nothing.
type Limiter[K comparable] struct {
	interval  int64 // ns for one token to come back
	tolerance int64 // ns a bucket's TAT may run ahead of now: (burst-1) tokens
	fill      int64 // ns for an empty bucket to fill: burst tokens
	perShard  int
	hash      func(K) uint64
	now       func() time.Time
	epoch     time.Time
	shards    [numShards]shard[K]
}

// shard is one mutex and its buckets, padded to a cache line so that two
// cores taking neighbouring shards do not contend for one line.
type shard[K comparable] struct {
	mu    sync.Mutex
	tats  map[K]int64 // key → TAT, in ns since the limiter's epoch
	swept int64       // when the shard was last swept, ns since the epoch
	_     [40]byte
}

// New returns a limiter of cfg, or nil (no limit) when cfg.Rate is not a
// positive finite number. hash spreads keys over the shards: it must be
// well mixed in its high bits (see HashInt64, HashBytes16).
func New[K comparable](cfg Config, hash func(K) uint64) *Limiter[K] {
	if !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 1) {
		return nil
	}
	if cfg.Burst <= 0 {
		cfg.Burst = int(max(1, math.Ceil(cfg.Rate)))
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	interval := min(max(int64(math.Round(float64(time.Second)/cfg.Rate)), 1), maxInterval)
	// In float, then clamped: a huge burst times a long interval must not
	// overflow; 2^62 ns is 146 years, which is "never" for a bucket.
	tolerance := int64(min(float64(cfg.Burst-1)*float64(interval), 1<<62))
	l := &Limiter[K]{
		interval:  interval,
		tolerance: tolerance,
		fill:      tolerance + interval,
		perShard:  max(1, (cfg.MaxKeys+numShards-1)/numShards),
		hash:      hash,
		now:       cfg.Now,
	}
	l.epoch = l.now()
	for i := range l.shards {
		l.shards[i].tats = make(map[K]int64)
	}
	return l
}

// Allow takes a token from key's bucket. When the bucket is empty it takes
// none and returns false and how long until a token comes back (more than
// zero).
func (l *Limiter[K]) Allow(key K) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	return l.AllowAt(key, l.now())
}

// AllowAt is Allow at time t, for a caller that reads the clock once for
// several limiters (a clock read can cost as much as the rest of Allow).
func (l *Limiter[K]) AllowAt(key K, t time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	// With time.Now this is monotonic: a wall-clock step neither refills
	// nor drains buckets.
	now := int64(t.Sub(l.epoch))
	sh := l.shard(key)
	sh.mu.Lock()
	tat, found := sh.tats[key]
	if !found {
		sh.makeRoom(l, now)
	}
	// A bucket last used long ago (or never) is full: its TAT is now.
	tat = max(tat, now)
	if ahead := tat - now; ahead > l.tolerance {
		sh.mu.Unlock()
		return false, time.Duration(ahead - l.tolerance)
	}
	sh.tats[key] = tat + l.interval
	sh.mu.Unlock()
	return true, 0
}

// Refund gives back the token that Allow just took for key, for a request
// that another limit then refused: it should cost this key nothing.
func (l *Limiter[K]) Refund(key K) {
	if l == nil {
		return
	}
	sh := l.shard(key)
	sh.mu.Lock()
	// A bucket no longer kept was evicted as full (or forgiven): there is
	// nothing to give back.
	if tat, ok := sh.tats[key]; ok {
		sh.tats[key] = tat - l.interval
	}
	sh.mu.Unlock()
}

// Len returns how many buckets the limiter keeps, for tests and metrics.
func (l *Limiter[K]) Len() int {
	if l == nil {
		return 0
	}
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.tats)
		sh.mu.Unlock()
	}
	return n
}

func (l *Limiter[K]) shard(key K) *shard[K] {
	return &l.shards[l.hash(key)>>(64-shardBits)]
}

// makeRoom runs before a new bucket is added, with sh.mu held. Full buckets
// are dropped when the shard is at its bound, or when a whole fill time has
// passed since the last sweep (so that, under normal traffic, the maps hold
// about the keys active in the last fill time and sweeps cost O(1) per
// insert, amortised). If a flood of distinct keys leaves too few full
// buckets to drop, arbitrary ones are dropped too: those keys are forgiven
// what they had used, which is the price of bounded memory; the
// alternative, refusing new keys, would lock every new buyer out.
func (sh *shard[K]) makeRoom(l *Limiter[K], now int64) {
	full := len(sh.tats) >= l.perShard
	if !full && now-sh.swept < l.fill {
		return
	}
	sh.swept = now
	for k, tat := range sh.tats {
		if tat <= now {
			delete(sh.tats, k)
		}
	}
	if !full {
		return
	}
	// Free at least a quarter of the shard, so the next sweep is a quarter
	// of the bound's inserts away.
	target := l.perShard - max(1, l.perShard/4)
	for k := range sh.tats {
		if len(sh.tats) <= target {
			break
		}
		delete(sh.tats, k)
	}
}

// HashInt64 mixes an integer key (a user id) for New: sequential ids
// land on different shards.
func HashInt64(v int64) uint64 { return mix(uint64(v)) }

// HashBytes16 mixes a 16-byte key (an IP address's As16) for New.
func HashBytes16(b [16]byte) uint64 {
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return mix(hi ^ mix(lo))
}

// mix is splitmix64's finaliser: every input bit affects every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
