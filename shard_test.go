package seckill_test

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
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
)

// shardRig is the service on the shared Cluster under a key prefix of its
// own, for sales of sharded vouchers.
type shardRig struct {
	t      *testing.T
	cl     *faults.Cluster
	prefix string
	cache  *redis.Client
	raw    rueidis.Client
	vs     *seckill.VoucherService
	orders *seckill.OrderService
}

func newShardRig(t *testing.T) *shardRig {
	t.Helper()
	ctx := context.Background()
	r := &shardRig{t: t, cl: faults.SharedCluster(t), prefix: "t" + testenv.Random()}
	logger := testenv.Logger(t)
	var err error
	if r.cache, err = redis.Open(ctx, redis.Config{URL: r.cl.URL, Prefix: r.prefix}, logger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cache.Close)
	r.raw = testenv.RawRedis(t, r.cl.URL)
	store := apptest.Store(t)
	r.vs = newVouchers(store, r.cache, logger, time.Now)
	r.vs.Placer = r.cache
	if err := ledgerOf(r.vs).Restore(ctx); err != nil {
		t.Fatal(err)
	}
	r.orders = orderService(r.vs, store, 1_000_000)
	return r
}

// voucher creates a voucher on sale with stock in shards shards: its
// creation places them on the Cluster's masters.
func (r *shardRig) voucher(stock int64, shards int) *seckill.Voucher {
	r.t.Helper()
	ctx := context.Background()
	v := onSale("sharded", stock)
	v.Shards = shards
	view, err := r.vs.Create(ctx, v)
	if err != nil {
		r.t.Fatal(err)
	}
	return view.Voucher
}

// key is the key name of shard i of v.
func (r *shardRig) key(v *seckill.Voucher, i int, name string) string {
	return r.prefix + ":{" + v.ShardTag(i) + "}:" + name
}

// int reads an integer answer of a raw command; nil is 0.
func (r *shardRig) int(args ...string) int64 {
	r.t.Helper()
	n, err := r.raw.Do(context.Background(), r.raw.B().Arbitrary(args...).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		r.t.Fatalf("%v: %v", args, err)
	}
	return n
}

// shards reads, per shard of v, its stock, its buyers and the transfers it
// has received or refused; and the master that holds it.
func (r *shardRig) shards(v *seckill.Voucher) (stock, buyers, xin []int64, masters []string) {
	r.t.Helper()
	for i := range v.ShardCount() {
		stock = append(stock, r.int("GET", r.key(v, i, "stock")))
		buyers = append(buyers, r.int("HLEN", r.key(v, i, "buyers")))
		xin = append(xin, r.int("HLEN", r.key(v, i, "xin")))
		masters = append(masters, r.cl.MasterOf(r.t, r.key(v, i, "stock")).Addr)
		if n := r.int("HLEN", r.key(v, i, "xout")); n != 0 {
			r.t.Errorf("shard %d: %d transfers not settled after the sale", i, n)
		}
	}
	return stock, buyers, xin, masters
}

// answer is what one ask of a buyer got: the order admitted, or a
// duplicate's order, or sold out.
type answer struct {
	order     int64
	duplicate bool
	soldOut   bool
}

// ask buys v for user until the answer is final (not unavailable), and
// notes when it began and when it was answered.
func (r *shardRig) ask(v *seckill.Voucher, user int64) (a answer, began, answered time.Time) {
	ctx := context.Background()
	for try := 0; ; try++ {
		began = time.Now()
		o, err := r.orders.Buy(ctx, user, v.ID)
		answered = time.Now()
		var e *seckill.Error
		switch {
		case err == nil:
			return answer{order: o.ID}, began, answered
		case errors.As(err, &e) && e.Kind == seckill.ErrDuplicateOrder:
			return answer{order: e.OrderID, duplicate: true}, began, answered
		case errors.Is(err, seckill.ErrSoldOut):
			return answer{soldOut: true}, began, answered
		case errors.Is(err, seckill.ErrUnavailable) && try < 10_000:
			continue // a client asks again
		}
		r.t.Errorf("buy of user %d: %v", user, err)
		return answer{}, began, answered
	}
}

// run runs jobs 0..n-1 on a pool of workers.
func run(n, workers int, job func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				job(i)
			}
		})
	}
	wg.Wait()
}

// scale is n, or a tenth of it for -short (the race detector's runs).
func scale(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// TestShardedSaleEveryBuyerOnce: as many units as buyers in 6 shards on 3
// masters, every buyer asking twice at once: each gets exactly one order
// (the other ask answers it as a duplicate), no one is told sold out, and
// the buyers, unevenly spread over their home shards, got the stock there
// by transfers.
func TestShardedSaleEveryBuyerOnce(t *testing.T) {
	t.Parallel()
	r := newShardRig(t)
	n := scale(20_000)
	v := r.voucher(int64(n), 6)
	answers := make([][2]answer, n)
	run(2*n, 32, func(i int) {
		a, _, _ := r.ask(v, int64(i/2+1))
		answers[i/2][i%2] = a
	})
	soldOut := 0
	for u, as := range answers {
		if as[0].soldOut || as[1].soldOut {
			soldOut++
			continue
		}
		if as[0].duplicate == as[1].duplicate || as[0].order != as[1].order || as[0].order == 0 {
			t.Errorf("buyer %d got %+v: want one order, and it again as a duplicate", u+1, as)
		}
	}
	if soldOut != 0 {
		t.Errorf("%d buyers told sold out, with a unit for each", soldOut)
	}
	stock, buyers, xin, masters := r.shards(v)
	var sold, transfers int64
	for i := range stock {
		sold += buyers[i]
		transfers += xin[i]
		if stock[i] != 0 {
			t.Errorf("shard %d: %d units left", i, stock[i])
		}
	}
	if sold != int64(n) {
		t.Errorf("%d buyers hold an order in Redis, want %d", sold, n)
	}
	if transfers == 0 {
		t.Errorf("no transfer: buyers per shard %v for %d units each", buyers, n/6)
	}
	if distinct(masters) != 3 {
		t.Errorf("the 6 shards are on %v, want all 3 masters", masters)
	}
	t.Logf("buyers per shard %v, transfers received per shard %v", buyers, xin)
}

// TestShardedSaleSpreadsOverMasters: 30,000 buyers for 6,000 units in 6
// shards: exactly 6,000 sold, none twice; each master admits at least a
// fifth of them; and no buyer is told sold out before the last unit was
// taken.
func TestShardedSaleSpreadsOverMasters(t *testing.T) {
	t.Parallel()
	r := newShardRig(t)
	n, units := scale(30_000), scale(6_000)
	v := r.voucher(int64(units), 6)
	answers := make([]answer, n)
	var mu sync.Mutex
	var lastAdmitBegan, firstSoldOut time.Time
	run(n, 32, func(i int) {
		a, began, answered := r.ask(v, int64(i+1))
		answers[i] = a
		mu.Lock()
		defer mu.Unlock()
		if !a.soldOut && !a.duplicate && began.After(lastAdmitBegan) {
			lastAdmitBegan = began
		}
		if a.soldOut && (firstSoldOut.IsZero() || answered.Before(firstSoldOut)) {
			firstSoldOut = answered
		}
	})
	admitted, soldOut := 0, 0
	orders := map[int64]bool{}
	for u, a := range answers {
		switch {
		case a.soldOut:
			soldOut++
		case a.duplicate || orders[a.order]:
			t.Errorf("buyer %d: %+v, asking once", u+1, a)
		default:
			admitted++
			orders[a.order] = true
		}
	}
	if admitted != units || soldOut != n-units {
		t.Errorf("%d admitted, %d sold out; want %d and %d", admitted, soldOut, units, n-units)
	}
	if !firstSoldOut.IsZero() && lastAdmitBegan.After(firstSoldOut) {
		t.Errorf("a buyer was told sold out at %v, and another admitted after asking at %v", firstSoldOut, lastAdmitBegan)
	}
	stock, buyers, _, masters := r.shards(v)
	perMaster := map[string]int64{}
	var sold int64
	for i := range stock {
		perMaster[masters[i]] += buyers[i]
		sold += buyers[i]
	}
	if sold != int64(units) {
		t.Errorf("%d buyers hold an order in Redis, want %d", sold, units)
	}
	if len(perMaster) != 3 {
		t.Errorf("admissions on %v, want all 3 masters", perMaster)
	}
	for m, k := range perMaster {
		if 5*k < int64(units) {
			t.Errorf("master %s admitted %d of %d, less than a fifth", m, k, units)
		}
	}
	t.Logf("admitted per master %v", perMaster)
}

func distinct(ss []string) int {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return len(m)
}

// TestShardedSaleWaitsForARebuild: while a rebuild counts a voucher's
// shards (they are frozen), a buyer whose home shard is empty is told to
// try again, not sold out, an answer marked expected (the HTTP layer does
// not log it as a failed request); once it is over, they are admitted with the
// other shard's stock; then the voucher is sold out.
func TestShardedSaleWaitsForARebuild(t *testing.T) {
	t.Parallel()
	r := newShardRig(t)
	ctx := context.Background()
	v := r.voucher(2, 2)
	var users []int64
	for u := int64(1); len(users) < 3; u++ {
		if seckill.HomeShard(u, 2) == 0 {
			users = append(users, u)
		}
	}
	if _, err := r.orders.Buy(ctx, users[0], v.ID); err != nil {
		t.Fatal(err)
	}
	until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	r.int("HSET", r.key(v, 1, "meta"), "xfrozen", until)
	_, err := r.orders.Buy(ctx, users[1], v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable || e.RetryAfter <= 0 || !e.Expected {
		t.Fatalf("a buy while the other shard is frozen = %v (expected %t), want unavailable with Retry-After, expected (not logged as a failure)", err, e != nil && e.Expected)
	}
	r.int("HDEL", r.key(v, 1, "meta"), "xfrozen")
	if _, err := r.orders.Buy(ctx, users[1], v.ID); err != nil {
		t.Fatalf("a buy after the thaw = %v, want admitted", err)
	}
	// Sold out: the first buy that finds it so (a borrow found every
	// shard at 0) runs on the buyer's home shard; the buys after it are
	// answered from the sold-out memory, through the sold-out reader,
	// which reads each buyer's home shard.
	reads := &countingReader{SoldOutReader: redisLedger(r.orders).SoldOut}
	redisLedger(r.orders).SoldOut = reads
	for range 3 {
		if _, err := r.orders.Buy(ctx, users[2], v.ID); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("a buy of the third unit of two = %v, want sold out", err)
		}
	}
	if _, err := r.orders.Buy(ctx, users[1], v.ID); !errors.Is(err, seckill.ErrDuplicateOrder) {
		t.Fatalf("a buyer asking again after the sale = %v, want their order", err)
	}
	if n := reads.n.Load(); n != 3 {
		t.Errorf("%d reads of a sharded voucher's slots through the sold-out reader, want 3 (the buys after the first found it sold out)", n)
	}
}

// countingReader counts the reads of a SoldOutReader.
type countingReader struct {
	redisledger.SoldOutReader
	n atomic.Int64
}

func (c *countingReader) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	c.n.Add(1)
	return c.SoldOutReader.SoldOutBuyerOrder(ctx, userID, voucherID)
}
