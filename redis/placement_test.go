package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestPlaceShards: on a Cluster of 3 masters, 3 shards land on 3 distinct
// masters and 8 shards 2 or 3 on each; the tags are those placement
// promises; off a Cluster there is nothing to place.
func TestPlaceShards(t *testing.T) {
	t.Parallel()
	cl := faults.SharedCluster(t)
	ctx := context.Background()
	c := openCluster(t, cl)
	for _, k := range []int{3, 8} {
		tags, err := c.PlaceShards(ctx, 123456789, k)
		if err != nil || len(tags) != k {
			t.Fatalf("PlaceShards(%d) = %q, %v", k, tags, err)
		}
		topo, err := c.Topology(ctx)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		seen := map[string]bool{}
		for i, tag := range tags {
			if seen[tag] {
				t.Errorf("tag %q twice", tag)
			}
			seen[tag] = true
			if want := "g" + strconv.FormatInt(123456789, 36) + "." + strconv.Itoa(i) + "."; !strings.HasPrefix(tag, want) {
				t.Errorf("shard %d: tag %q, want it to start %q", i, tag, want)
			}
			master := ""
			slot := faults.KeySlot("{" + tag + "}")
			for _, m := range topo.Masters {
				if serves(m, slot) {
					master = m.Addr
				}
			}
			if got := cl.MasterOf(t, c.keys.shard(1, tag).Stock).Addr; got != master {
				t.Errorf("shard %d: the Cluster has it on %s, the slot map read on %s", i, got, master)
			}
			per[master]++
		}
		if len(per) != 3 {
			t.Errorf("%d shards on %d masters (%v), want all 3", k, len(per), per)
		}
		for m, n := range per {
			if n < k/3 || n > (k+2)/3 {
				t.Errorf("%d shards: %s has %d, want %d to %d", k, m, n, k/3, (k+2)/3)
			}
		}
	}

	single, err := Open(ctx, Config{URL: testenv.RedisURL(t), Prefix: testenv.RedisPrefix(t)}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(single.Close)
	if tags, err := single.PlaceShards(ctx, 1, 8); tags != nil || err != nil {
		t.Errorf("PlaceShards off a Cluster = %q, %v; want nil, nil", tags, err)
	}
}

// TestPlacedShardMoves: a shard whose slot a reshard moved to another
// master admits there, and borrows and lends as before.
func TestPlacedShardMoves(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	c := openCluster(t, cl)
	arm(t, c)
	v := sharded(t, c, 1, 30, 3)
	mustLoad(t, c, v)
	l := c.Learn(v)
	moved := 1
	from := cl.MasterOf(t, l.shards[moved].Stock)
	var to *faults.RedisProc
	for _, m := range cl.Masters(t) {
		if m.Addr != from.Addr {
			to = m
		}
	}
	cl.MoveSlot(t, faults.KeySlot(l.shards[moved].Stock), to)
	if got := cl.MasterOf(t, l.shards[moved].Stock).Addr; got != to.Addr {
		t.Fatalf("the shard is on %s, want %s after the move", got, to.Addr)
	}
	users := homed(v, moved, 15, 1)
	sold := 0
	for _, u := range users {
		err := c.Admit(ctx, admission(v, u, u+100))
		if err == nil {
			sold++
			continue
		}
		if !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("Admit on the moved shard: %v", err)
		}
		b, err := c.Borrow(ctx, v.ID, moved)
		if err != nil || b.Moved == 0 {
			t.Fatalf("Borrow for the moved shard = %+v, %v", b, err)
		}
		if err := c.Admit(ctx, admission(v, u, u+100)); err != nil {
			t.Fatalf("Admit after the borrow: %v", err)
		}
		sold++
	}
	if sold != 15 {
		t.Errorf("%d sold on the moved shard, want 15", sold)
	}
	checkObservedInvariant(t, c, v, "after the sale on the moved shard")
}
