package soldout_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/soldout"
)

// clusterBackend is the shared 3-master Cluster under a key prefix of the
// test's own.
func clusterBackend(t *testing.T) *backend {
	t.Helper()
	return newBackend(t, faults.SharedCluster(t).URL, "t"+testenv.Random(), false)
}

// shardedOnSale returns a voucher on sale with stock in shards shards,
// placed on the Cluster's masters as creation places them.
func shardedOnSale(t *testing.T, c *redis.Client, id, stock int64, shards int) *seckill.Voucher {
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

// buyOn buys v for user with order through c alone, as the Admitter does:
// on the user's home shard, borrowing from the other shards when it is at
// 0. It returns the order the user holds, or 0 when the voucher is sold
// out (a borrow found every shard at 0 with nothing in flight).
func buyOn(ctx context.Context, c *redis.Client, v *seckill.Voucher, user, order int64) (int64, error) {
	a := seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: user, OrderID: order, Shard: seckill.HomeShard(user, v.ShardCount())}
	for try := 0; try < 1000; try++ {
		err := c.Admit(ctx, a)
		var e *seckill.Error
		switch {
		case err == nil:
			return order, nil
		case errors.As(err, &e) && e.Kind == seckill.ErrDuplicateOrder:
			return e.OrderID, nil
		case errors.Is(err, seckill.ErrSoldOut):
			b, err := c.Borrow(ctx, v.ID, a.Shard)
			if err != nil {
				return 0, err
			}
			if b.SoldOut {
				return 0, nil
			}
		case errors.Is(err, seckill.ErrUnavailable):
			// Held past Admit's own waits: ask again.
		default:
			return 0, err
		}
	}
	return 0, errors.New("no final answer in 1000 tries")
}

// homeOf returns n users, from first on, whose home shard of v is i.
func homeOf(v *seckill.Voucher, i, n int, first int64) []int64 {
	var users []int64
	for u := first; len(users) < n; u++ {
		if seckill.HomeShard(u, v.ShardCount()) == i {
			users = append(users, u)
		}
	}
	return users
}

// waitShardsCopied waits until the copy of each of v's shards answers
// alone.
func waitShardsCopied(t *testing.T, s *soldout.Copies, v *seckill.Voucher) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := range v.ShardCount() {
		u := homeOf(v, i, 1, 1)[0]
		sh := seckill.Shard{VoucherID: v.ID, Index: i}
		for !s.CopiedShard(sh) {
			if _, err := s.SoldOutBuyerOrder(context.Background(), u, v.ID); err != nil {
				t.Fatalf("SoldOutBuyerOrder: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d: no trusted copy of its buyers after 10s", i)
			}
			time.Sleep(soldout.Poll)
		}
	}
}

// TestSoldOutShardCopyNeverHidesABuyer is TestSoldOutCopyNeverHidesABuyer
// for a voucher in 6 shards on 3 masters, with the race sharding adds:
// instance a answers from its copies of every shard, each trusted (its
// shard at 0, drained); instance b gives a unit back on shard A (a released
// order, which holds it there), then a new buyer of another shard B buys
// at once: B borrows A's unit (a transfer: take on A, give on B) and
// admits them. The buyer then asks a, whose copy of B found B at 0 less
// than soldout.Trust ago: it must answer their order, never "no order".
// The hold that transfer_give.lua puts on units given to a drained shard
// is what makes this true.
func TestSoldOutShardCopyNeverHidesABuyer(t *testing.T) {
	t.Parallel()
	const shards, rounds = 6, 12
	units, buyers := int64(scaleTo(6000)), int64(scaleTo(7000))
	be := clusterBackend(t)
	ia := be.open(t, "", soldout.Config{})
	a, as := ia.c, ia.copies
	b := be.open(t, "", soldout.Config{}).c
	ctx := context.Background()
	v := shardedOnSale(t, a, 1, units, shards)
	mustLoad(t, a, v)
	b.Learn(v)
	// The sale, on b: buyers 1..buyers at once, every unit sold.
	holders := make([]int64, buyers+1) // user -> order (0: none)
	var sold atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for u := next.Add(1); u <= buyers; u = next.Add(1) {
				got, err := buyOn(ctx, b, v, u, 10_000_000+u)
				if err != nil {
					t.Errorf("buy of user %d: %v", u, err)
					return
				}
				holders[u] = got
				if got != 0 {
					sold.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if sold.Load() != units {
		t.Fatalf("%d sold of %d", sold.Load(), units)
	}
	// A borrow found every shard at 0: each is marked drained.
	for i := range shards {
		if m := be.hash(t, be.prefix+":{"+v.ShardTag(i)+"}:meta"); m["drained"] == "" {
			t.Fatalf("shard %d after the sell-out: meta %v has no drained", i, m)
		}
	}
	for round := int64(1); round <= rounds; round++ {
		// A borrow finds the voucher sold out again and marks every shard
		// drained: the last round's give cleared it on its receiver.
		if bo, err := b.Borrow(ctx, v.ID, 0); err != nil || !bo.SoldOut {
			t.Fatalf("round %d: Borrow = %+v, %v; want sold out", round, bo, err)
		}
		waitShardsCopied(t, as, v)
		A := int(round % shards)
		B := (A + 1 + int(round%(shards-1))) % shards
		// A holder of shard A gives their unit back.
		var giver int64
		for u := int64(1); u <= buyers; u++ {
			if holders[u] != 0 && seckill.HomeShard(u, shards) == A {
				giver = u
				break
			}
		}
		if ok, err := b.Release(ctx, v.ID, giver, holders[giver]); err != nil || !ok {
			t.Fatalf("round %d: Release(user %d) = %v, %v", round, giver, ok, err)
		}
		holders[giver] = 0
		// A new buyer of shard B takes it at once: B borrows it.
		start := time.Now()
		user := homeOf(v, B, 1, 1_000_000+1000*round)[0]
		order := 20_000_000 + round
		got, err := buyOn(ctx, b, v, user, order)
		if err != nil || got != order {
			t.Fatalf("round %d: the new buyer %d of shard %d: order %d, %v; want %d", round, user, B, got, err, order)
		}
		waited := time.Since(start)
		if id := soldOutOrder(t, as, user, v.ID); id != order {
			t.Fatalf("round %d: the buyer of shard %d admitted by b %v after the unit left shard %d: a answers order %d, want %d",
				round, B, waited, A, id, order)
		}
		if waited < redis.Hold-5*time.Millisecond {
			t.Errorf("round %d: the unit given to drained shard %d was admitted after %v, not held for %v", round, B, waited, redis.Hold)
		}
	}
	// Every holder is still answered their order by a's copies, once a
	// borrow found the voucher sold out again.
	if bo, err := b.Borrow(ctx, v.ID, 0); err != nil || !bo.SoldOut {
		t.Fatalf("after the rounds: Borrow = %+v, %v; want sold out", bo, err)
	}
	waitShardsCopied(t, as, v)
	for u := int64(1); u <= buyers; u++ {
		if id := soldOutOrder(t, as, u, v.ID); id != holders[u] {
			t.Fatalf("user %d: a answers order %d, want %d", u, id, holders[u])
		}
	}
}

// scaleTo is n, or a tenth of it for -short (the race detector's runs).
func scaleTo(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// TestSoldOutShardCopyTrustsOnlyDrained: a shard at 0 whose voucher is not
// sold out (another shard has stock) is not drained, and a transfer gives
// it units with no hold: its copy must never answer alone, or it would
// tell the buyer the transfer lets in "no order". Each round empties shard
// 0 while shard 1 keeps stock, asks for shard 0's buyers for a while (no
// copy answers alone), then a new buyer of shard 0 borrows and is admitted
// at once, and must be answered their order.
func TestSoldOutShardCopyTrustsOnlyDrained(t *testing.T) {
	t.Parallel()
	be := clusterBackend(t)
	in := be.open(t, "", soldout.Config{})
	c, s := in.c, in.copies
	ctx := context.Background()
	v := shardedOnSale(t, c, 1, 1200, 2)
	mustLoad(t, c, v)
	sh := seckill.Shard{VoucherID: v.ID, Index: 0}
	// Shard 1 has buyers too, so that a borrow (sized to the demand) does
	// not take all it has: it keeps stock for every round.
	for _, u := range homeOf(v, 1, 300, 1_000_000) {
		if err := c.Admit(ctx, seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: u, OrderID: 100_000 + u, Shard: 1}); err != nil {
			t.Fatal(err)
		}
	}
	users := homeOf(v, 0, 1200, 1)
	next := 0
	for round := range 5 {
		// Shard 0 to 0, without borrowing.
		var holder, held int64
		for {
			if next == len(users) {
				t.Fatalf("round %d: shard 0 still sells after %d buyers", round, next)
			}
			u := users[next]
			next++
			err := c.Admit(ctx, seckill.Admission{VoucherID: v.ID, Generation: v.Generation, UserID: u, OrderID: 100_000 + u, Shard: 0})
			if errors.Is(err, seckill.ErrSoldOut) {
				break
			}
			if err != nil {
				t.Fatalf("round %d: Admit(user %d): %v", round, u, err)
			}
			holder, held = u, 100_000+u
		}
		for range 10 {
			if got := soldOutOrder(t, s, holder, v.ID); got != held {
				t.Fatalf("round %d: holder %d answered %d, want %d", round, holder, got, held)
			}
			if s.CopiedShard(sh) {
				t.Fatalf("round %d: the copy of shard 0, at 0 while shard 1 has stock (not drained), answers alone", round)
			}
			time.Sleep(soldout.Poll)
		}
		u := users[next]
		next++
		got, err := buyOn(ctx, c, v, u, 100_000+u)
		if err != nil || got != 100_000+u {
			t.Fatalf("round %d: the buyer %d who borrows: order %d, %v", round, u, got, err)
		}
		if id := soldOutOrder(t, s, u, v.ID); id != got {
			t.Fatalf("round %d: the buyer %d admitted with a borrowed unit: answered order %d, want %d", round, u, id, got)
		}
	}
}
