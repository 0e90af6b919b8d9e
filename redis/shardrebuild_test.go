package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// learntSharded returns a voucher of shards shards on sale, learnt by c.
func learntSharded(c *Client, id, stock int64, shards int) *seckill.Voucher {
	v := onSale(id, stock)
	v.Shards, v.Generation = shards, 3
	c.Learn(v)
	return v
}

// shardKeysOf returns the keys of v's shard i.
func shardKeysOf(t testing.TB, c *Client, v *seckill.Voucher, i int) *voucherKeys {
	t.Helper()
	k, err := c.shardKeys(context.Background(), seckill.Shard{VoucherID: v.ID, Index: i})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// loadShards loads every shard of v, as its creation does.
func loadShards(t *testing.T, c *Client, v *seckill.Voucher) {
	t.Helper()
	if _, err := c.LoadVoucher(context.Background(), v); err != nil {
		t.Fatal(err)
	}
}

// admitOnce admits user on its home shard with the admission script, and
// returns its code (0 admitted, 2 sold out, 5 not loaded, 6 held...) and
// what follows it.
func admitOnce(c *Client, k *voucherKeys, v *seckill.Voucher, user, order int64) (int64, string, error) {
	res, err := admitScript.run(context.Background(), c, []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.Cancelled},
		admitArgs{UserID: user, OrderID: order, VoucherID: k.ID, Append: true, Generation: v.Generation}).ToArray()
	if err != nil {
		return 0, "", err
	}
	code, _ := res[0].AsInt64()
	val, _ := res[1].ToString()
	return code, val, nil
}

// admitShard admits user on its home shard, and returns its code (0
// admitted, 2 sold out, ...). A stock held after a rebuild is waited out.
func admitShard(t *testing.T, c *Client, v *seckill.Voucher, user, order int64) int64 {
	t.Helper()
	k := shardKeysOf(t, c, v, seckill.HomeShard(user, v.ShardCount()))
	for {
		code, wait, err := admitOnce(c, k, v, user, order)
		if err != nil {
			t.Fatalf("admit user %d: %v", user, err)
		}
		if code != 6 {
			return code
		}
		ms, _ := strconv.Atoi(wait)
		time.Sleep(time.Duration(ms+1) * time.Millisecond) // Redis's own hold: its clock, not an event
	}
}

// countShards counts v's shards and fails the test on an error.
func countShards(t *testing.T, c *Client, v *seckill.Voucher) *seckill.ShardCounts {
	t.Helper()
	n, err := c.CountShards(context.Background(), v)
	if err != nil {
		t.Fatalf("CountShards(%d): %v", v.ID, err)
	}
	return n
}

// checkInvariant checks that v's shards are loaded and hold exactly its
// initial stock: stock and buyers, and the transfers in flight.
func checkInvariant(t *testing.T, c *Client, v *seckill.Voucher) *seckill.ShardCounts {
	t.Helper()
	n := countShards(t, c, v)
	if !n.Loaded || n.Total != v.InitialStock {
		t.Errorf("shards %+v: loaded %v, total %d; want loaded, total %d (the initial stock)", n.Shards, n.Loaded, n.Total, v.InitialStock)
	}
	return n
}

// loseShard deletes every key of v's shard i, as a Redis that lost them.
func loseShard(t *testing.T, c *Client, v *seckill.Voucher, i int) {
	t.Helper()
	k := shardKeysOf(t, c, v, i)
	for _, key := range []string{k.Stock, k.Meta, k.Buyers, k.Cancelled, k.Returned, k.Orders, k.DLQ, k.Changes, k.Xout, k.Xin} {
		do(t, c, "DEL", key)
	}
}

// sale admits users from first on until every shard is sold out, and
// returns how many it admitted.
func sale(t *testing.T, c *Client, v *seckill.Voucher, first int64) int64 {
	t.Helper()
	soldOut := map[int]bool{}
	var n int64
	for u := first; len(soldOut) < v.ShardCount(); u++ {
		if u > first+100*v.InitialStock {
			t.Fatalf("shards %v of %d sold out after %d buyers", soldOut, v.ShardCount(), u-first)
		}
		switch code := admitShard(t, c, v, u, 1_000_000+u); code {
		case 0:
			n++
		case 2:
			soldOut[seckill.HomeShard(u, v.ShardCount())] = true
		default:
			t.Fatalf("admit user %d: code %d", u, code)
		}
	}
	return n
}

// buyersOf returns the buyers hash of v's shard i.
func buyersOf(t *testing.T, c *Client, v *seckill.Voucher, i int) map[string]string {
	t.Helper()
	return hash(t, c, shardKeysOf(t, c, v, i).Buyers)
}

// TestRebuildShardsAfterFlushAll: a master holding shards of a 6-shard
// voucher loses everything mid-sale (FLUSHALL). Its shards are rebuilt
// from the database's orders of the buyers whose home they are; the
// invariant holds exactly; the rest of the sale sells exactly the stock
// left, none twice.
func TestRebuildShardsAfterFlushAll(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	c := openCluster(t, cl)
	arm(t, c)
	ctx := context.Background()
	v := learntSharded(c, 41, 120, 6)
	loadShards(t, c, v)
	// 60 buyers: a shard's buyers vary with the hash.
	db := &database{}
	var admitted []*seckill.Order
	for u := int64(1); u <= 60; u++ {
		if code := admitShard(t, c, v, u, 100+u); code == 0 {
			admitted = append(admitted, &seckill.Order{ID: 100 + u, UserID: u})
		}
	}
	master := cl.MasterOf(t, shardKeysOf(t, c, v, 0).Stock)
	lost := map[int]bool{}
	for i := range v.ShardCount() {
		lost[i] = cl.MasterOf(t, shardKeysOf(t, c, v, i).Stock).Addr == master.Addr
	}
	// The workers persisted every order of the shards to be lost, and one
	// in two of the others (the rest wait in their streams).
	wantLost := map[int]map[string]string{}
	for j, o := range admitted {
		home := seckill.HomeShard(o.UserID, v.ShardCount())
		if lost[home] || j%2 == 0 {
			db.orders = append(db.orders, o)
		}
		if lost[home] {
			if wantLost[home] == nil {
				wantLost[home] = map[string]string{}
			}
			wantLost[home][strconv.FormatInt(o.UserID, 10)] = strconv.FormatInt(o.ID, 10)
		}
	}
	if _, err := master.Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	// The sale goes on on the other shards while the lost ones are
	// rebuilt: admissions keep each shard's stock + buyers.
	stop := make(chan struct{})
	var during int64
	var duringErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for u := int64(5000); ; u++ {
			select {
			case <-stop:
				return
			default:
			}
			home := seckill.HomeShard(u, v.ShardCount())
			k, err := c.shardKeys(ctx, seckill.Shard{VoucherID: v.ID, Index: home})
			if err != nil {
				duringErr = err
				return
			}
			code, _, err := admitOnce(c, k, v, u, 1_000_000+u)
			if err != nil {
				duringErr = err
				return
			}
			if code == 0 {
				during++
			}
		}
	})
	res, err := c.Rebuild(ctx, v, db.read)
	close(stop)
	wg.Wait()
	if err != nil || !res.Done || duringErr != nil {
		t.Fatalf("Rebuild = %+v, %v (admissions meanwhile: %v); want done", res, err, duringErr)
	}
	// Nothing admitted is lost: every buyer is in their home shard.
	for _, o := range admitted {
		home := seckill.HomeShard(o.UserID, v.ShardCount())
		if got := buyersOf(t, c, v, home)[strconv.FormatInt(o.UserID, 10)]; got != strconv.FormatInt(o.ID, 10) {
			t.Errorf("buyer %d (order %d) on shard %d after the rebuild: %q", o.UserID, o.ID, home, got)
		}
	}
	n := checkInvariant(t, c, v)
	var keptSold, lostBuyers int64
	lostCount := 0
	for i := range v.ShardCount() {
		if lost[i] {
			lostCount++
			lostBuyers += n.Shards[i].Buyers
			if diff := cmp.Diff(wantLost[i], buyersOf(t, c, v, i), cmpEmptyMap); diff != "" {
				t.Errorf("lost shard %d's buyers (-the database's +rebuilt):\n%s", i, diff)
			}
		} else {
			keptSold += n.Shards[i].Buyers
		}
	}
	// Each lost shard: its buyers and an even part of what is left.
	rest := v.InitialStock - lostBuyers
	for i := range v.ShardCount() {
		if !lost[i] {
			rest -= n.Shards[i].Stock + n.Shards[i].Buyers
		}
	}
	j := 0
	for i := range v.ShardCount() {
		if lost[i] {
			if want := seckill.ShardStock(rest, lostCount, j); n.Shards[i].Stock != want {
				t.Errorf("lost shard %d's stock %d, want %d (part %d of %d of the %d left)", i, n.Shards[i].Stock, want, j, lostCount, rest)
			}
			j++
		}
	}
	sold := int64(len(admitted))
	if got := sale(t, c, v, 10_000_000) + during; got != v.InitialStock-sold {
		t.Errorf("the rest of the sale sold %d (%d during the rebuild), want %d (%d less the %d sold before)", got, during, v.InitialStock-sold, v.InitialStock, sold)
	}
	after := checkInvariant(t, c, v)
	for _, s := range after.Shards {
		if s.Stock != 0 {
			t.Errorf("shard %d has %d left after the sale", s.Index, s.Stock)
		}
	}
	t.Logf("lost shards %v (%d buyers), the others sold %d", lost, lostBuyers, keptSold)
}

// cmpEmptyMap compares a nil map equal to an empty one.
var cmpEmptyMap = cmp.FilterValues(func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

// transfer takes n from v's shard from for shard to, as the donor's first
// step does, and returns the transfer's id; the give is not made.
func moveStock(t *testing.T, c *Client, v *seckill.Voucher, id string, from, to int, n int64) {
	t.Helper()
	d := shardKeysOf(t, c, v, from)
	xgen, err := do(t, c, "HGET", d.Meta, "xgen").ToString()
	if err != nil {
		xgen = "0"
	}
	do(t, c, "DECRBY", d.Stock, strconv.FormatInt(n, 10))
	do(t, c, "HSET", d.Xout, id, fmt.Sprintf("%d:%d:%d:%s", to, n, time.Now().UnixMilli(), xgen))
}

// The steps of a transfer after the take, as the transfer contract
// states them (docs/design/shards.md, Shards), for the tests of a rebuild that
// runs while one is half done.
const (
	// testGive: KEYS receiver stock, meta, xin; ARGV id, n, the
	// transfer's xgen, the voucher's gen. Returns what xin says, or
	// "refused" (nothing written).
	testGive = `local v = redis.call('HGET', KEYS[3], ARGV[1])
if v then return v end
if not redis.call('GET', KEYS[1]) or (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[4] then return 'refused' end
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) < tonumber(redis.call('HGET', KEYS[2], 'xfrozen') or '0') then return 'refused' end
if (redis.call('HGET', KEYS[2], 'xgen') or '0') ~= ARGV[3] then return 'refused' end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('INCRBY', KEYS[1], ARGV[2])
return ARGV[2]`
	// testSettle: KEYS donor stock, xout; ARGV id, what the receiver's
	// xin says.
	testSettle = `local e = redis.call('HGET', KEYS[2], ARGV[1])
if not e then return 0 end
if ARGV[2] == 'x' and redis.call('EXISTS', KEYS[1]) == 1 then
  local n = string.match(e, '^%d+:(%d+):')
  redis.call('INCRBY', KEYS[1], n)
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1`
)

// finishTransfer finishes transfer id of v, from shard from to shard to,
// as whoever finds it does: give, or cancel if the give is refused, then
// settle. It returns what the give answered.
func finishTransfer(t *testing.T, c *Client, v *seckill.Voucher, id string, from, to int, n int64, xgen string) string {
	t.Helper()
	d, r := shardKeysOf(t, c, v, from), shardKeysOf(t, c, v, to)
	got, err := do(t, c, "EVAL", testGive, "3", r.Stock, r.Meta, r.Xin, id, strconv.FormatInt(n, 10), xgen, strconv.FormatInt(v.Generation, 10)).ToString()
	if err != nil {
		t.Fatal(err)
	}
	said := got
	if got == "refused" {
		do(t, c, "HSET", r.Xin, id, "x")
		said = "x"
	}
	do(t, c, "EVAL", testSettle, "2", d.Stock, d.Xout, id, said)
	return got
}

// TestRebuildShardsTransferHalfDone: a transfer taken from its donor and
// not yet given when a rebuild runs. With the receiver lost, the units
// count in flight, not in the rebuilt receiver's stock, and the shards
// take a new transfer generation, which the transfer's give does not
// have: it is refused and the units go back to the donor. With the donor
// lost (its record of the transfer gone), the units count in the donor's
// rebuilt stock, and the receiver, of the new generation, refuses the give.
func TestRebuildShardsTransferHalfDone(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		for _, tt := range []struct {
			name     string
			lose     int
			inFlight int64
		}{
			{"receiver lost", 1, 3},
			{"donor lost", 0, 0},
		} {
			t.Run(tt.name, func(t *testing.T) {
				v := learntSharded(c, 50+int64(tt.lose), 40, 4)
				loadShards(t, c, v)
				db := &database{}
				for u := int64(1); u <= 12; u++ {
					if admitShard(t, c, v, u, 100+u) == 0 {
						db.orders = append(db.orders, &seckill.Order{ID: 100 + u, UserID: u})
					}
				}
				moveStock(t, c, v, "t1", 0, 1, 3)
				before := checkInvariant(t, c, v)
				if before.InFlight != 3 {
					t.Fatalf("in flight before %d, want 3", before.InFlight)
				}
				loseShard(t, c, v, tt.lose)
				rebuild := func() {
					if res, err := c.Rebuild(context.Background(), v, db.read); err != nil || !res.Done {
						t.Fatalf("Rebuild = %+v, %v; want done", res, err)
					}
				}
				rebuild()
				n := checkInvariant(t, c, v)
				if n.InFlight != tt.inFlight {
					t.Errorf("in flight %d after the rebuild, want %d", n.InFlight, tt.inFlight)
				}
				// Every shard of the rebuild's transfer generation, which
				// the transfer (of generation 0) is not: its give is
				// refused everywhere.
				for _, s := range n.Shards {
					if s.XGen != n.Shards[0].XGen || s.XGen == "0" || s.XGen == "" {
						t.Errorf("shard %d of transfer generation %q, want all of one new one; shards %+v", s.Index, s.XGen, n.Shards)
					}
				}
				for i := range v.ShardCount() {
					meta := hash(t, c, shardKeysOf(t, c, v, i).Meta)
					if meta["xfrozen"] != "" {
						t.Errorf("shard %d still frozen after the rebuild: %v", i, meta)
					}
				}
				// Whoever finds the transfer finishes it: its give is
				// refused (the receiver is of the new generation), and the
				// units go back to the donor, if it kept its record of them.
				stocks := n.Shards
				if got := finishTransfer(t, c, v, "t1", 0, 1, 3, "0"); got != "refused" {
					t.Errorf("the give of a transfer begun before the rebuild answered %q, want refused", got)
				}
				after := checkInvariant(t, c, v)
				if after.InFlight != 0 || after.Shards[1].Stock != stocks[1].Stock ||
					after.Shards[0].Stock != stocks[0].Stock+tt.inFlight {
					t.Errorf("after the transfer was finished: shards %+v, in flight %d; want none in flight, the receiver's stock as it was (%d), the donor's %d",
						after.Shards, after.InFlight, stocks[1].Stock, stocks[0].Stock+tt.inFlight)
				}
				// The lost shard holds its buyers, and its part of what the
				// others and the transfer leave.
				want := v.InitialStock - n.InFlight
				for _, s := range n.Shards {
					if s.Index != tt.lose {
						want -= s.Stock + s.Buyers
					}
				}
				if got := n.Shards[tt.lose]; got.Stock+got.Buyers != want {
					t.Errorf("lost shard %+v: stock and buyers %d, want %d", got, got.Stock+got.Buyers, want)
				}
			})
		}
	})
}

// TestRebuildShardsConcurrent: two instances rebuild the same lost shards
// at once, again and again; the invariant holds exactly every time.
func TestRebuildShardsConcurrent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		other := sibling(t, c)
		v := learntSharded(c, 60, 90, 6)
		other.Learn(v)
		loadShards(t, c, v)
		db := &database{}
		for u := int64(1); u <= 30; u++ {
			if admitShard(t, c, v, u, 100+u) == 0 {
				db.orders = append(db.orders, &seckill.Order{ID: 100 + u, UserID: u})
			}
		}
		moveStock(t, c, v, "t1", 2, 3, 4)
		for round := range 8 {
			loseShard(t, c, v, round%6)
			loseShard(t, c, v, (round+3)%6)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, cl := range []*Client{c, other} {
				wg.Go(func() { _, errs[j] = cl.Rebuild(context.Background(), v, db.read) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: Rebuild: %v", round, err)
				}
			}
			checkInvariant(t, c, v)
		}
	})
}

// TestUnloadShardsThenRebuild: the fence's unload of a sharded voucher
// unloads every shard, and the rebuild rebuilds them all: each its buyers
// (the database's and its stream's) and an even part of the stock they
// leave.
func TestUnloadShardsThenRebuild(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := learntSharded(c, 70, 50, 5)
		loadShards(t, c, v)
		db := &database{}
		var buyers int64
		for u := int64(1); u <= 20; u++ {
			if admitShard(t, c, v, u, 100+u) == 0 {
				buyers++
				if u%3 != 0 { // the rest only in their streams
					db.orders = append(db.orders, &seckill.Order{ID: 100 + u, UserID: u})
				}
			}
		}
		moveStock(t, c, v, "t1", 0, 4, 2)
		if err := c.Unload(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		for i := range v.ShardCount() {
			k := shardKeysOf(t, c, v, i)
			if n, _ := do(t, c, "EXISTS", k.Stock, k.Buyers).AsInt64(); n != 0 {
				t.Errorf("shard %d has a stock or buyers after Unload", i)
			}
		}
		if res, err := c.Rebuild(ctx, v, db.read); err != nil || !res.Done || res.Remaining != v.InitialStock-buyers {
			t.Fatalf("Rebuild = %+v, %v; want done, %d left", res, err, v.InitialStock-buyers)
		}
		n := checkInvariant(t, c, v)
		if n.InFlight != 0 {
			t.Errorf("in flight %d after every shard was rebuilt, want 0 (the transfers reset)", n.InFlight)
		}
		for _, s := range n.Shards {
			if want := seckill.ShardStock(v.InitialStock-buyers, v.ShardCount(), s.Index); s.Stock != want {
				t.Errorf("shard %d: stock %d, want %d", s.Index, s.Stock, want)
			}
			if out := hash(t, c, shardKeysOf(t, c, v, s.Index).Xout); len(out) != 0 {
				t.Errorf("shard %d kept its transfers out", s.Index)
			}
		}
		if got := sale(t, c, v, 1000); got != v.InitialStock-buyers {
			t.Errorf("the rest of the sale sold %d, want %d", got, v.InitialStock-buyers)
		}
	})
}

// TestStaleSinceShards: a sharded voucher's data may be older when any of
// its shards' may, and only then.
func TestStaleSinceShards(t *testing.T) {
	t.Parallel()
	c := &Client{keys: keyspace{prefix: "p" + testenv.Random()}}
	v := &seckill.Voucher{ID: 7, Shards: 8}
	slots := map[int]bool{}
	for i := range 8 {
		slots[keySlot(c.keys.shard(7, v.ShardTag(i)).Stock)] = true
	}
	var stale, fresh int
	for s := range slots {
		if stale == 0 || s < stale {
			stale = s
		}
	}
	if stale == 0 {
		t.Skip("a shard in slot 0: pick another voucher id")
	}
	// Slots up to stale-1, and past it, on master a; stale itself on b.
	fence := "0-16383=a/1"
	identity := fmt.Sprintf("0-%d=a/1,%d-%d=b/1", stale-1, stale, stale)
	if stale < 16383 {
		identity += fmt.Sprintf(",%d-16383=a/1", stale+1)
	}
	f := c.StaleSince(fence, identity)
	if f == nil || !f(v) {
		t.Errorf("a sharded voucher with a shard in stale slot %d: not stale", stale)
	}
	for id := int64(1); ; id++ {
		if keySlot(c.keys.voucher(id).Stock) != stale {
			fresh = int(id)
			break
		}
	}
	if f(&seckill.Voucher{ID: int64(fresh)}) {
		t.Errorf("unsharded voucher %d, not in slot %d, stale", fresh, stale)
	}
}

// TestRebuildShardsMakesOneTransferGeneration: shards of several transfer
// generations (a rebuild died between its freezes) refuse each other's
// transfers; a Rebuild, with nothing lost, makes them all of one again:
// the latest, even one later than any it would make, and thaws them.
func TestRebuildShardsMakesOneTransferGeneration(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		v := learntSharded(c, 80, 40, 4)
		loadShards(t, c, v)
		later := "99999999999999999999"
		do(t, c, "HSET", shardKeysOf(t, c, v, 2).Meta, "xgen", later)
		if res, err := c.Rebuild(context.Background(), v, (&database{}).read); err != nil || res.Done {
			t.Fatalf("Rebuild = %+v, %v; want nothing done (every shard loaded)", res, err)
		}
		n := checkInvariant(t, c, v)
		for i, s := range n.Shards {
			if s.XGen != later {
				t.Errorf("shard %d of transfer generation %q, want %q", i, s.XGen, later)
			}
			if meta := hash(t, c, shardKeysOf(t, c, v, i).Meta); meta["xfrozen"] != "" {
				t.Errorf("shard %d still frozen: %v", i, meta)
			}
		}
	})
}

// TestShardFreezeHolds: a shard stays frozen while any holder holds it:
// a count's thaw does not thaw what a rebuild froze.
func TestShardFreezeHolds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := learntSharded(c, 90, 20, 2)
		loadShards(t, c, v)
		shards := c.Learn(v).shards
		if _, err := c.freeze(ctx, v, shards, "rebuild", "", rebuildFreeze); err != nil {
			t.Fatal(err)
		}
		checkInvariant(t, c, v) // freezes and thaws as another holder
		for i, k := range shards {
			meta := hash(t, c, k.Meta)
			until, _ := strconv.ParseInt(meta["xfrozen"], 10, 64)
			if until < time.Now().Add(rebuildFreeze/2).UnixMilli() || meta["xhold:rebuild"] == "" {
				t.Errorf("shard %d after a count thawed: meta %v; want still frozen by the rebuild's hold", i, meta)
			}
		}
		if err := c.thaw(ctx, v.ID, shards, "rebuild"); err != nil {
			t.Fatal(err)
		}
		for i, k := range shards {
			if meta := hash(t, c, k.Meta); meta["xfrozen"] != "" || meta["xhold:rebuild"] != "" {
				t.Errorf("shard %d after the last thaw: meta %v; want thawed", i, meta)
			}
		}
	})
}

// TestShardResetArgs: shard_reset's ARGV are in its header's places.
func TestShardResetArgs(t *testing.T) {
	t.Parallel()
	got := shardResetArgs{Generation: "2", Epoch: "9", XGen: "17", Shards: 6, Index: 4}.argv()
	if diff := cmp.Diff([]string{"2", "9", "17", "6", "4"}, got); diff != "" {
		t.Errorf("shard_reset ARGV (-want +got):\n%s", diff)
	}
	if n := strings.Count(sources["shard_reset"].redis.src, "\n-- ARGV["); n != len(got) {
		t.Errorf("shard_reset's header names %d ARGV, the args make %d", n, len(got))
	}
}

// TestRebuildShardsSupersededByUnload: an Unload while a lost shard is
// being staged (the fence found the server changed) makes the rebuild start
// over, and rebuild every shard: exactly, each with its buyers.
func TestRebuildShardsSupersededByUnload(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := learntSharded(c, 95, 60, 3)
		loadShards(t, c, v)
		db := &database{}
		want := make([]map[string]string, v.ShardCount())
		for u := int64(1); u <= 24; u++ {
			if admitShard(t, c, v, u, 100+u) != 0 {
				continue
			}
			home := seckill.HomeShard(u, v.ShardCount())
			if want[home] == nil {
				want[home] = map[string]string{}
			}
			want[home][strconv.FormatInt(u, 10)] = strconv.FormatInt(100+u, 10)
			if u%2 == 0 { // the others only in their streams
				db.orders = append(db.orders, &seckill.Order{ID: 100 + u, UserID: u})
			}
		}
		loseShard(t, c, v, 1)
		want[1] = map[string]string{} // its stream went with it
		for _, o := range db.orders {
			if seckill.HomeShard(o.UserID, v.ShardCount()) == 1 {
				want[1][strconv.FormatInt(o.UserID, 10)] = strconv.FormatInt(o.ID, 10)
			}
		}
		var once sync.Once
		unloaded := false
		db.onPage = func(int) {
			once.Do(func() {
				if err := c.Unload(ctx, v.ID); err != nil {
					t.Error(err)
				}
				unloaded = true
			})
		}
		if res, err := c.Rebuild(ctx, v, db.read); err != nil || !res.Done {
			t.Fatalf("Rebuild = %+v, %v; want done", res, err)
		}
		if !unloaded {
			t.Fatal("the rebuild read no page of orders")
		}
		checkInvariant(t, c, v)
		for i := range v.ShardCount() {
			if diff := cmp.Diff(want[i], buyersOf(t, c, v, i), cmpEmptyMap); diff != "" {
				t.Errorf("shard %d's buyers (-want +rebuilt):\n%s", i, diff)
			}
		}
	})
}
