package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// sharded returns a voucher on sale with stock split over shards, its tags
// placed as creation places them (on a Cluster, distinct masters).
func sharded(t *testing.T, c *Client, id, stock int64, shards int) *seckill.Voucher {
	t.Helper()
	v := onSale(id, stock)
	v.Shards, v.Generation = shards, time.Now().UnixNano()+id
	tags, err := c.PlaceShards(context.Background(), v.Generation, shards)
	if err != nil {
		t.Fatal(err)
	}
	v.ShardTags = tags
	return v
}

// observedShards are a sharded voucher's figures in Redis: per shard, its
// stock and buyers; and the units in flight between shards (taken by a
// donor, not received: the receiver's xin has no number for them).
type observedShards struct {
	stock, buyers []int64
	inFlight      int64
}

// sum is the invariant's left side: Σ (stock + buyers) + in flight.
func (s observedShards) sum() int64 {
	n := s.inFlight
	for i := range s.stock {
		n += s.stock[i] + s.buyers[i]
	}
	return n
}

func observeShards(t *testing.T, c *Client, v *seckill.Voucher) observedShards {
	t.Helper()
	l := c.Learn(v)
	var s observedShards
	for i, k := range l.shards {
		s.stock = append(s.stock, max(0, stockOf(t, c, k)))
		n, err := do(t, c, "HLEN", k.Buyers).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		s.buyers = append(s.buyers, n)
		for id, rec := range hash(t, c, k.Xout) {
			tr, err := parseTransfer(i, id, rec)
			if err != nil {
				t.Fatal(err)
			}
			in, err := do(t, c, "HGET", l.shards[tr.to].Xin, id).ToString()
			if _, nerr := strconv.Atoi(in); rueidis.IsRedisNil(err) || nerr != nil {
				s.inFlight += tr.n
			}
		}
	}
	return s
}

func stockOf(t *testing.T, c *Client, k *voucherKeys) int64 {
	t.Helper()
	n, err := do(t, c, "GET", k.Stock).AsInt64()
	if rueidis.IsRedisNil(err) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkInvariant fails the test unless Σ (stock + buyers) + in flight is
// the voucher's initial stock.
func checkObservedInvariant(t *testing.T, c *Client, v *seckill.Voucher, when string) observedShards {
	t.Helper()
	s := observeShards(t, c, v)
	if s.sum() != v.InitialStock {
		t.Fatalf("%s: stock %v + buyers %v + in flight %d = %d, want the initial %d", when, s.stock, s.buyers, s.inFlight, s.sum(), v.InitialStock)
	}
	return s
}

// TestLoadShardedVoucher: each shard holds its part of the stock and says
// which shard of how many it is; Remaining sums them; loading again keeps
// them; an unsharded voucher's meta is as before shards.
func TestLoadShardedVoucher(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 20, 3)
		mustLoad(t, c, v)
		l := c.Learn(v)
		for i, k := range l.shards {
			if got, want := stockOf(t, c, k), seckill.ShardStock(20, 3, i); got != want {
				t.Errorf("shard %d: stock %d, want %d", i, got, want)
			}
			m := hash(t, c, k.Meta)
			if m["shards"] != "3" || m["index"] != strconv.Itoa(i) || m["xgen"] != "0" || m["gen"] != strconv.FormatInt(v.Generation, 10) {
				t.Errorf("shard %d: meta %v", i, m)
			}
		}
		if n := stock(t, c, v.ID); n != -1 {
			t.Errorf("{v%d} holds stock %d: a sharded voucher keeps nothing there", v.ID, n)
		}
		left, err := c.Remaining(ctx, v.ID)
		if err != nil || left[v.ID] != 20 {
			t.Errorf("Remaining = %v, %v; want 20", left, err)
		}
		admitHome(t, c, v, 7, 700)
		if replaced, err := c.LoadVoucher(ctx, v); err != nil || replaced {
			t.Fatalf("LoadVoucher again = %v, %v", replaced, err)
		}
		if id, err := c.BuyerOrder(ctx, 7, v.ID); err != nil || id != 700 {
			t.Errorf("BuyerOrder after loading again = %d, %v; want 700 kept", id, err)
		}
		home := l.shards[seckill.HomeShard(7, 3)]
		before := stockOf(t, c, home)
		if ok, err := c.Release(ctx, v.ID, 7, 700); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		if got := stockOf(t, c, home); got != before+1 {
			t.Errorf("the home shard's stock after the release: %d, want %d", got, before+1)
		}
		if id, err := c.BuyerOrder(ctx, 7, v.ID); err != nil || id != 0 {
			t.Errorf("BuyerOrder after the release = %d, %v; want none", id, err)
		}
		do(t, c, "DEL", l.shards[2].Stock)
		if left, err := c.Remaining(ctx, v.ID); err != nil || len(left) != 0 {
			t.Errorf("Remaining with a shard lost = %v, %v; want absent", left, err)
		}

		u := onSale(2, 5)
		mustLoad(t, c, u)
		m := hash(t, c, c.keys.voucher(2).Meta)
		for _, f := range []string{"shards", "index", "xgen"} {
			if _, ok := m[f]; ok {
				t.Errorf("an unsharded voucher's meta has %s: %v", f, m)
			}
		}
	})
}

// admission is the admission of user with order on their home shard of v.
func admission(v *seckill.Voucher, user, order int64) seckill.Admission {
	return seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: user, OrderID: order,
		Shard: seckill.HomeShard(user, v.ShardCount())}
}

// admitHome admits user with order on their home shard of v, or fails the
// test.
func admitHome(t *testing.T, c *Client, v *seckill.Voucher, user, order int64) {
	t.Helper()
	if err := c.Admit(context.Background(), admission(v, user, order)); err != nil {
		t.Fatalf("Admit(voucher %d, user %d): %v", v.ID, user, err)
	}
}

// homed returns n users whose home shard of v is home, from user first on.
func homed(v *seckill.Voucher, home, n int, first int64) []int64 {
	var users []int64
	for u := first; len(users) < n; u++ {
		if seckill.HomeShard(u, v.ShardCount()) == home {
			users = append(users, u)
		}
	}
	return users
}

// TestTransferSteps: each step of a transfer is its own script, safe to run
// again, and the invariant holds after each; a transfer refused is given
// back to its donor; a shard of another transfer generation, or frozen by
// a rebuild, neither gives nor receives.
func TestTransferSteps(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 30, 3)
		mustLoad(t, c, v)
		l := c.Learn(v)
		gen := strconv.FormatInt(v.Generation, 10)
		take := func(from, to int, id string, n int64, xgen string) int64 {
			t.Helper()
			d := l.shards[from]
			m, err := transferTakeScript.runInt(ctx, c, "take", []string{d.Stock, d.Meta, d.Xout},
				transferTakeArgs{ID: id, To: to, N: n, Generation: gen, XGen: xgen})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		give := func(to int, id string, n int64, xgen string, cancel bool) int64 {
			t.Helper()
			r := l.shards[to]
			m, err := transferGiveScript.runInt(ctx, c, "give", []string{r.Stock, r.Meta, r.Xin},
				transferGiveArgs{ID: id, N: n, Generation: gen, XGen: xgen, Cancel: cancel})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		settle := func(from int, id string, received bool) int64 {
			t.Helper()
			d := l.shards[from]
			m, err := transferSettleScript.runInt(ctx, c, "settle", []string{d.Stock, d.Meta, d.Xout}, args{id, flag(received)})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		stocks := func(want ...int64) {
			t.Helper()
			s := checkObservedInvariant(t, c, v, "after a step")
			for i, w := range want {
				if s.stock[i] != w {
					t.Fatalf("stocks %v, want %v", s.stock, want)
				}
			}
		}

		// Received: take, give, settle; each again changes nothing.
		if m := take(0, 1, "a", 4, "0"); m != 4 {
			t.Fatalf("take = %d, want 4", m)
		}
		stocks(6, 10, 10)
		if m := take(0, 1, "a", 4, "0"); m != 4 {
			t.Fatalf("take again = %d, want 4", m)
		}
		stocks(6, 10, 10)
		if m := give(1, "a", 4, "0", false); m != 4 {
			t.Fatalf("give = %d, want 4", m)
		}
		if m := give(1, "a", 4, "0", false); m != 4 {
			t.Fatalf("give again = %d, want 4", m)
		}
		if m := give(1, "a", 4, "0", true); m != 4 {
			t.Fatalf("cancel after give = %d, want 4 (received)", m)
		}
		stocks(6, 14, 10)
		if m := settle(0, "a", true); m != 1 {
			t.Fatalf("settle = %d, want 1", m)
		}
		if m := settle(0, "a", true); m != 0 {
			t.Fatalf("settle again = %d, want 0", m)
		}
		stocks(6, 14, 10)

		// Refused: cancel before give; the donor takes its units back once.
		take(2, 0, "b", 3, "0")
		stocks(6, 14, 7)
		if m := give(0, "b", 3, "0", true); m != xRefused {
			t.Fatalf("cancel = %d, want refused", m)
		}
		if m := give(0, "b", 3, "0", false); m != xRefused {
			t.Fatalf("give after cancel = %d, want refused", m)
		}
		stocks(6, 14, 7)
		if m := settle(2, "b", false); m != 2 {
			t.Fatalf("settle refused = %d, want 2", m)
		}
		settle(2, "b", false)
		stocks(6, 14, 10)

		// More than the donor has: what it has.
		if m := take(0, 2, "c", 100, "0"); m != 6 {
			t.Fatalf("take 100 of 6 = %d, want 6", m)
		}
		if m := take(0, 2, "d", 1, "0"); m != 0 {
			t.Fatalf("take of an empty shard = %d, want 0", m)
		}
		if n := len(hash(t, c, l.shards[0].Xout)); n != 1 {
			t.Fatalf("a take of nothing was recorded: %d transfers out", n)
		}
		stocks(0, 14, 10)
		if _, err := c.FinishTransfers(ctx, v.ID, 0); err != nil {
			t.Fatal(err)
		}
		stocks(0, 14, 16)

		// A rebuild's new transfer generation on shard 1: it neither gives
		// under the old one, nor receives a transfer of it: cancelled, back.
		do(t, c, "HSET", l.shards[1].Meta, "xgen", "r1")
		if m := take(1, 2, "e", 2, "0"); m != xStale {
			t.Fatalf("take under an old transfer generation = %d, want %d", m, xStale)
		}
		take(2, 1, "f", 2, "0")
		if m := give(1, "f", 2, "0", false); m != xStale {
			t.Fatalf("give of an old transfer generation = %d, want %d", m, xStale)
		}
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers = %d, %v; want 1", n, err)
		}
		stocks(0, 14, 16)
		do(t, c, "HSET", l.shards[1].Meta, "xgen", "0")

		// Frozen: nothing runs on the frozen shard.
		take(2, 0, "g", 1, "0")
		until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		do(t, c, "HSET", l.shards[2].Meta, "xfrozen", until)
		do(t, c, "HSET", l.shards[0].Meta, "xfrozen", until)
		if m := take(2, 1, "h", 1, "0"); m != xFrozen {
			t.Fatalf("take on a frozen shard = %d, want %d", m, xFrozen)
		}
		if m := give(0, "g", 1, "0", false); m != xFrozen {
			t.Fatalf("give on a frozen shard = %d, want %d", m, xFrozen)
		}
		if m := give(0, "g", 1, "0", true); m != xFrozen {
			t.Fatalf("cancel on a frozen shard = %d, want %d", m, xFrozen)
		}
		if m := settle(2, "g", false); m != xFrozen {
			t.Fatalf("settle on a frozen shard = %d, want %d", m, xFrozen)
		}
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 0 {
			t.Fatalf("FinishTransfers while frozen = %d, %v; want 0", n, err)
		}
		if b, err := c.Borrow(ctx, v.ID, 0); err != nil || b.Moved != 0 || b.SoldOut {
			t.Fatalf("Borrow while frozen = %+v, %v; want neither moved nor sold out", b, err)
		}
		stocks(0, 14, 15)
		do(t, c, "HDEL", l.shards[2].Meta, "xfrozen")
		do(t, c, "HDEL", l.shards[0].Meta, "xfrozen")
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers after the thaw = %d, %v; want 1", n, err)
		}
		stocks(1, 14, 15)
	})
}

// TestBorrow: buyers who all live on one shard buy the whole voucher: the
// shard borrows the others' stock, no unit is sold twice or left unsold,
// and the voucher is sold out only when every shard is.
func TestBorrow(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 40, 4)
		mustLoad(t, c, v)
		users := homed(v, 2, 60, 1)
		admitted, moves := 0, 0
		for _, u := range users {
			for {
				err := c.Admit(ctx, admission(v, u, u+1000))
				if err == nil {
					admitted++
					break
				}
				if !errors.Is(err, seckill.ErrSoldOut) {
					t.Fatalf("Admit(user %d) = %v", u, err)
				}
				b, err := c.Borrow(ctx, v.ID, 2)
				if err != nil {
					t.Fatal(err)
				}
				if b.Moved > 0 {
					moves++
				}
				if b.SoldOut {
					break
				}
				if b.Moved == 0 {
					t.Fatalf("Borrow = %+v with %v left", b, observeShards(t, c, v).stock)
				}
			}
			checkObservedInvariant(t, c, v, "after user "+strconv.FormatInt(u, 10))
		}
		if admitted != 40 {
			t.Errorf("%d admitted, want all 40", admitted)
		}
		s := observeShards(t, c, v)
		if s.stock[0]+s.stock[1]+s.stock[2]+s.stock[3] != 0 || s.buyers[2] != 40 {
			t.Errorf("stock %v, buyers %v; want none left, 40 buyers on shard 2", s.stock, s.buyers)
		}
		// Sized to the demand, all of which is shard 2's: each borrow
		// takes all a donor has, three transfers for 30 units (a fair
		// share each time took eight).
		if moves > 3 {
			t.Errorf("%d transfers for 30 units on 3 other shards", moves)
		}
		if b, err := c.Borrow(ctx, v.ID, 0); err != nil || !b.SoldOut {
			t.Errorf("Borrow for another shard = %+v, %v; want sold out", b, err)
		}
	})
}

// TestBorrowConcurrent: buyers of every shard, several at once, each asking
// until answered: exactly the stock is sold, none twice, and sold out is
// answered to no one while a unit is left anywhere.
func TestBorrowConcurrent(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		v := sharded(t, c, 1, 300, 5)
		mustLoad(t, c, v)
		sellOut(t, c, v, 1, 500)
	})
}

// sellOut sells v to buyers first to first+n-1, 8 at a time, each asking
// (and borrowing for their home shard) until admitted or told sold out,
// and fails the test unless exactly the stock left is sold, each buyer on
// their home shard with their order, no one told sold out while a unit is
// left, and nothing is left in flight.
func sellOut(t *testing.T, c *Client, v *seckill.Voucher, first, n int64) {
	t.Helper()
	ctx := context.Background()
	left, err := c.Remaining(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := observeShards(t, c, v)
	var admitted, soldOutEarly atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	next.Store(first - 1)
	for range 8 {
		wg.Go(func() {
			for {
				u := next.Add(1)
				if u >= first+n {
					return
				}
				a := admission(v, u, u+10_000_000)
				for {
					err := c.Admit(ctx, a)
					if err == nil {
						admitted.Add(1)
						break
					}
					if !errors.Is(err, seckill.ErrSoldOut) {
						t.Errorf("Admit(user %d) = %v", u, err)
						return
					}
					b, err := c.Borrow(ctx, v.ID, a.Shard)
					if err != nil {
						t.Errorf("Borrow = %v", err)
						return
					}
					if b.SoldOut {
						if left, _ := c.Remaining(ctx, v.ID); left[v.ID] > 0 {
							soldOutEarly.Add(1)
						}
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != left[v.ID] || soldOutEarly.Load() != 0 {
		t.Errorf("%d admitted (want the %d left), %d told sold out with stock left", admitted.Load(), left[v.ID], soldOutEarly.Load())
	}
	s := checkObservedInvariant(t, c, v, "after the sale")
	if s.inFlight != 0 {
		t.Errorf("%d units in flight after the sale", s.inFlight)
	}
	for i, k := range c.Learn(v).shards {
		for u, o := range hash(t, c, k.Buyers) {
			id, _ := strconv.ParseInt(u, 10, 64)
			if seckill.HomeShard(id, v.ShardCount()) != i {
				t.Errorf("buyer %s on shard %d, home %d", u, i, seckill.HomeShard(id, v.ShardCount()))
			}
			if id >= first && o != strconv.FormatInt(id+10_000_000, 10) {
				t.Errorf("buyer %s holds order %s", u, o)
			}
		}
		if got, want := s.buyers[i]-before.buyers[i], int64(0); got < want {
			t.Errorf("shard %d lost buyers", i)
		}
	}
}

// TestTransferInterrupted: a borrower that stopped after the take (the
// units in flight), or after the give (received, not settled), leaves the
// invariant true; FinishTransfers finishes it, once it is stale, and the
// sale then sells exactly the stock.
func TestTransferInterrupted(t *testing.T) {
	for _, step := range []string{"take", "give"} {
		t.Run("after "+step, func(t *testing.T) {
			each(t, func(t *testing.T, c *Client) {
				ctx := context.Background()
				v := sharded(t, c, 1, 30, 3)
				mustLoad(t, c, v)
				interrupt(t, c, v, "x1", 0, 1, 4, step == "give")
				if s := checkObservedInvariant(t, c, v, "interrupted"); s.stock[0] != 6 {
					t.Fatalf("stocks %v after the take of 4", s.stock)
				}
				if n, err := c.FinishTransfers(ctx, v.ID, time.Hour); err != nil || n != 0 {
					t.Fatalf("FinishTransfers(younger than an hour) = %d, %v; want none finished", n, err)
				}
				if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
					t.Fatalf("FinishTransfers = %d, %v; want 1", n, err)
				}
				s := checkObservedInvariant(t, c, v, "finished")
				if s.stock[0] != 6 || s.stock[1] != 14 || s.inFlight != 0 {
					t.Fatalf("finished: stocks %v, in flight %d; want [6 14 10], 0", s.stock, s.inFlight)
				}
				if xout := hash(t, c, c.Learn(v).shards[0].Xout); len(xout) != 0 {
					t.Fatalf("finished, still recorded: %v", xout)
				}
				sellOut(t, c, v, 1, 60)
			})
		})
	}
}

// interrupt runs a transfer of n units from shard from to shard to, and
// stops after the take, or after the give: a borrower killed there.
func interrupt(t *testing.T, c *Client, v *seckill.Voucher, id string, from, to int, n int64, give bool) {
	t.Helper()
	ctx := context.Background()
	l := c.Learn(v)
	gen := strconv.FormatInt(v.Generation, 10)
	d, r := l.shards[from], l.shards[to]
	m, err := transferTakeScript.runInt(ctx, c, "take", []string{d.Stock, d.Meta, d.Xout}, transferTakeArgs{ID: id, To: to, N: n, Generation: gen, XGen: "0"})
	if err != nil || m != n {
		t.Fatalf("take = %d, %v; want %d", m, err, n)
	}
	if !give {
		return
	}
	m, err = transferGiveScript.runInt(ctx, c, "give", []string{r.Stock, r.Meta, r.Xin}, transferGiveArgs{ID: id, N: n, Generation: gen, XGen: "0"})
	if err != nil || m != n {
		t.Fatalf("give = %d, %v; want %d", m, err, n)
	}
}

// TestTransferDonorFailover: the donor's master fails over between the
// steps of a transfer (after the take; after the give): the replica that
// takes over holds the record, FinishTransfers finishes the transfer
// there, the invariant holds and the sale sells exactly the stock.
func TestTransferDonorFailover(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	c := openCluster(t, cl)
	arm(t, c)
	v := sharded(t, c, 1, 60, 3)
	mustLoad(t, c, v)
	l := c.Learn(v)
	failover := func(shard int) {
		t.Helper()
		master := cl.MasterOf(t, l.shards[shard].Stock)
		replica := cl.ReplicaOf(t, master)
		if _, err := replica.Do(ctx, "CLUSTER", "FAILOVER"); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, defaultWait, "the failover", func() bool { return replica.Role() == "master" })
		cl.WaitHealthy(t, defaultWait)
		testenv.WaitFor(t, defaultWait, "admission armed on the new master", func() bool {
			// A command on the shard's slot: the client follows its MOVED
			// and connects to the new master.
			c.rdb.Do(ctx, c.rdb.B().Get().Key(l.shards[shard].Stock).Build())
			id, err := c.Identity(ctx)
			return err == nil && c.ArmAdmission(ctx, id) == nil
		})
		if got := cl.MasterOf(t, l.shards[shard].Stock).Addr; got != replica.Addr {
			t.Fatalf("shard %d is on %s after the failover, want %s", shard, got, replica.Addr)
		}
	}
	for i, give := range []bool{false, true} {
		donor := 2 * i // shards 0, then 2
		interrupt(t, c, v, "f"+strconv.Itoa(i), donor, 1, 5, give)
		failover(donor)
		checkObservedInvariant(t, c, v, "after the failover")
		if n, err := c.FinishTransfers(ctx, v.ID, 0); err != nil || n != 1 {
			t.Fatalf("FinishTransfers = %d, %v; want 1", n, err)
		}
		if s := checkObservedInvariant(t, c, v, "finished"); s.inFlight != 0 || s.stock[1] != 20+5*int64(i+1) {
			t.Fatalf("finished: stocks %v, in flight %d", s.stock, s.inFlight)
		}
	}
	sellOut(t, c, v, 1, 100)
}

// TestBorrowFinishesWhatItFinds: units a stopped borrower left in flight
// are not taken for sold out: the next borrower that finds nothing else
// finishes the transfer, and then borrows its units.
func TestBorrowFinishesWhatItFinds(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 3, 3)
		mustLoad(t, c, v)
		interrupt(t, c, v, "y1", 1, 2, 1, false) // shard 1's unit, on its way to shard 2
		users := homed(v, 0, 4, 1)
		admitHome(t, c, v, users[0], 1) // shard 0's own unit
		for i, u := range users[1:3] {
			b, err := c.Borrow(ctx, v.ID, 0)
			if err != nil || b.Moved != 1 || b.SoldOut {
				t.Fatalf("borrow %d = %+v, %v; want 1 moved", i+1, b, err)
			}
			admitHome(t, c, v, u, int64(i+2))
			checkObservedInvariant(t, c, v, "after a borrow")
		}
		if b, err := c.Borrow(ctx, v.ID, 0); err != nil || !b.SoldOut {
			t.Fatalf("Borrow with every unit sold = %+v, %v; want sold out", b, err)
		}
		if s := observeShards(t, c, v); s.inFlight != 0 || s.buyers[0] != 3 {
			t.Errorf("after the sale: %+v", s)
		}
	})
}

// TestShardsFromTheRow: an instance that did not load a sharded voucher
// finds its shards from its row (Config.Vouchers), and admits each buyer
// on their home shard; one that cannot read the row answers unavailable,
// having run nothing.
func TestShardsFromTheRow(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 12, 3)
		mustLoad(t, c, v)
		url, _ := urls.Load(c)
		open := func(rows func(context.Context, int64) (*seckill.Voucher, error)) *Client {
			o, err := Open(ctx, Config{URL: url.(string), Prefix: c.keys.prefix, Embedded: c.embedded, Vouchers: rows}, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(o.Close)
			return o
		}
		other := open(func(context.Context, int64) (*seckill.Voucher, error) { return v, nil })
		for u := int64(1); u <= 6; u++ {
			admitHome(t, other, v, u, 100+u)
			if id, err := c.BuyerOrder(ctx, u, v.ID); err != nil || id != 100+u {
				t.Errorf("user %d: BuyerOrder = %d, %v; want %d", u, id, err, 100+u)
			}
		}
		broken := open(func(context.Context, int64) (*seckill.Voucher, error) {
			return nil, errors.New("the database is away")
		})
		err := broken.Admit(ctx, admission(v, 7, 107))
		var e *seckill.Error
		if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable || e.RetryAfter <= 0 {
			t.Errorf("Admit without the row = %v, want unavailable with Retry-After", err)
		}
		checkObservedInvariant(t, c, v, "after the sale")
		if s := observeShards(t, c, v); s.buyers[0]+s.buyers[1]+s.buyers[2] != 6 {
			t.Errorf("buyers %v, want 6 in all", s.buyers)
		}
	})
}

// BenchmarkAdmitSharded is BenchmarkAdmit on a voucher of 8 shards (on one
// Redis): each buyer admitted on their home shard, with as many
// allocations as an unsharded voucher's admission.
func BenchmarkAdmitSharded(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := onSale(1, 1<<40)
	v.Shards = 8
	if _, err := c.LoadVoucher(ctx, v); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			if err := c.Admit(ctx, admission(v, n, n)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBorrow measures a borrow that moves stock (a read of every
// shard, take, give, settle) on one Redis, with the two SETs that empty
// the home shard before each: the cost of a transfer.
func BenchmarkBorrow(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := onSale(1, 1<<40)
	v.Shards = 8
	if _, err := c.LoadVoucher(ctx, v); err != nil {
		b.Fatal(err)
	}
	l := c.Learn(v)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		// The home shard empty, one other full: each borrow moves stock.
		for i, res := range c.rdb.DoMulti(ctx, c.rdb.B().Set().Key(l.shards[0].Stock).Value("0").Build(),
			c.rdb.B().Set().Key(l.shards[1].Stock).Value("1000000").Build()) {
			if err := res.Error(); err != nil {
				b.Fatal(i, err)
			}
		}
		if r, err := c.Borrow(ctx, v.ID, 0); err != nil || r.Moved == 0 {
			b.Fatalf("Borrow = %+v, %v", r, err)
		}
	}
}

// TestTransfersWaitForTheFence: the transfer scripts, like admission's,
// run only where the fence armed them. A master that lost its scripts (as
// one that failed over to a replica lacking the last writes, or restarted)
// answers a transfer ErrCacheUnverified, as it answers an admission, and
// moves nothing: else a borrower could take stock that counts units
// already sold there (their admissions lost with the old master) and sell
// it on an armed master before the fence unloads the voucher. Found by
// review: the transfers ran with the EVAL fallback of every other script.
func TestTransfersWaitForTheFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proc := faults.StartRedisProc(t)
	c, err := Open(ctx, Config{URL: "redis://" + proc.Addr}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	v := onSale(93, 4)
	v.Shards, v.Generation = 2, 5
	mustLoad(t, c, v)
	var home0 []int64
	for u := int64(1); len(home0) < 2; u++ {
		if seckill.HomeShard(u, 2) == 0 {
			home0 = append(home0, u)
		}
	}
	for j, u := range home0 { // shard 0 sells out
		if err := c.Admit(ctx, seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: u, OrderID: 500 + int64(j), Shard: 0}); err != nil {
			t.Fatalf("admit %d: %v", u, err)
		}
	}
	do(t, c, "SCRIPT", "FLUSH") // a server not checked since
	if b, err := c.Borrow(ctx, v.ID, 0); !errors.Is(err, seckill.ErrCacheUnverified) || b.Moved != 0 {
		t.Errorf("Borrow on a server not checked = %+v, %v; want nothing moved, ErrCacheUnverified", b, err)
	}
	s := checkObservedInvariant(t, c, v, "after a borrow on a server not checked")
	if s.stock[0] != 0 || s.inFlight != 0 {
		t.Errorf("shard 0 holds %d units, %d in flight; want none: no transfer step may run before the check", s.stock[0], s.inFlight)
	}
	arm(t, c) // checked again: the borrow moves stock
	if b, err := c.Borrow(ctx, v.ID, 0); err != nil || b.Moved == 0 {
		t.Errorf("Borrow once checked = %+v, %v; want stock moved", b, err)
	}
}
