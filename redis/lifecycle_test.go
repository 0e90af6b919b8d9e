package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// inParallel runs f(0..n-1) on workers goroutines, all started at once,
// and waits for them.
func inParallel(n, workers int, f func(i int)) {
	var next atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	close(start)
	wg.Wait()
}

// returnConcurrently has n goroutines return the unit of the user's order
// at once, and returns how many of them gave it back.
func returnConcurrently(t *testing.T, c *Client, v *seckill.Voucher, user, order int64, n int) int {
	t.Helper()
	var given atomic.Int64
	errs := make(chan error, n)
	inParallel(n, n, func(int) {
		ok, err := c.ReturnUnit(context.Background(), v, user, order)
		if err != nil {
			errs <- err
		}
		if ok {
			given.Add(1)
		}
	})
	close(errs)
	for err := range errs {
		t.Errorf("ReturnUnit(user %d, order %d): %v", user, order, err)
	}
	return int(given.Load())
}

// mustReturn returns the unit of the user's order and fails the test
// unless the call reports want.
func mustReturn(t *testing.T, c *Client, v *seckill.Voucher, user, order int64, want bool) {
	t.Helper()
	got, err := c.ReturnUnit(context.Background(), v, user, order)
	if err != nil || got != want {
		t.Fatalf("ReturnUnit(voucher %d, user %d, order %d) = %v, %v; want %v", v.ID, user, order, got, err, want)
	}
}

// exists reports whether key exists.
func exists(t *testing.T, c *Client, key string) bool {
	t.Helper()
	n, err := do(t, c, "EXISTS", key).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// members returns a set's members, sorted; nil when it is absent or empty.
func members(t *testing.T, c *Client, key string) []string {
	t.Helper()
	m, err := do(t, c, "SMEMBERS", key).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		return nil
	}
	slices.Sort(m)
	return m
}

// duplicateOf admits user with a new order and returns the order id of
// the duplicate answer, failing the test on any other.
func duplicateOf(t *testing.T, c *Client, voucherID, user, order int64) int64 {
	t.Helper()
	err := c.Admit(context.Background(), seckill.Admission{VoucherID: voucherID, UserID: user, OrderID: order})
	return errKind(t, err, seckill.ErrDuplicateOrder).OrderID
}

// TestReturnUnitOnce: fifty callers return the unit of one order at once
// (the sweeper, the buyer and retries): exactly one gives it back, the
// stock rises by one, the slot is kept as cancelled, ver is bumped once and
// the buyer logged once for the copies of the buyers; later calls, and a
// call for an order the slot does not hold, change nothing.
func TestReturnUnitOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		v := onSale(1, 3)
		mustLoad(t, c, v)
		k := c.keys.voucher(1)
		mustAdmit(t, c, 1, 7, 1001)
		mustAdmit(t, c, 1, 8, 1002)
		ver, _ := strconv.ParseInt(hash(t, c, k.Meta)["ver"], 10, 64)

		if got := returnConcurrently(t, c, v, 7, 1001, 50); got != 1 {
			t.Fatalf("%d of 50 concurrent returns of one order gave its unit back, want 1", got)
		}
		if got := stock(t, c, 1); got != 2 {
			t.Errorf("stock %d after the return, want 2 (3 less 2 admitted, 1 back)", got)
		}
		if diff := cmp.Diff(map[string]string{"8": "1002"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]string{"7": "1001"}, hash(t, c, k.Cancelled)); diff != "" {
			t.Errorf("cancelled (-want +got):\n%s", diff)
		}
		wantVer := strconv.FormatInt(ver+1, 10)
		if got := hash(t, c, k.Meta)["ver"]; got != wantVer {
			t.Errorf("ver %q, want %q (bumped once)", got, wantVer)
		}
		log, err := do(t, c, "LRANGE", k.Changes, "0", "-1").AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{wantVer + ":7"}, log); diff != "" {
			t.Errorf("changes (-want +got):\n%s", diff)
		}

		// What reconcile compares with the database's holding orders:
		// the cancelled slot is not a buyer.
		st, err := c.State(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Loaded || st.Remaining != 2 || st.Buyers != 1 {
			t.Errorf("State: loaded %v, remaining %d, buyers %d; want loaded, 2, 1 (the cancelled slot is no buyer)", st.Loaded, st.Remaining, st.Buyers)
		}

		mustReturn(t, c, v, 7, 1001, false)
		mustReturn(t, c, v, 8, 9999, false) // not the order the slot holds
		if got := stock(t, c, 1); got != 2 {
			t.Errorf("stock %d after returns that found nothing, want 2", got)
		}
		if got := hash(t, c, k.Buyers)["8"]; got != "1002" {
			t.Errorf("buyer 8's slot %q after a return of another order, want 1002", got)
		}
		if got := hash(t, c, k.Meta)["ver"]; got != wantVer {
			t.Errorf("ver %q after returns that found nothing, want %q", got, wantVer)
		}

		// A late count of persisted orders (count_persisted.lua) that
		// names the cancelled order does not make it hold a unit again.
		if err := c.CountPersisted(context.Background(), 1, []*seckill.Order{{ID: 1001, UserID: 7, VoucherID: 1}}); err != nil {
			t.Fatal(err)
		}
		if got := stock(t, c, 1); got != 2 || hash(t, c, k.Buyers)["7"] != "" {
			t.Errorf("after a count of the cancelled order: stock %d, buyer 7 %q; want 2, none", got, hash(t, c, k.Buyers)["7"])
		}
	})
}

// TestReturnUnitNoRebuy: by default a buyer whose order was cancelled
// cannot buy again: admission, as the stream and the queue modes run it,
// answers duplicate with the cancelled order, and the unit given back
// goes to another buyer.
func TestReturnUnitNoRebuy(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(1, 1)
		mustLoad(t, c, v)
		mustAdmit(t, c, 1, 7, 1001)
		mustReturn(t, c, v, 7, 1001, true)
		passHold(t, c, 1)

		if got := duplicateOf(t, c, 1, 7, 1002); got != 1001 {
			t.Errorf("the cancelled buyer's admission answers duplicate of %d, want the cancelled order 1001", got)
		}
		err := c.Reserve(ctx, seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1003})
		if got := errKind(t, err, seckill.ErrDuplicateOrder).OrderID; got != 1001 {
			t.Errorf("the cancelled buyer's reservation (queue mode) answers duplicate of %d, want 1001", got)
		}
		if got := stock(t, c, 1); got != 1 {
			t.Fatalf("stock %d after the cancelled buyer asked again, want 1: the unit is not theirs", got)
		}
		mustAdmit(t, c, 1, 8, 1004)
		if got := stock(t, c, 1); got != 0 {
			t.Errorf("stock %d after another buyer took the unit, want 0", got)
		}
		if got := duplicateOf(t, c, 1, 7, 1005); got != 1001 {
			t.Errorf("once sold out again, the cancelled buyer's admission answers duplicate of %d, want 1001", got)
		}
	})
}

// TestReturnUnitRebuy: a voucher with RebuyAfterCancel frees the slot and
// records the order returned, which admission ignores: its buyer buys
// again, and a late return of the first order finds the slot holding the
// second and gives nothing. The returned orders are one per cancelled
// order, however often each is returned.
func TestReturnUnitRebuy(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		v := onSale(1, 1)
		v.RebuyAfterCancel = true
		mustLoad(t, c, v)
		k := c.keys.voucher(1)
		mustAdmit(t, c, 1, 7, 1001)
		mustReturn(t, c, v, 7, 1001, true)
		if exists(t, c, k.Cancelled) {
			t.Errorf("cancelled %v for a voucher that lets buyers buy again, want none", hash(t, c, k.Cancelled))
		}
		if diff := cmp.Diff([]string{"1001"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned (-want +got):\n%s", diff)
		}
		passHold(t, c, 1)
		mustAdmit(t, c, 1, 7, 1002)
		mustReturn(t, c, v, 7, 1001, false)
		if got := stock(t, c, 1); got != 0 {
			t.Errorf("stock %d after the buyer bought again and a late return, want 0", got)
		}
		if got := hash(t, c, k.Buyers)["7"]; got != "1002" {
			t.Errorf("buyer 7's slot %q, want the second order 1002", got)
		}

		// The buyer cancels again, and again buys: each order returned
		// twice, recorded once.
		for order := int64(1002); order < 1005; order++ {
			mustReturn(t, c, v, 7, order, true)
			mustReturn(t, c, v, 7, order, false)
			passHold(t, c, 1)
			mustAdmit(t, c, 1, 7, order+1)
		}
		if diff := cmp.Diff([]string{"1001", "1002", "1003", "1004"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned after four cancellations (-want +got):\n%s", diff)
		}
	})
}

// TestReturnUnitHolds: a unit given back to a sold-out voucher is admitted
// to nobody for Hold, by Redis's clock (release.lua); one given back while
// stock is left is not held. A shard marked drained is held and drained no
// more, as transfer_give.lua does. A copy of the buyers reading the
// changes since it was true learns that the buyer's slot holds their
// cancelled order (the voucher lets no one buy again): admission's answer
// to them.
func TestReturnUnitHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	arm(t, c)
	begin := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	c.server.SetTime(begin)
	v := &seckill.Voucher{ID: 1, Stock: 2, InitialStock: 2, BeginTime: begin, EndTime: begin.Add(time.Hour)}
	mustLoad(t, c, v)
	k := c.keys.voucher(1)
	mustAdmit(t, c, 1, 7, 1001)
	mustAdmit(t, c, 1, 8, 1002)
	copied, err := c.ReadChanges(ctx, seckill.Shard{VoucherID: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}

	mustReturn(t, c, v, 7, 1001, true)
	if got, want := hash(t, c, k.Meta)["held"], strconv.FormatInt(begin.Add(Hold).UnixMilli(), 10); got != want {
		t.Errorf("held %q after a unit went back to a sold-out voucher, want %s (now + Hold)", got, want)
	}
	held, err := c.admitOnce(ctx, seckill.Admission{VoucherID: 1, UserID: 9, OrderID: 1003}, true)
	if held <= 0 || !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("admission during the hold = %v, %v; want held, ErrUnavailable", held, err)
	}
	ch, err := c.ReadChanges(ctx, seckill.Shard{VoucherID: 1}, &copied.Version)
	if err != nil {
		t.Fatal(err)
	}
	if order, named := ch.Slots[7]; !ch.Complete || !named || order != 1001 {
		t.Errorf("changes since the copy: complete %v, slots %v; want complete, buyer 7 holding their cancelled order 1001", ch.Complete, ch.Slots)
	}
	c.server.SetTime(begin.Add(Hold))
	mustAdmit(t, c, 1, 9, 1003)

	// Stock left: no hold.
	v2 := &seckill.Voucher{ID: 2, Stock: 3, InitialStock: 3, BeginTime: begin, EndTime: begin.Add(time.Hour)}
	mustLoad(t, c, v2)
	mustAdmit(t, c, 2, 7, 2001)
	mustReturn(t, c, v2, 7, 2001, true)
	if m := hash(t, c, c.keys.voucher(2).Meta); m["held"] != "" {
		t.Errorf("meta %v after a unit went back with stock left, want no hold", m)
	}

	// A drained shard with stock (a unit given back after the sell-out
	// already): held, and drained no more.
	v3 := &seckill.Voucher{ID: 3, Stock: 8, InitialStock: 8, BeginTime: begin, EndTime: begin.Add(time.Hour), Shards: 2, Generation: 4}
	loadShards(t, c, v3)
	home := shardKeysOf(t, c, v3, seckill.HomeShard(7, 2))
	if code := admitShard(t, c, v3, 7, 3001); code != 0 {
		t.Fatalf("admit user 7 on its home shard: code %d", code)
	}
	do(t, c, "HSET", home.Meta, "drained", "1")
	mustReturn(t, c, v3, 7, 3001, true)
	m := hash(t, c, home.Meta)
	if m["drained"] != "" || m["held"] != strconv.FormatInt(begin.Add(2*Hold).UnixMilli(), 10) { // the clock is at begin + Hold
		t.Errorf("drained shard's meta after a unit went back: %v, want held until now + Hold, drained gone", m)
	}
}

// TestReturnUnitSharded: each unit goes back to its buyer's home shard,
// and only there, and the shards' invariant (stock + buyers + in flight =
// initial stock) holds, with returns racing (each order returned twice at
// once).
func TestReturnUnitSharded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		v := learntSharded(c, 5, 40, 4)
		loadShards(t, c, v)
		var admitted []int64
		for u := int64(1); u <= 30; u++ {
			if admitShard(t, c, v, u, 500+u) == 0 {
				admitted = append(admitted, u)
			}
		}
		before := checkInvariant(t, c, v)
		var back []int64
		for i, u := range admitted {
			if i%2 == 0 {
				back = append(back, u)
			}
		}
		var given atomic.Int64
		inParallel(2*len(back), 2*len(back), func(i int) {
			u := back[i/2]
			ok, err := c.ReturnUnit(context.Background(), v, u, 500+u)
			if err != nil {
				t.Errorf("ReturnUnit(user %d): %v", u, err)
			}
			if ok {
				given.Add(1)
			}
		})
		if got := given.Load(); got != int64(len(back)) {
			t.Errorf("%d units given back by %d returns of %d orders, want %d", got, 2*len(back), len(back), len(back))
		}
		after := checkInvariant(t, c, v)
		perShard := make([]int64, v.ShardCount())
		for _, u := range back {
			perShard[seckill.HomeShard(u, v.ShardCount())]++
		}
		for i := range v.ShardCount() {
			b, a := before.Shards[i], after.Shards[i]
			if a.Stock-b.Stock != perShard[i] || b.Buyers-a.Buyers != perShard[i] {
				t.Errorf("shard %d: stock %d -> %d, buyers %d -> %d; want %d units moved from buyers to stock",
					i, b.Stock, a.Stock, b.Buyers, a.Buyers, perShard[i])
			}
			want := map[string]string{}
			for _, u := range back {
				if seckill.HomeShard(u, v.ShardCount()) == i {
					want[strconv.FormatInt(u, 10)] = strconv.FormatInt(500+u, 10)
				}
			}
			if diff := cmp.Diff(want, hash(t, c, shardKeysOf(t, c, v, i).Cancelled), cmpEmpty); diff != "" {
				t.Errorf("shard %d's cancelled (-want +got):\n%s", i, diff)
			}
		}
		for _, u := range back {
			k := shardKeysOf(t, c, v, seckill.HomeShard(u, v.ShardCount()))
			if code, val, err := admitOnce(c, k, v, u, 900+u); err != nil || code != admitDuplicate || val != strconv.FormatInt(500+u, 10) {
				t.Errorf("admit cancelled user %d on its home shard = %d %q %v, want duplicate of %d", u, code, val, err, 500+u)
			}
		}
	})
}

// cmpEmpty makes an empty map equal a nil one.
var cmpEmpty = cmp.Comparer(func(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
})

// TestRebuildStagesCancelled: a rebuild from the database's orders stages
// those that hold a unit (created, paid) as buyers and the cancelled ones
// (cancelled, refunding, refunded) as cancelled slots, which hold no unit:
// the stock is the initial stock less the holders. A cancelled order's
// entry still in the stream is not staged as a buyer; a slot an unload
// kept for an order cancelled since (its unit not yet given back: a crash)
// is freed, its unit back once; an order whose page was read before its
// cancellation, returned while the rebuild runs, is not staged.
func TestRebuildStagesCancelled(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(9, 10)
		k := c.keys.voucher(9)
		db := &database{orders: []*seckill.Order{
			{ID: 11, UserID: 1, Status: seckill.OrderCreated},
			{ID: 12, UserID: 2, Status: seckill.OrderPaid},
			{ID: 13, UserID: 3, Status: seckill.OrderCancelled},
			{ID: 14, UserID: 4, Status: seckill.OrderRefunding},
			{ID: 15, UserID: 5, Status: seckill.OrderRefunded},
			{ID: 16, UserID: 6, Status: seckill.OrderCreated},
		}}
		queue(t, c, 9, 3, 13) // the cancelled order's entry, acknowledged, not yet trimmed
		queue(t, c, 9, 7, 17) // admitted, not in the database yet
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 6 {
			t.Errorf("Rebuild = %+v; want done, 6 left (10 less 4 holding)", res)
		}
		if diff := cmp.Diff(map[string]string{"1": "11", "2": "12", "6": "16", "7": "17"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]string{"3": "13", "4": "14", "5": "15"}, hash(t, c, k.Cancelled)); diff != "" {
			t.Errorf("cancelled (-want +got):\n%s", diff)
		}
		if got := duplicateOf(t, c, 9, 4, 99); got != 14 {
			t.Errorf("a cancelled buyer's admission after the rebuild answers duplicate of %d, want 14", got)
		}

		// The unit of 16 was not given back before a crash; the database
		// has it cancelled; the unload kept the buyers.
		db.orders[5].Status = seckill.OrderCancelled
		if err := c.UnloadStock(ctx, 9); err != nil {
			t.Fatal(err)
		}
		if !exists(t, c, k.Cancelled) {
			t.Error("UnloadStock deleted the cancelled slots; it keeps them with the buyers")
		}
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 7 {
			t.Errorf("Rebuild after the unit of 16 was lost = %+v; want done, 7 left", res)
		}
		if got := hash(t, c, k.Cancelled)["6"]; got != "16" || hash(t, c, k.Buyers)["6"] != "" {
			t.Errorf("user 6: cancelled %q, buyers %q; want cancelled 16, no buyer", got, hash(t, c, k.Buyers)["6"])
		}
		mustReturn(t, c, v, 6, 16, false) // the rebuild counted it

		// Order 11's page is read, then it is cancelled and its unit
		// returned while the rebuild stages: not staged as a buyer.
		if err := c.Unload(ctx, 9); err != nil {
			t.Fatal(err)
		}
		if exists(t, c, k.Cancelled) || exists(t, c, k.Buyers) {
			t.Error("Unload kept the buyers or the cancelled slots")
		}
		read := func(ctx context.Context, id, after int64, limit int) ([]*seckill.Order, error) {
			page, err := db.read(ctx, id, after, limit)
			if after == 0 {
				mustReturn(t, c, v, 1, 11, false) // not staged yet: marked for the rebuild
			}
			return page, err
		}
		if res, err := c.Rebuild(ctx, v, read); err != nil || !res.Done || res.Remaining != 8 {
			t.Errorf("Rebuild with order 11 cancelled mid-way = %+v, %v; want done, 8 left (2 and 7 hold)", res, err)
		}
		if diff := cmp.Diff(map[string]string{"2": "12", "7": "17"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers after a cancellation mid-rebuild (-want +got):\n%s", diff)
		}
		if got := hash(t, c, k.Cancelled)["1"]; got != "11" {
			t.Errorf("user 1 cancelled %q, want 11", got)
		}

		// A voucher whose buyers may buy again keeps no cancelled slots.
		rv := onSale(10, 10)
		rv.RebuyAfterCancel = true
		rdb := &database{orders: []*seckill.Order{
			{ID: 21, UserID: 1, Status: seckill.OrderCreated},
			{ID: 23, UserID: 3, Status: seckill.OrderCancelled},
		}}
		if res := rebuild(t, c, rv, rdb); !res.Done || res.Remaining != 9 {
			t.Errorf("Rebuild of a rebuy voucher = %+v; want done, 9 left", res)
		}
		if exists(t, c, c.keys.voucher(10).Cancelled) {
			t.Error("a rebuy voucher's rebuild staged cancelled slots")
		}
		if diff := cmp.Diff([]string{"23"}, members(t, c, c.keys.voucher(10).Returned)); diff != "" {
			t.Errorf("a rebuy voucher's returned orders after its rebuild (-want +got):\n%s", diff)
		}
		passHold(t, c, 10)
		mustAdmit(t, c, 10, 3, 24)
	})
}

// TestRebuildShardsStagesCancelled: the shards of a sharded voucher are
// rebuilt each with its own buyers' cancelled orders, which hold no unit:
// the invariant holds; a cancelled buyer is answered duplicate on their
// home shard, or, if the voucher lets buyers buy again, the order is
// recorded returned there and its buyer admitted.
func TestRebuildShardsStagesCancelled(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		for id, rebuy := range map[int64]bool{70: false, 71: true} {
			ctx := context.Background()
			v := learntSharded(c, id, 50, 5)
			v.RebuyAfterCancel = rebuy
			loadShards(t, c, v)
			db := &database{}
			var holders int64
			for u := int64(1); u <= 30; u++ {
				o := &seckill.Order{ID: 100 + u, UserID: u, Status: seckill.OrderCreated}
				if u%3 == 0 {
					o.Status = seckill.OrderCancelled
				} else {
					holders++
				}
				db.orders = append(db.orders, o)
			}
			if err := c.Unload(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			if res, err := c.Rebuild(ctx, v, db.read); err != nil || !res.Done || res.Remaining != v.InitialStock-holders {
				t.Fatalf("Rebuild (rebuy %v) = %+v, %v; want done, %d left", rebuy, res, err, v.InitialStock-holders)
			}
			checkInvariant(t, c, v)
			for i := range v.ShardCount() {
				buyers, cancelled := map[string]string{}, map[string]string{}
				var returned []string
				for _, o := range db.orders {
					if seckill.HomeShard(o.UserID, v.ShardCount()) != i {
						continue
					}
					switch {
					case o.Status != seckill.OrderCancelled:
						buyers[strconv.FormatInt(o.UserID, 10)] = strconv.FormatInt(o.ID, 10)
					case rebuy:
						returned = append(returned, strconv.FormatInt(o.ID, 10))
					default:
						cancelled[strconv.FormatInt(o.UserID, 10)] = strconv.FormatInt(o.ID, 10)
					}
				}
				slices.Sort(returned)
				k := shardKeysOf(t, c, v, i)
				if diff := cmp.Diff(buyers, hash(t, c, k.Buyers), cmpEmpty); diff != "" {
					t.Errorf("rebuy %v: shard %d's buyers (-want +got):\n%s", rebuy, i, diff)
				}
				if diff := cmp.Diff(cancelled, hash(t, c, k.Cancelled), cmpEmpty); diff != "" {
					t.Errorf("rebuy %v: shard %d's cancelled (-want +got):\n%s", rebuy, i, diff)
				}
				if diff := cmp.Diff(returned, members(t, c, k.Returned)); diff != "" {
					t.Errorf("rebuy %v: shard %d's returned (-want +got):\n%s", rebuy, i, diff)
				}
			}
			want := int64(admitDuplicate)
			if rebuy {
				want = admitted
			}
			for u := int64(3); u <= 30; u += 3 {
				if code := admitShard(t, c, v, u, 900+u); code != want {
					t.Errorf("rebuy %v: admit cancelled user %d: code %d, want %d", rebuy, u, code, want)
				}
			}
			checkInvariant(t, c, v)
		}
	})
}

// TestCancelledLivesWithBuyers: a voucher's records of cancelled orders
// (the cancelled slots without a rebuy, the returned orders with one) go
// where its buyers go: UnloadStock keeps them, Unload deletes them (the
// rebuild stages them again from the database), a load or a rebuild of
// another generation replaces them, a drop past the retention deletes
// them; a return for another generation, or after the drop, writes none.
func TestCancelledLivesWithBuyers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		rebuy  bool
		record func(voucherKeys) string
	}{
		{"cancelled slots", false, func(k voucherKeys) string { return k.Cancelled }},
		{"returned orders", true, func(k voucherKeys) string { return k.Returned }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, c *Client) {
				ctx := context.Background()
				onSaleAs := func(id int64) *seckill.Voucher {
					v := onSale(id, 5)
					v.RebuyAfterCancel = tc.rebuy
					return v
				}
				recorded := func(id int64) bool { return exists(t, c, tc.record(c.keys.voucher(id))) }
				v := onSaleAs(1)
				mustLoad(t, c, v)
				mustAdmit(t, c, 1, 7, 1001)
				mustAdmit(t, c, 1, 8, 1002)
				other := *v
				other.Generation = 5
				mustReturn(t, c, &other, 7, 1001, false)
				if recorded(1) || stock(t, c, 1) != 3 {
					t.Fatal("a return for another generation changed the voucher")
				}
				mustReturn(t, c, v, 7, 1001, true)
				if err := c.UnloadStock(ctx, 1); err != nil {
					t.Fatal(err)
				}
				if !recorded(1) {
					t.Errorf("UnloadStock deleted the %s; it keeps them with the buyers", tc.name)
				}
				if err := c.Unload(ctx, 1); err != nil {
					t.Fatal(err)
				}
				if recorded(1) {
					t.Errorf("Unload kept the %s", tc.name)
				}

				v2 := onSaleAs(2)
				v2.Generation = 1
				mustLoad(t, c, v2)
				mustAdmit2 := func(user, order int64) {
					t.Helper()
					if err := c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: user, OrderID: order, Generation: v2.Generation}); err != nil {
						t.Fatal(err)
					}
				}
				mustAdmit2(7, 2001)
				mustReturn(t, c, v2, 7, 2001, true)
				v2.Generation = 2
				if replaced, err := c.LoadVoucher(ctx, v2); err != nil || !replaced {
					t.Fatalf("LoadVoucher(another generation) = %v, %v; want replaced", replaced, err)
				}
				if recorded(2) {
					t.Errorf("a load of another generation kept the %s", tc.name)
				}
				mustAdmit2(7, 2002)
				mustReturn(t, c, v2, 7, 2002, true)
				v2.Generation = 3
				if res, err := c.Rebuild(ctx, v2, (&database{}).read); err != nil || !res.Done || !res.Replaced {
					t.Fatalf("Rebuild(another generation) = %+v, %v; want done, replaced", res, err)
				}
				if recorded(2) {
					t.Errorf("a rebuild of another generation kept the %s", tc.name)
				}

				v3 := onSaleAs(3)
				mustLoad(t, c, v3)
				mustAdmit(t, c, 3, 7, 3001)
				read := readOrders(t, c, 3, "a", 10)
				ack(t, c, 3, read[0].EntryID)
				mustReturn(t, c, v3, 7, 3001, true)
				if dropped, err := c.DropVoucher(ctx, 3); err != nil || !dropped {
					t.Fatalf("DropVoucher = %v, %v; want dropped", dropped, err)
				}
				if recorded(3) {
					t.Errorf("DropVoucher kept the %s", tc.name)
				}
				mustReturn(t, c, v3, 7, 3001, false)
				if recorded(3) {
					t.Errorf("a return after the drop made the %s again", tc.name)
				}
			})
		})
	}
}

// TestReturnUnitSaleScale: 2,000 units sold to 2,000 buyers; 700 of them
// cancelled, their units returned concurrently, half of them twice; 700
// new buyers buy them while the cancelled buyers ask again: every unit
// returned once, the 700 new buyers admitted, the stock 0, no cancelled
// buyer admitted again.
func TestReturnUnitSaleScale(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const units, cancelled, workers = 2000, 700, 32
		v := onSale(1, units)
		mustLoad(t, c, v)
		k := c.keys.voucher(1)
		var failed atomic.Int64
		inParallel(units, workers, func(i int) {
			u := int64(i + 1)
			if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: 10_000 + u}); err != nil {
				failed.Add(1)
				t.Errorf("admit %d: %v", u, err)
			}
		})
		if failed.Load() > 0 || stock(t, c, 1) != 0 {
			t.Fatalf("%d admissions failed, stock %d; want none, 0", failed.Load(), stock(t, c, 1))
		}

		// Users 1..700 cancel; the even ones are returned twice.
		var calls []int64
		for u := int64(1); u <= cancelled; u++ {
			calls = append(calls, u)
			if u%2 == 0 {
				calls = append(calls, u)
			}
		}
		rand.Shuffle(len(calls), func(i, j int) { calls[i], calls[j] = calls[j], calls[i] })
		var given atomic.Int64
		inParallel(len(calls), workers, func(i int) {
			u := calls[i]
			ok, err := c.ReturnUnit(ctx, v, u, 10_000+u)
			if err != nil {
				t.Errorf("ReturnUnit(%d): %v", u, err)
			}
			if ok {
				given.Add(1)
			}
		})
		if got := given.Load(); got != cancelled || stock(t, c, 1) != cancelled {
			t.Fatalf("%d of %d returns gave a unit back, stock %d; want %d, %d", got, len(calls), stock(t, c, 1), cancelled, cancelled)
		}

		// 700 new buyers and the 700 cancelled ones at once.
		var newAdmitted, again atomic.Int64
		inParallel(2*cancelled, workers, func(i int) {
			if i%2 == 0 {
				u := int64(5000 + i/2)
				if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: 20_000 + u}); err != nil {
					t.Errorf("admit new buyer %d: %v", u, err)
					return
				}
				newAdmitted.Add(1)
				return
			}
			u := int64(i/2 + 1)
			err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: u, OrderID: 30_000 + u})
			var e *seckill.Error
			if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != 10_000+u {
				again.Add(1)
				t.Errorf("cancelled buyer %d asking again: %v, want duplicate of %d", u, err, 10_000+u)
			}
		})
		if newAdmitted.Load() != cancelled || again.Load() != 0 {
			t.Errorf("%d new buyers admitted, %d cancelled buyers not answered duplicate; want %d, 0", newAdmitted.Load(), again.Load(), cancelled)
		}
		if got := stock(t, c, 1); got != 0 {
			t.Errorf("stock %d at the end, want 0", got)
		}
		for key, want := range map[string]int64{k.Buyers: units, k.Cancelled: cancelled} {
			if n, err := do(t, c, "HLEN", key).AsInt64(); err != nil || n != want {
				t.Errorf("HLEN %s = %d, %v; want %d", key, n, err, want)
			}
		}
		buyers := hash(t, c, k.Buyers)
		for u := int64(1); u <= cancelled; u++ {
			if o, ok := buyers[strconv.FormatInt(u, 10)]; ok {
				t.Errorf("cancelled buyer %d holds order %s again", u, o)
			}
		}
		errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 9999, OrderID: 99_999}), seckill.ErrSoldOut)
	})
}

// TestRebuildRebuyReturnedNotRestaged: on a voucher whose buyers may buy
// again, an order admitted (stream mode), read and acknowledged by a
// worker, then cancelled and its unit returned, is not staged again as its
// buyer's by a rebuild while its acknowledged entry is still in the stream
// (trimmed only every ReclaimEvery): the database lists it cancelled and
// the rebuild records it returned. Before, its unit was counted held (an
// undersell until a repair) and its buyer answered duplicate of the
// cancelled order; when the buyer had bought again, the old order took
// the new one's slot. Found by review.
func TestRebuildRebuyReturnedNotRestaged(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(31, 10)
		v.RebuyAfterCancel = true
		mustLoad(t, c, v)
		k := c.keys.voucher(31)
		mustAdmit(t, c, 31, 3, 301)
		read := readOrders(t, c, 31, "w", 10)
		ack(t, c, 31, read[0].EntryID)
		// Cancelled in the database (its slot NULL, listed cancelled),
		// its unit returned to Redis.
		mustReturn(t, c, v, 3, 301, true)
		db := &database{orders: []*seckill.Order{{ID: 301, UserID: 3, Status: seckill.OrderCancelled}}}
		if err := c.Unload(ctx, 31); err != nil {
			t.Fatal(err)
		}
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 10 {
			t.Errorf("Rebuild = %+v; want done, 10 left (the cancelled order holds no unit)", res)
		}
		if n := len(entries(t, c, k.Orders)); n != 1 {
			t.Fatalf("%d entries in the stream, want the acknowledged one", n)
		}
		if diff := cmp.Diff(map[string]string{}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got): the cancelled order is staged as a buyer:\n%s", diff)
		}
		if diff := cmp.Diff([]string{"301"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned (-want +got):\n%s", diff)
		}

		// The buyer buys again; the next rebuild finds both entries, and
		// the new order is the buyer's.
		mustAdmit(t, c, 31, 3, 302)
		if err := c.Unload(ctx, 31); err != nil {
			t.Fatal(err)
		}
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 9 {
			t.Errorf("Rebuild after the buyer bought again = %+v; want done, 9 left", res)
		}
		if diff := cmp.Diff(map[string]string{"3": "302"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers after the buyer bought again (-want +got):\n%s", diff)
		}
	})
}

// TestRebuildRebuyCancelledMidRebuild: on a voucher whose buyers may buy
// again, an order its rebuild read created, then cancelled and its unit
// returned before its page is staged, is not staged as its buyer's (the
// return records it returned, as it marks a no-rebuy buyer's slot
// cancelled): the rebuild leaves its unit in the stock, and its buyer buys
// again. Found by review.
func TestRebuildRebuyCancelledMidRebuild(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(32, 10)
		v.RebuyAfterCancel = true
		k := c.keys.voucher(32)
		db := &database{orders: []*seckill.Order{{ID: 321, UserID: 1, Status: seckill.OrderCreated}}}
		read := func(ctx context.Context, id, after int64, limit int) ([]*seckill.Order, error) {
			page, err := db.read(ctx, id, after, limit)
			if after == 0 {
				mustReturn(t, c, v, 1, 321, false) // not staged yet: recorded for the rebuild
			}
			return page, err
		}
		if res, err := c.Rebuild(ctx, v, read); err != nil || !res.Done || res.Remaining != 10 {
			t.Errorf("Rebuild with order 321 cancelled mid-way = %+v, %v; want done, 10 left", res, err)
		}
		if diff := cmp.Diff(map[string]string{}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"321"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned (-want +got):\n%s", diff)
		}
		passHold(t, c, 32)
		mustAdmit(t, c, 32, 1, 322)
	})
}

// TestRebuildRebuyStagesReturned: a rebuild of a voucher whose buyers may
// buy again, from database pages that list its cancelled orders
// (cancelled, refunding, refunded), records them returned, neither as
// buyers nor as cancelled slots: the stock counts their units as left,
// their buyers buy again, and a buyer's new order is theirs. A slot an
// unload kept for an order cancelled since (its unit not given back before
// a crash) is freed, its unit back once.
func TestRebuildRebuyStagesReturned(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(12, 10)
		v.RebuyAfterCancel = true
		k := c.keys.voucher(12)
		db := &database{orders: []*seckill.Order{
			{ID: 121, UserID: 1, Status: seckill.OrderCreated},
			{ID: 122, UserID: 2, Status: seckill.OrderCancelled},
			{ID: 123, UserID: 3, Status: seckill.OrderRefunding},
			{ID: 124, UserID: 4, Status: seckill.OrderRefunded},
			{ID: 125, UserID: 2, Status: seckill.OrderPaid}, // user 2 bought again
			{ID: 126, UserID: 6, Status: seckill.OrderCreated},
		}}
		queue(t, c, 12, 2, 122) // the cancelled order's entry, acknowledged, not yet trimmed
		queue(t, c, 12, 7, 127) // admitted, not in the database yet
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 6 {
			t.Errorf("Rebuild = %+v; want done, 6 left (10 less 4 holding)", res)
		}
		if diff := cmp.Diff(map[string]string{"1": "121", "2": "125", "6": "126", "7": "127"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"122", "123", "124"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned (-want +got):\n%s", diff)
		}
		if exists(t, c, k.Cancelled) {
			t.Errorf("cancelled %v for a voucher that lets buyers buy again, want none", hash(t, c, k.Cancelled))
		}
		mustAdmit(t, c, 12, 3, 128)

		// The unit of 126 was not given back before a crash; the database
		// has it cancelled; the unload kept the buyers.
		db.orders[5].Status = seckill.OrderCancelled
		if err := c.UnloadStock(ctx, 12); err != nil {
			t.Fatal(err)
		}
		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 6 {
			t.Errorf("Rebuild after the unit of 126 was lost = %+v; want done, 6 left (121, 125, 127, 128 hold)", res)
		}
		if diff := cmp.Diff(map[string]string{"1": "121", "2": "125", "3": "128", "7": "127"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers after the rebuild that kept them (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"122", "123", "124", "126"}, members(t, c, k.Returned)); diff != "" {
			t.Errorf("returned after the rebuild that kept them (-want +got):\n%s", diff)
		}
		mustReturn(t, c, v, 6, 126, false) // the rebuild counted it
		mustAdmit(t, c, 12, 6, 129)
		if got := stock(t, c, 12); got != 5 {
			t.Errorf("stock %d at the end, want 5", got)
		}
	})
}

// TestCountPersistedSkipsReturned: a second delivery's ack finds the entry
// acknowledged already (by another consumer), so the worker counts the
// order as persisted (CountPersisted); on a voucher whose buyers may buy
// again, that order was cancelled and its unit returned meanwhile: it is
// not counted, and its unit stays on sale. An order Redis does not hold is
// counted still. Found by review.
func TestCountPersistedSkipsReturned(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(33, 10)
		v.RebuyAfterCancel = true
		mustLoad(t, c, v)
		k := c.keys.voucher(33)
		mustAdmit(t, c, 33, 4, 401)
		mustReturn(t, c, v, 4, 401, true)
		if err := c.CountPersisted(ctx, 33, []*seckill.Order{
			{ID: 401, UserID: 4, VoucherID: 33},
			{ID: 402, UserID: 5, VoucherID: 33},
		}); err != nil {
			t.Fatal(err)
		}
		if got := stock(t, c, 33); got != 9 {
			t.Errorf("stock %d, want 9: the returned unit taken again, or the unknown order not counted", got)
		}
		if diff := cmp.Diff(map[string]string{"5": "402"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		passHold(t, c, 33)
		mustAdmit(t, c, 33, 4, 403)
	})
}

// TestCountPersistedSkipsCancelledUnknown: an order persisted after Redis
// lost data and the voucher was rebuilt without it is cancelled before
// its count reaches Redis: the return finds no slot, gives nothing, and
// records the order as cancelled (no rebuy) or returned (rebuy), so that
// the late count (count_persisted.lua) does not take its unit. Before, a
// voucher without rebuy lost that unit until a repair.
func TestCountPersistedSkipsCancelledUnknown(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		for id, rebuy := range map[int64]bool{41: false, 42: true} {
			v := onSale(id, 10)
			v.RebuyAfterCancel = rebuy
			mustLoad(t, c, v)
			k := c.keys.voucher(id)
			mustReturn(t, c, v, 4, 401, false)
			if err := c.CountPersisted(ctx, id, []*seckill.Order{{ID: 401, UserID: 4, VoucherID: id}}); err != nil {
				t.Fatal(err)
			}
			if got := stock(t, c, id); got != 10 || len(hash(t, c, k.Buyers)) != 0 {
				t.Errorf("rebuy %v: stock %d, buyers %v after the count of a cancelled order; want 10, none", rebuy, got, hash(t, c, k.Buyers))
			}
			if rebuy {
				mustAdmit(t, c, id, 4, 402)
			} else if got := duplicateOf(t, c, id, 4, 402); got != 401 {
				t.Errorf("the cancelled buyer's admission answers duplicate of %d, want 401", got)
			}
		}
	})
}

// TestCountAfterAnotherSlotReleased: a no-rebuy order X written after
// Redis was rebuilt without it, its buyer admitted again (Y); X is
// cancelled while the slot holds Y (so its return gives nothing back), Y
// fails at the database and is released; then X's late count arrives. X
// must not take a unit: its return marked it cancelled whatever the slot
// held (found by the second review).
func TestCountAfterAnotherSlotReleased(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(61, 10)
		mustLoad(t, c, v)
		mustAdmit(t, c, 61, 4, 402) // Y
		mustReturn(t, c, v, 4, 401, false)
		if ok, err := c.Release(ctx, 61, 4, 402); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		if err := c.CountPersisted(ctx, 61, []*seckill.Order{{ID: 401, UserID: 4, VoucherID: 61}}); err != nil {
			t.Fatal(err)
		}
		k := c.keys.voucher(61)
		if got := stock(t, c, 61); got != 10 {
			t.Errorf("stock %d, buyers %v after the late count of cancelled order 401; want 10", got, hash(t, c, k.Buyers))
		}
	})
}

// TestReassignToCancelled: a buyer admitted twice (Y) whose order in the
// database (X) the worker read as created, then cancelled before the slot
// is handed to it (the return found Y in the slot and gave nothing back).
// Handing the slot to X would keep Y's unit for a cancelled order: the
// unit is given back and the slot freed instead, by Reassign and by a
// dead letter that names X (found by the second review).
func TestReassignToCancelled(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		for id, rebuy := range map[int64]bool{62: false, 63: true} {
			v := onSale(id, 10)
			v.RebuyAfterCancel = rebuy
			mustLoad(t, c, v)
			mustAdmit(t, c, id, 5, 502) // Y
			mustReturn(t, c, v, 5, 501, false)
			if _, err := c.Reassign(ctx, id, 5, 502, 501); err != nil {
				t.Fatal(err)
			}
			k := c.keys.voucher(id)
			if got, buyers := stock(t, c, id), hash(t, c, k.Buyers); got != 10 || len(buyers) != 0 {
				t.Errorf("rebuy %v: stock %d, buyers %v: cancelled order 501 holds a unit in Redis; want 10 and none", rebuy, got, buyers)
			}
		}
		// The same through a dead letter of Y that keeps its unit for X.
		v := onSale(64, 10)
		mustLoad(t, c, v)
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 64, UserID: 6, OrderID: 602}); err != nil {
			t.Fatal(err)
		}
		mustReturn(t, c, v, 6, 601, false)
		read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 64}, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 1 {
			t.Fatalf("ReadOrders = %d, %v; want Y's message", len(read), err)
		}
		if moved, err := c.DeadLetter(ctx, read[0], seckill.DeadLetter{Reason: "buyer already has order 601", BuyerOrder: 601, KeepStock: true}); err != nil || !moved {
			t.Fatalf("DeadLetter = %v, %v", moved, err)
		}
		k := c.keys.voucher(64)
		if got, buyers := stock(t, c, 64), hash(t, c, k.Buyers); got != 10 || len(buyers) != 0 {
			t.Errorf("dead letter naming a cancelled order: stock %d, buyers %v; want 10 and none", got, buyers)
		}
	})
}
