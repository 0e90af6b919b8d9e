package redis

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill/internal/testenv"
)

// hookClient runs before on every Do before it is sent.
type hookClient struct {
	rueidis.Client
	before func(cmd rueidis.Completed)
}

func (h hookClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	h.before(cmd)
	return h.Client.Do(ctx, cmd)
}

func isScript(cmd rueidis.Completed, sha string) bool {
	c := cmd.Commands()
	return len(c) > 1 && c[0] == "EVALSHA" && c[1] == sha
}

// TestRebuildShardsSecondLossMidRebuild (found by review): rebuild R1 finds shard 1 lost
// and freezes every shard, counting shard 0 as loaded (5 units). Then shard
// 0's master loses its data too, and rebuild R2 finds shards 0 and 1 lost,
// and shares what shard 2 leaves (20) between them: 10 each. R2 finishes
// shard 0; R1, on its stale count of shard 0 (5), finishes shard 1 with
// 30-5-10 = 15. R2's finish of shard 1 is superseded, but shard 0 stays at
// 10. The shards held 35 units of a voucher of 30: sold, they oversold.
// Now R1 finds, before it finishes, that shard 0 lost its freeze, and
// counts again.
func TestRebuildShardsSecondLossMidRebuild(t *testing.T) {
	ctx := context.Background()
	url := testenv.RedisURL(t)
	prefix := testenv.RedisPrefix(t)
	open := func() *Client {
		c, err := Open(ctx, Config{URL: url, Prefix: prefix}, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		arm(t, c)
		return c
	}
	c1, c2 := open(), open()
	v := learntSharded(c1, 91, 30, 3)
	c2.Learn(v)
	loadShards(t, c1, v)
	// Shard 0 lends 5 units to shard 1: 5, 15, 10.
	shards := c1.Learn(v).shards
	if m, err := c1.move(ctx, shards, 0, 1, 5, "3", "0"); err != nil || m != 5 {
		t.Fatalf("move: %d %v", m, err)
	}
	checkInvariant(t, c1, v)

	db := &database{}
	resetSha := shardResetScript.on(c1.embedded).sha
	finishSha := finishRebuildScript.on(c2.embedded).sha

	// R1 stops at its first shard_reset: after it froze every shard.
	frozen1, release1 := make(chan struct{}), make(chan struct{})
	var once1 sync.Once
	c1.rdb = hookClient{Client: c1.rdb, before: func(cmd rueidis.Completed) {
		if isScript(cmd, resetSha) {
			once1.Do(func() { close(frozen1); <-release1 })
		}
	}}
	loseShard(t, c1, v, 1)
	r1done := make(chan error, 1)
	go func() { r, err := c1.Rebuild(ctx, v, db.read); t.Logf("R1: %+v", r); r1done <- err }()
	<-frozen1

	// Shard 0's master loses its data too; R2 rebuilds shards 0 and 1, and
	// R1 finishes between R2's finish of shard 0 and of shard 1.
	loseShard(t, c2, v, 0)
	var once2 sync.Once
	c2.rdb = hookClient{Client: c2.rdb, before: func(cmd rueidis.Completed) {
		if isScript(cmd, finishSha) {
			once2.Do(func() {
				close(release1)
				if err := <-r1done; err != nil {
					t.Errorf("R1: %v", err)
				}
			})
		}
	}}
	if r, err := c2.Rebuild(ctx, v, db.read); err != nil {
		t.Fatalf("R2: %v", err)
	} else {
		t.Logf("R2: %+v", r)
	}
	n := countShards(t, c2, v)
	for _, s := range n.Shards {
		t.Logf("shard %d: stock %d buyers %d in flight %d", s.Index, s.Stock, s.Buyers, s.InFlight)
	}
	if n.Total != v.InitialStock {
		t.Errorf("shards hold %d units (stock + buyers + in flight) of a voucher of %d", n.Total, v.InitialStock)
	}
	if sold := sale(t, c2, v, 1); sold > v.InitialStock {
		t.Errorf("sold %d units of a voucher of %d", sold, v.InitialStock)
	}
}
