package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestBorrowBatchSizedToDemand: a borrow takes the home shard's share of
// the admissions so far of what is left: a fair share when buyers are
// spread evenly, more where more buyers ask, never more than the donor
// has, and all it has near the end.
func TestBorrowBatchSizedToDemand(t *testing.T) {
	shards := func(stock, buyers []int64) []shardState {
		st := make([]shardState, len(stock))
		for i := range st {
			st[i] = shardState{loaded: true, stock: stock[i], buyers: buyers[i]}
		}
		return st
	}
	for _, tc := range []struct {
		name          string
		stock, buyers []int64
		donor         int
		want          int64
	}{
		{"no admissions yet: a fair share", []int64{0, 40, 40, 40}, []int64{0, 0, 0, 0}, 1, 30},
		{"buyers even: a fair share", []int64{0, 40, 40, 40}, []int64{50, 50, 50, 50}, 1, 30},
		{"twice the others' buyers: about twice their share", []int64{0, 80, 60, 40}, []int64{100, 50, 50, 50}, 1, 72},
		{"more than the donor has: what it has", []int64{0, 50, 20, 10}, []int64{1000, 10, 10, 10}, 1, 50},
		{"near the end: all the donor has", []int64{0, 3, 2, 1}, []int64{100, 50, 50, 50}, 1, 3},
		{"one unit at least", []int64{0, 9, 9, 9}, []int64{0, 1000, 1000, 1000}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := shards(tc.stock, tc.buyers)
			var total int64
			for _, s := range st {
				total += s.stock
			}
			if got := borrowBatch(st, 0, tc.donor, total); got != tc.want {
				t.Errorf("borrowBatch(stock %v, buyers %v) = %d, want %d", tc.stock, tc.buyers, got, tc.want)
			}
		})
	}
}

// TestBorrowTakesMoreWhereBuyersAre: a home shard whose buyers outnumber
// the others' borrows more than a fair share, so that it does not run dry
// again long before they do.
func TestBorrowTakesMoreWhereBuyersAre(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 400, 4) // 100 a shard
		mustLoad(t, c, v)
		order := int64(1)
		for i, n := range []int{100, 80, 80, 80} {
			for _, u := range homed(v, i, n, int64(i)*10_000+1) {
				admitHome(t, c, v, u, order)
				order++
			}
		}
		// Left: 0, 20, 20, 20. Shard 0's buyers are 100 of 340: its share
		// of the 60 left is 18 (ceil(60·101/344)); a fair share is 15.
		b, err := c.Borrow(ctx, v.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fair := int64(15); b.Moved <= fair || b.Moved > 20 {
			t.Errorf("Borrow moved %d; want more than a fair share (%d), at most the donor's 20", b.Moved, fair)
		}
		checkObservedInvariant(t, c, v, "after the borrow")
	})
}

// TestBorrowPastALaggingDonor: with WaitReplicas, a donor whose replica
// stopped cannot give (its take is not on a replica): its transfer waits in
// flight, but the voucher's other shards still lend, one lagging donor
// does not park a batch per borrow, and a stale transfer of it that cannot
// be finished does not stop a borrow (any instance's) from taking from
// another donor. Once the replica is back the transfer is finished, and
// the units add up throughout. (Before, the borrow took from the lagging
// donor again, and a finisher stopped at its transfer: every shard's
// buyers were answered unavailable.)
func TestBorrowPastALaggingDonor(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	open := func() *Client {
		c, err := Open(ctx, Config{URL: cl.URL, Prefix: "lag", WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond}, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		arm(t, c)
		return c
	}
	c := open()
	v := sharded(t, c, 1, 400, 4) // 100 a shard
	mustLoad(t, c, v)
	l := c.Learn(v)
	if m0, m1 := cl.MasterOf(t, l.shards[0].Stock), cl.MasterOf(t, l.shards[1].Stock); m0.Addr == m1.Addr {
		t.Fatalf("shards 0 and 1 are both on %s; want distinct masters", m0.Addr)
	}
	// Shard 0 is dry; shard 1 (the fullest) lags; shards 2 and 3 can
	// lend 10 each.
	order := int64(1)
	sell := func(shard, n int, first int64) {
		for _, u := range homed(v, shard, n, first) {
			admitHome(t, c, v, u, order)
			order++
		}
	}
	sell(0, 100, 1)
	sell(2, 90, 100_000)
	sell(3, 90, 200_000)
	lagging := cl.ReplicaOf(t, cl.MasterOf(t, l.shards[1].Stock))
	// Another instance, armed before the pause (arming reads every node).
	other := open()
	other.Learn(v)
	lagging.Pause()
	defer lagging.Resume()

	if b, err := c.Borrow(ctx, v.ID, 0); err == nil || b.Moved != 0 {
		t.Fatalf("Borrow from the lagging donor = %+v, %v; want an error, nothing moved", b, err)
	}
	checkObservedInvariant(t, c, v, "after the take that was not replicated")
	b, err := c.Borrow(ctx, v.ID, 0)
	if err != nil || b.Moved == 0 {
		t.Fatalf("Borrow again = %+v, %v; want units moved from shard 2", b, err)
	}
	if out := hash(t, c, l.shards[1].Xout); len(out) != 1 {
		t.Errorf("the lagging donor holds %d transfers out; want the one parked", len(out))
	}
	if s := checkObservedInvariant(t, c, v, "after the second borrow"); s.stock[0] != b.Moved || s.stock[2]+s.stock[3] != 20-b.Moved {
		t.Errorf("stocks %v after %d moved; want them taken from shard 2 or 3", s.stock, b.Moved)
	}

	// The parked transfer grows stale (its record made a minute older),
	// and another instance, that never saw the donor lag, borrows: it
	// cannot finish that transfer, and lends from shard 2 all the same.
	for id, rec := range hash(t, c, l.shards[1].Xout) {
		f := strings.SplitN(rec, ":", 4)
		f[2] = strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
		do(t, c, "HSET", l.shards[1].Xout, id, strings.Join(f, ":"))
	}
	sell(0, int(b.Moved), 300_000)
	b2, err := other.Borrow(ctx, v.ID, 0)
	if err != nil || b2.Moved == 0 {
		t.Fatalf("another instance's Borrow past the stale parked transfer = %+v, %v; want units moved from shard 2 or 3", b2, err)
	}
	checkObservedInvariant(t, c, v, "after the other instance's borrow")
	// That instance now knows the donor lags: its next borrow does not
	// wait on the donor's replicas again (no take is confirmed: xwait, the
	// count each confirmation writes, stays), and answers unavailable.
	sell(0, int(b2.Moved), 400_000)
	xwait := func() string { return hash(t, c, l.shards[1].Meta)["xwait"] }
	was := xwait()
	if b3, err := other.Borrow(ctx, v.ID, 0); err == nil || b3.Moved != 0 {
		t.Errorf("Borrow with only the lagging donor left = %+v, %v; want unavailable", b3, err)
	}
	if now := xwait(); now != was {
		t.Errorf("the borrow waited on the lagging donor's replicas again (xwait %s → %s)", was, now)
	}

	lagging.Resume()
	testenv.WaitFor(t, defaultWait, "the parked transfer to be finished", func() bool {
		_, err := c.FinishTransfers(ctx, v.ID, 0)
		return err == nil && observeShards(t, c, v).inFlight == 0
	})
	if s := checkObservedInvariant(t, c, v, "after the replica came back"); s.inFlight != 0 {
		t.Errorf("%d units still in flight", s.inFlight)
	}
}

// TestFinishRefusesATakeTheDonorLost: with WaitReplicas, a finisher that
// read a transfer before its donor failed over to a replica that never had
// the take (the donor holds the units again, and no record of it) refuses
// the transfer rather than give units that now exist twice.
func TestFinishRefusesATakeTheDonorLost(t *testing.T) {
	t.Parallel()
	c, _ := replicated(t, 300*time.Millisecond)
	ctx := context.Background()
	v := onSale(1, 20)
	v.Shards, v.Generation = 2, 7
	mustLoad(t, c, v)
	l := c.Learn(v)
	interrupt(t, c, v, "lost", 1, 0, 4, false)
	ts, gens, err := c.readTransfers(ctx, l.shards, []int{1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("readTransfers = %v, %v; want the one transfer", ts, err)
	}
	// What a failover to a replica without the take leaves: the units on
	// the donor, no record.
	do(t, c, "HDEL", l.shards[1].Xout, "lost")
	do(t, c, "DECRBY", l.shards[1].Stock, "-4")
	checkObservedInvariant(t, c, v, "after the take was lost")

	done, received, err := c.finish(ctx, l.shards, ts[0], gens[1])
	if err != nil || !done || received {
		t.Fatalf("finish = done %v, received %v, %v; want done, refused", done, received, err)
	}
	if s := checkObservedInvariant(t, c, v, "after the finisher"); s.stock[0] != 10 || s.stock[1] != 10 {
		t.Errorf("stocks %v; want 10 and 10, the lost take given nowhere", s.stock)
	}
}

// TestBorrowLeavesHeldUnits: a unit given back to a shard at 0 is held
// there (release.lua), and no borrow takes it before the hold ends: moved,
// it would be held again on a drained receiver, and under demand hop from
// shard to shard unsold (TestShardedUnitsGivenBackSellUnderDemand). Once
// the hold ends it is borrowed as any unit.
func TestBorrowLeavesHeldUnits(t *testing.T) {
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := sharded(t, c, 1, 2, 2)
		mustLoad(t, c, v)
		u0, u1 := homed(v, 0, 1, 1)[0], homed(v, 1, 1, 1)[0]
		admitHome(t, c, v, u0, 100)
		admitHome(t, c, v, u1, 101)
		if ok, err := c.Release(ctx, v.ID, u1, 101); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		start := time.Now()
		b, err := c.Borrow(ctx, v.ID, 0)
		if held := time.Since(start) < Hold; held && (err != nil || b.Moved != 0 || b.SoldOut) {
			t.Fatalf("Borrow during the hold = %+v, %v; want nothing moved, not sold out", b, err)
		}
		testenv.WaitFor(t, defaultWait, "the unit borrowed once its hold ended", func() bool {
			b, err := c.Borrow(ctx, v.ID, 0)
			return err == nil && b.Moved == 1
		})
		if time.Since(start) < Hold-5*time.Millisecond {
			t.Errorf("the held unit was borrowed %v after it was given back; want after the hold (%v)", time.Since(start), Hold)
		}
		checkObservedInvariant(t, c, v, "after the borrow")
	})
}
