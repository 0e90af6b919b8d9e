package soldout

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/seckill"
)

// fakeRedis is one voucher in Redis as the copies read it, for the tests
// whose time testing/synctest drives: its stock, generation, version
// (bumped by each change of a slot but an admission's, which the log of
// changes names), buyers and order stream, as the scripts keep them. Each
// read takes latency, half before the read and half after, in the
// bubble's time.
type fakeRedis struct {
	mu      sync.Mutex
	loaded  bool
	stock   int64
	gen     string
	ver     int64
	log     map[int64][]int64 // ver -> the users whose slots it changed
	buyers  map[int64]int64
	orders  []int64 // the buyers of the order entries, oldest first; entry i's id is i+1
	held    time.Time
	latency time.Duration
	// pollsFail: ReadChanges answers unavailable (a poll unheard).
	pollsFail bool
	// pollsPanic: ReadChanges with a version to read from panics (a bug
	// in a poll).
	pollsPanic bool
	// slotReads, changeReads and scans count the reads.
	slotReads, changeReads, scans int
}

// newFakeRedis returns a loaded voucher sold out to the buyers given
// (user → order).
func newFakeRedis(buyers map[int64]int64) *fakeRedis {
	f := &fakeRedis{loaded: true, gen: "1", log: map[int64][]int64{}, buyers: map[int64]int64{}}
	for u, o := range buyers {
		f.buyers[u] = o
		f.orders = append(f.orders, u)
	}
	return f
}

// do runs change under the lock.
func (f *fakeRedis) do(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

// release gives back the unit the user's order holds, as release.lua
// does: the stock is held for hold.
func (f *fakeRedis) release(userID int64, hold time.Duration) {
	f.do(func() {
		delete(f.buyers, userID)
		f.stock++
		f.ver++
		f.log[f.ver] = []int64{userID}
		f.held = time.Now().Add(hold)
	})
}

// admit admits the user with the order, as admit.lua does; false if
// there is no stock, or it is held.
func (f *fakeRedis) admit(userID, orderID int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stock <= 0 || time.Now().Before(f.held) {
		return false
	}
	f.stock--
	f.buyers[userID] = orderID
	f.orders = append(f.orders, userID)
	return true
}

// wait takes half a read's latency.
func (f *fakeRedis) wait() {
	f.mu.Lock()
	d := f.latency / 2
	f.mu.Unlock()
	time.Sleep(d)
}

func (f *fakeRedis) SoldOutBuyerOrder(_ context.Context, userID, _ int64) (int64, error) {
	f.wait()
	defer f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slotReads++
	if !f.loaded {
		return 0, seckill.ErrVoucherNotLoaded
	}
	return f.buyers[userID], nil
}

func (f *fakeRedis) ReadChanges(_ context.Context, _ seckill.Shard, since *Version) (Changes, error) {
	f.wait()
	defer f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changeReads++
	if f.pollsFail {
		return Changes{}, fmt.Errorf("fake: %w", seckill.ErrUnavailable)
	}
	ch := Changes{Complete: true, Slots: map[int64]int64{}, Version: Version{Stock: strconv.FormatInt(f.stock, 10), HasStock: f.loaded,
		Gen: f.gen, Ver: strconv.FormatInt(f.ver, 10), Buyers: int64(len(f.buyers)), Last: strconv.Itoa(len(f.orders))}}
	if since == nil {
		return ch, nil
	}
	if f.pollsPanic {
		panic("fake: a poll panics")
	}
	from, _ := strconv.ParseInt(since.Ver, 10, 64)
	for v := from + 1; v <= f.ver; v++ {
		for _, u := range f.log[v] {
			ch.Slots[u] = f.buyers[u]
		}
	}
	last, _ := strconv.Atoi(since.Last)
	for _, u := range f.orders[min(last, len(f.orders)):] {
		ch.Slots[u] = f.buyers[u]
	}
	return ch, nil
}

func (f *fakeRedis) ScanBuyers(context.Context, seckill.Shard, int64) (map[int64]int64, error) {
	f.wait()
	defer f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scans++
	return maps.Clone(f.buyers), nil
}

func (f *fakeRedis) Shards(context.Context, int64) (int, error) { return 1, nil }

// reads returns the counts of the reads.
func (f *fakeRedis) reads() (slots, changes, scans int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slotReads, f.changeReads, f.scans
}
