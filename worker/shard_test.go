package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
)

// newShardRig is newRig on MariaDB with a voucher of shards shards, whose
// shards are put in Redis as loading a voucher with shards does: each
// shard's part of the stock, its meta (its window, generation and place)
// and its order stream with the workers' group, under the shard's tag.
// The cache learns the voucher's layout; nothing is written under the
// voucher's unsharded tag.
func newShardRig(t *testing.T, shards int, stock int64) *rig {
	t.Helper()
	return newShardRigOn(t, testenv.RedisURL(t), testenv.RedisPrefix(t), shards, stock)
}

// newShardRigOn is newShardRig on the Redis of url (a Cluster's, say),
// under prefix.
func newShardRigOn(t *testing.T, url, prefix string, shards int, stock int64) *rig {
	t.Helper()
	ctx := context.Background()
	b := &rig{t: t, logger: testenv.Logger(t), dbURL: testenv.MySQLURL(t)}
	b.nextID.Store(time.Now().UnixMilli() << 22)
	var err error
	if b.store, err = mysql.Open(ctx, b.dbURL, 8); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.store.Close() })
	if err := b.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b.prefix = prefix
	if b.cache, err = redis.Open(ctx, redis.Config{URL: url, Prefix: b.prefix}, b.logger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.cache.Close)
	b.raw = testenv.RawRedis(t, url)
	now := time.Now().UTC().Truncate(time.Microsecond)
	b.voucher = &seckill.Voucher{Title: "t", Stock: stock, InitialStock: stock, Shards: shards,
		BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
	if err := b.store.CreateVoucher(ctx, b.voucher); err != nil {
		t.Fatal(err)
	}
	// The store may not keep the shards yet; the voucher here does.
	b.voucher.Shards = shards
	b.cache.Learn(b.voucher)
	for i := range shards {
		for _, cmd := range []rueidis.Completed{
			b.raw.B().Set().Key(b.shardKey(i, "stock")).Value(strconv.FormatInt(seckill.ShardStock(stock, shards, i), 10)).Build(),
			b.raw.B().Hset().Key(b.shardKey(i, "meta")).FieldValue().
				FieldValue("begin", strconv.FormatInt(b.voucher.BeginTime.UnixMilli(), 10)).
				FieldValue("end", strconv.FormatInt(b.voucher.EndTime.UnixMilli(), 10)).
				FieldValue("gen", strconv.FormatInt(b.voucher.Generation, 10)).
				FieldValue("epoch", "1").
				FieldValue("shards", strconv.Itoa(shards)).FieldValue("index", strconv.Itoa(i)).FieldValue("xgen", "0").Build(),
			b.raw.B().XgroupCreate().Key(b.shardKey(i, "orders")).Group(redis.Group).Id("0").Mkstream().Build(),
		} {
			if err := b.raw.Do(ctx, cmd).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b
}

// shardKey is one of the keys of shard i of the rig's voucher, e.g. "stock".
func (b *rig) shardKey(i int, name string) string {
	return b.prefix + ":{" + b.voucher.ShardTag(i) + "}:" + name
}

// shard is shard i of the rig's voucher.
func (b *rig) shard(i int) seckill.Shard {
	return seckill.Shard{VoucherID: b.voucher.ID, Index: i}
}

// admitOnShard admits the user on their home shard as admit.lua does (the
// unit taken, the buyer recorded, the order appended to the shard's
// stream, with at as its admission time), and returns the order id and the
// shard.
func (b *rig) admitOnShard(user int64, at string) (int64, int) {
	b.t.Helper()
	id := b.nextID.Add(1)
	i := seckill.HomeShard(user, b.voucher.ShardCount())
	for _, cmd := range []rueidis.Completed{
		b.raw.B().Decr().Key(b.shardKey(i, "stock")).Build(),
		b.raw.B().Hset().Key(b.shardKey(i, "buyers")).FieldValue().FieldValue(fmt.Sprint(user), fmt.Sprint(id)).Build(),
		b.raw.B().Xadd().Key(b.shardKey(i, "orders")).Id("*").FieldValue().FieldValue("id", fmt.Sprint(id)).
			FieldValue("user", fmt.Sprint(user)).FieldValue("voucher", fmt.Sprint(b.voucher.ID)).FieldValue("at", at).Build(),
	} {
		if err := b.raw.Do(context.Background(), cmd).Error(); err != nil {
			b.t.Fatal(err)
		}
	}
	return id, i
}

// admitShards admits users first..first+n-1 on their home shards and
// returns how many each shard took, failing the test if one took none.
func (b *rig) admitShards(first, n int64) []int64 {
	b.t.Helper()
	per := make([]int64, b.voucher.ShardCount())
	for u := first; u < first+n; u++ {
		_, i := b.admitOnShard(u, strconv.FormatInt(time.Now().UnixMilli(), 10))
		per[i]++
	}
	for i, n := range per {
		if n == 0 {
			b.t.Fatalf("no buyer of %d fell on shard %d: %v", n, i, per)
		}
	}
	return per
}

// shardPending returns how many of shard i's messages are pending, with
// consumer if not "".
func (b *rig) shardPending(i int, consumer string) int64 {
	b.t.Helper()
	res, err := b.raw.Do(context.Background(), b.raw.B().Xpending().Key(b.shardKey(i, "orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		b.t.Fatal(err)
	}
	if consumer == "" {
		n, _ := res[0].AsInt64()
		return n
	}
	owners, _ := res[3].ToArray()
	for _, o := range owners {
		f, _ := o.ToArray()
		if name, _ := f[0].ToString(); name == consumer {
			n, _ := f[1].AsInt64()
			return n
		}
	}
	return 0
}

// drained reports whether every shard's stream is drained: nothing
// pending, nothing left to deliver.
func (b *rig) drained() bool {
	b.t.Helper()
	for i := range b.voucher.ShardCount() {
		if n, err := b.cache.Backlog(context.Background(), b.shard(i)); err != nil || n != 0 {
			return false
		}
	}
	return true
}

// checkShardsSettled checks that every shard's stream is drained, no
// shard holds a dead letter, and nothing was written under the voucher's
// unsharded tag.
func (b *rig) checkShardsSettled() {
	b.t.Helper()
	for i := range b.voucher.ShardCount() {
		if n, err := b.cache.Backlog(context.Background(), b.shard(i)); err != nil || n != 0 {
			b.t.Errorf("shard %d's backlog = %d, %v; want 0", i, n, err)
		}
		if n := b.int(b.raw.B().Xlen().Key(b.shardKey(i, "dlq")).Build()); n != 0 {
			b.t.Errorf("shard %d holds %d dead letters, want 0", i, n)
		}
	}
	b.checkNothingUnsharded()
}

// checkNothingUnsharded checks that no key of the voucher's unsharded tag
// {v<id>} exists: a voucher with shards keeps nothing there.
func (b *rig) checkNothingUnsharded() {
	b.t.Helper()
	for _, name := range []string{"stock", "meta", "buyers", "orders", "dlq", "changes"} {
		if n := b.int(b.raw.B().Exists().Key(b.key(name)).Build()); n != 0 {
			b.t.Errorf("%s was written for a voucher with shards", b.key(name))
		}
	}
}

// TestShardsPersisted: a pool persists the orders admitted on the four
// shards of a voucher, reading each shard's stream, into MariaDB, each
// exactly once, and acknowledges each on its shard: on one Redis, and on a
// Cluster, where the shards are on several masters.
func TestShardsPersisted(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		testShardsPersisted(t, newShardRig(t, 4, 400))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := faults.SharedCluster(t)
		b := newShardRigOn(t, cl.URL, "t"+testenv.Random(), 4, 400)
		masters := map[string]bool{}
		for i := range 4 {
			masters[cl.MasterOf(t, b.shardKey(i, "orders")).Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("the 4 shards are on %d master(s), want several", len(masters))
		}
		testShardsPersisted(t, b)
	})
}

func testShardsPersisted(t *testing.T, b *rig) {
	ctx := context.Background()
	per := b.admitShards(1, 200)
	reg := prometheus.NewRegistry()
	p := b.poolWith(Config{
		Consumer: "w", Block: 50 * time.Millisecond, Lease: 5 * time.Second, BatchSize: 20,
		ReclaimEvery: 100 * time.Millisecond, WatchEvery: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}, nil, nil, reg, true)
	p.Watch(b.voucher)
	testenv.WaitFor(t, 30*time.Second, "200 orders persisted and every shard drained", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 200 && b.drained()
	})
	if v := b.dbVoucher(); v.Stock != 200 {
		t.Errorf("database stock %d, want 200: one decrement an order", v.Stock)
	}
	if n := testutil.ToFloat64(p.metrics.persisted); n != 200 {
		t.Errorf("%v orders persisted, want 200: each once", n)
	}
	if n := testutil.ToFloat64(p.metrics.redelivered); n != 0 {
		t.Errorf("%v orders found saved already, want 0", n)
	}
	for i, n := range per {
		if left := b.int(b.raw.B().Get().Key(b.shardKey(i, "stock")).Build()); left != 100-n {
			t.Errorf("shard %d's stock %d, want %d: persisting touches none", i, left, 100-n)
		}
	}
	b.checkShardsSettled()
}

// savesNothing is a store whose saves wait until their context ends: a
// pool on it holds every batch it reads, as a consumer that was killed
// does.
type savesNothing struct {
	Store
	calls atomic.Int64
}

func (s *savesNothing) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	s.calls.Add(int64(len(orders)))
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestShardsReclaimed: a consumer stopped in the middle of its batches,
// one on each shard, never acknowledges them; a second pool takes them
// over on every shard once the lease has run out, and persists each once.
func TestShardsReclaimed(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 4, 400)
	ctx := context.Background()
	per := b.admitShards(1, 120)
	stuck := &savesNothing{Store: b.store}
	cfg := Config{
		Block: 50 * time.Millisecond, Lease: 2 * time.Second, DrainTimeout: 50 * time.Millisecond,
		ReclaimEvery: 100 * time.Millisecond, WatchEvery: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}
	cfg.Consumer = "killed"
	killed := b.poolWith(cfg, nil, stuck, prometheus.NewRegistry(), true)
	killed.Watch(b.voucher)
	testenv.WaitFor(t, 20*time.Second, "every shard's messages read by the first pool, its saves under way", func() bool {
		for i, n := range per {
			if b.shardPending(i, "killed") != n {
				return false
			}
		}
		return stuck.calls.Load() >= 120
	})
	killed.Stop()
	if n, _ := b.store.CountOrders(ctx, b.voucher.ID); n != 0 {
		t.Fatalf("%d orders persisted by a pool whose saves never end", n)
	}
	for i, n := range per {
		if got := b.shardPending(i, "killed"); got != n {
			t.Fatalf("shard %d: %d messages left pending with the stopped consumer, want %d", i, got, n)
		}
	}

	cfg.Consumer = "live"
	live := b.poolWith(cfg, nil, nil, prometheus.NewRegistry(), true)
	live.Watch(b.voucher)
	testenv.WaitFor(t, 30*time.Second, "120 orders persisted and every shard drained", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 120 && b.drained()
	})
	for i := range per {
		if n := b.shardPending(i, "killed"); n != 0 {
			t.Errorf("shard %d: the stopped consumer still holds %d messages", i, n)
		}
	}
	// 120 or more: a loaded machine may hold up a renewal of the live
	// pool's own claims past the lease.
	if n := testutil.ToFloat64(live.metrics.reclaimed); n < 120 {
		t.Errorf("%v messages reclaimed, want every one of the stopped consumer's 120, on every shard", n)
	}
	if n := testutil.ToFloat64(live.metrics.persisted); n != 120 {
		t.Errorf("%v orders persisted, want 120", n)
	}
	if v := b.dbVoucher(); v.Stock != 280 {
		t.Errorf("database stock %d, want 280", v.Stock)
	}
	b.checkShardsSettled()
}

// TestShardPoisonDeadLettered: a malformed message on shard 2 goes to
// shard 2's dead letters, and its unit and buyer slot back to shard 2, not
// to shard 0 (nor to the voucher's unsharded keys); the other shards'
// orders are persisted.
func TestShardPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 4, 40)
	ctx := context.Background()
	per := b.admitShards(1, 20)
	var badUser int64 = 1000
	for seckill.HomeShard(badUser, 4) != 2 {
		badUser++
	}
	badID, i := b.admitOnShard(badUser, "yesterday")
	if i != 2 {
		t.Fatalf("buyer %d admitted on shard %d, want 2", badUser, i)
	}
	p := b.pool("w", true, nil)
	p.Watch(b.voucher)
	dlq := func(i int) int64 { return b.int(b.raw.B().Xlen().Key(b.shardKey(i, "dlq")).Build()) }
	testenv.WaitFor(t, 20*time.Second, "20 orders persisted and the bad one dead-lettered", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 20 && dlq(2) == 1 && b.drained()
	})
	for i, n := range per {
		if got := dlq(i); i != 2 && got != 0 {
			t.Errorf("shard %d holds %d dead letters, want 0", i, got)
		}
		// Shard 2 got the bad message's unit back; the others kept theirs.
		if got := b.int(b.raw.B().Get().Key(b.shardKey(i, "stock")).Build()); got != 10-n {
			t.Errorf("shard %d's stock %d, want %d", i, got, 10-n)
		}
	}
	if err := b.raw.Do(ctx, b.raw.B().Hget().Key(b.shardKey(2, "buyers")).Field(fmt.Sprint(badUser)).Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Errorf("the bad message's buyer still holds a slot on shard 2 (err %v)", err)
	}
	recs, err := b.cache.DeadLetters(ctx, b.voucher.ID)
	if err != nil || len(recs) != 1 || recs[0].Shard != 2 || recs[0].OrderID != badID || !recs[0].StockReturned {
		t.Errorf("dead letters %+v, %v; want the bad order's, on shard 2, its stock returned", recs, err)
	}
	o, err := b.store.Order(ctx, badID)
	if err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the bad order = %+v, %v; want failed", o, err)
	}
	b.checkNothingUnsharded()
}

// TestShardBackpressure: admission pauses per shard: the buyers whose home
// shard's stream reached the high-water mark are refused, the others go
// on, until that stream falls to the low-water mark.
func TestShardBackpressure(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 4, 400)
	ctx := context.Background()
	// Users by home shard.
	homes := make([][]int64, 4)
	for u := int64(1); len(homes[0]) < 1 || len(homes[1]) < 6 || len(homes[2]) < 1 || len(homes[3]) < 1; u++ {
		i := seckill.HomeShard(u, 4)
		homes[i] = append(homes[i], u)
	}
	for _, u := range homes[1] {
		b.admitOnShard(u, strconv.FormatInt(time.Now().UnixMilli(), 10))
	}
	b.admitOnShard(homes[3][0], strconv.FormatInt(time.Now().UnixMilli(), 10))
	p, err := New(Config{Consumer: "w", BacklogHigh: 5, BacklogLow: 2}, b.cache, b.store, nil, prometheus.NewRegistry(), b.logger)
	if err != nil {
		t.Fatal(err)
	}
	p.init(ctx)
	t.Cleanup(p.Stop)
	// Watched without readers: nothing drains but the test.
	p.mu.Lock()
	p.watching[b.voucher.ID] = &watch{shards: 4, stop: func() {}}
	p.mu.Unlock()
	p.shards.Store(b.voucher.ID, 4)

	refusing := func() []bool {
		r := make([]bool, 4)
		for i, users := range homes {
			r[i] = p.Refusing(b.voucher.ID, users[0])
			for _, u := range users[1:] {
				if p.Refusing(b.voucher.ID, u) != r[i] {
					t.Fatalf("buyers of shard %d refused unevenly", i)
				}
			}
		}
		return r
	}
	p.watchBacklog()
	if got, want := refusing(), []bool{false, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("with 6 orders waiting on shard 1 and 1 on shard 3, refusing by shard %v, want %v", got, want)
	}
	if p.Refusing(b.voucher.ID+1, homes[1][0]) {
		t.Error("another voucher's buyer refused")
	}
	// One shard above its mark makes the voucher backlogged (its
	// challenges grow harder), another voucher not.
	if !p.Backlogged(b.voucher.ID) || p.Backlogged(b.voucher.ID+1) {
		t.Errorf("Backlogged = %v, and of another voucher %v; want true, false", p.Backlogged(b.voucher.ID), p.Backlogged(b.voucher.ID+1))
	}
	msgs, err := b.cache.ReadOrders(ctx, b.shard(1), "w", 4, 0)
	if err != nil || len(msgs) != 4 {
		t.Fatalf("read 4 of shard 1: %d, %v", len(msgs), err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EntryID
	}
	if _, err := b.cache.AckOrders(ctx, b.shard(1), ids...); err != nil {
		t.Fatal(err)
	}
	p.watchBacklog()
	if got := refusing(); slices.Contains(got, true) {
		t.Errorf("with shard 1's backlog at the low-water mark, refusing by shard %v, want none", got)
	}
	if p.Backlogged(b.voucher.ID) {
		t.Error("Backlogged at the low-water mark, want false")
	}
}

// TestShardStreamLost: when Redis loses one shard's stream, that shard's
// reader has the voucher rebuilt (the rebuild finds which shards are
// lost), then reads the shard again.
func TestShardStreamLost(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 3, 300)
	ctx := context.Background()
	b.admitShards(1, 30)
	var rebuilds, others atomic.Int64
	// Stands in for the rebuild of the lost shard: its stream and group
	// made again.
	rebuild := func(ctx context.Context, voucherID int64) error {
		if voucherID != b.voucher.ID {
			others.Add(1)
			return nil
		}
		rebuilds.Add(1)
		err := b.raw.Do(ctx, b.raw.B().XgroupCreate().Key(b.shardKey(1, "orders")).Group(redis.Group).Id("0").Mkstream().Build()).Error()
		if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
			return err
		}
		return nil
	}
	p, err := New(Config{Consumer: "w", Block: 50 * time.Millisecond, WatchEvery: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		b.cache, b.store, rebuild, prometheus.NewRegistry(), b.logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	p.Watch(b.voucher)
	testenv.WaitFor(t, 20*time.Second, "30 orders persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 30 && b.drained()
	})
	if err := b.raw.Do(ctx, b.raw.B().Del().Key(b.shardKey(1, "orders")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the voucher rebuilt", func() bool { return rebuilds.Load() > 0 })
	var more int64
	for u := int64(100); more < 5; u++ {
		if seckill.HomeShard(u, 3) == 1 {
			b.admitOnShard(u, strconv.FormatInt(time.Now().UnixMilli(), 10))
			more++
		}
	}
	testenv.WaitFor(t, 20*time.Second, "5 more orders of shard 1 persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 35 && b.drained()
	})
	if n := others.Load(); n != 0 {
		t.Errorf("%d rebuilds of another voucher", n)
	}
	if got := testutil.ToFloat64(p.metrics.streamsLost); got < 1 {
		t.Errorf("%v streams counted lost, want 1 or more", got)
	}
}

// finishing is the rig's stream that can finish transfers, and records for
// which vouchers it was asked to.
type finishing struct {
	Stream
	mu    sync.Mutex
	asked []int64
}

func (f *finishing) FinishTransfers(ctx context.Context, voucherID int64, olderThan time.Duration) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if olderThan != staleTransfer {
		return 0, fmt.Errorf("asked for transfers older than %v, want %v", olderThan, staleTransfer)
	}
	f.asked = append(f.asked, voucherID)
	return 1, nil
}

// TestReclaimFinishesTransfers: each reclaim pass has the stale transfers
// of stock between a voucher's shards finished, for the vouchers with
// shards only.
func TestReclaimFinishesTransfers(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 3, 30)
	f := &finishing{Stream: b.cache}
	p := b.poolWith(Config{Consumer: "w"}, f, nil, prometheus.NewRegistry(), false)
	unsharded := b.voucher.ID + 1000
	p.mu.Lock()
	p.watching[b.voucher.ID] = &watch{shards: 3, stop: func() {}}
	p.watching[unsharded] = &watch{shards: 1, stop: func() {}}
	p.mu.Unlock()
	p.reclaimAll()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.asked, []int64{b.voucher.ID}) {
		t.Errorf("transfers finished for vouchers %v, want %d's alone", f.asked, b.voucher.ID)
	}
}

// TestShardsRetired: a voucher with shards past its retention is dropped
// from Redis, every shard, only once every shard's stream is drained; the
// dead letters of every shard have their orders failed in the database
// first; then its readers stop.
func TestShardsRetired(t *testing.T) {
	t.Parallel()
	b := newShardRig(t, 3, 30)
	ctx := context.Background()
	// A dead letter on shard 1 whose order the database lacks as failed.
	var deadUser int64 = 1000
	for seckill.HomeShard(deadUser, 3) != 1 {
		deadUser++
	}
	dead, _ := b.admitOnShard(deadUser, strconv.FormatInt(time.Now().UnixMilli(), 10))
	msgs, err := b.cache.ReadOrders(ctx, b.shard(1), "x", 10, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read the order to dead-letter: %v, %v", msgs, err)
	}
	if _, err := b.cache.DeadLetter(ctx, msgs[0], seckill.DeadLetter{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	b.admitShards(1, 12)
	var clock atomic.Pointer[time.Time]
	now := time.Now()
	clock.Store(&now)
	release := make(chan struct{})
	p := b.poolWith(Config{
		Consumer: "r", Block: 50 * time.Millisecond, Lease: time.Second, ReclaimEvery: 100 * time.Millisecond,
		WatchEvery: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Retention: time.Hour,
		Clock: func() time.Time { return *clock.Load() },
	}, nil, heldStore{Store: b.store, release: release}, prometheus.NewRegistry(), true)
	p.Watch(b.voucher)
	testenv.WaitFor(t, 10*time.Second, "the orders read and held", func() bool {
		return b.shardPending(0, "r")+b.shardPending(1, "r")+b.shardPending(2, "r") == 12
	})
	kept := func(names ...string) int64 {
		var n int64
		for i := range 3 {
			for _, name := range names {
				n += b.int(b.raw.B().Exists().Key(b.shardKey(i, name)).Build())
			}
		}
		return n
	}

	past := b.voucher.EndTime.Add(2 * time.Hour)
	clock.Store(&past)
	if err := p.refresh(); err != nil {
		t.Fatal(err)
	}
	if n := kept("orders"); n != 3 {
		t.Fatalf("%d of the shards' streams left while their orders wait for the database, want 3", n)
	}
	if !contains(p.watched(), b.voucher.ID) {
		t.Fatal("the voucher's readers stopped while its orders wait for the database")
	}
	close(release)
	testenv.WaitFor(t, 10*time.Second, "every shard's keys deleted once drained", func() bool {
		return kept("stock", "buyers", "orders", "dlq") == 0
	})
	if n, _ := b.store.CountOrders(ctx, b.voucher.ID); n != 12 {
		t.Errorf("%d orders created, want the 12 held", n)
	}
	if o, err := b.store.Order(ctx, dead); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("shard 1's dead letter's order = %+v, %v; want failed in the database", o, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the readers stopped", func() bool { return !contains(p.watched(), b.voucher.ID) })
	b.checkNothingUnsharded()
}
