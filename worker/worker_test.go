package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/postgres"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

// rig is a voucher on sale on the real Redis and a real database, each
// isolated for the test, with a raw Redis client to look at the keys.
type rig struct {
	t       *testing.T
	store   seckill.Store
	dbURL   string
	cache   *redis.Client
	raw     rueidis.Client
	prefix  string
	voucher *seckill.Voucher
	logger  *slog.Logger
	nextID  atomic.Int64
}

func newRig(t *testing.T, backend string, stock int64) *rig {
	t.Helper()
	return newRigOn(t, backend, "", stock)
}

// newRigOn is newRig on the database of dbURL, or on a new one of the
// test's own if dbURL is "". The sqlite backend needs dbURL.
func newRigOn(t *testing.T, backend, dbURL string, stock int64) *rig {
	t.Helper()
	ctx := context.Background()
	b := &rig{t: t, logger: testenv.Logger(t), dbURL: dbURL}
	b.nextID.Store(time.Now().UnixMilli() << 22)
	var err error
	switch backend {
	case "mysql":
		if b.dbURL == "" {
			b.dbURL = testenv.MySQLURL(t)
		}
		b.store, err = mysql.Open(ctx, b.dbURL, 8)
	case "postgres":
		if b.dbURL == "" {
			b.dbURL = testenv.PostgresURL(t)
		}
		b.store, err = postgres.Open(ctx, b.dbURL, 8)
	case "sqlite":
		b.store, err = sqlite.Open(ctx, b.dbURL, 8)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.store.Close() })
	if err := b.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	url := testenv.RedisURL(t)
	b.prefix = testenv.RedisPrefix(t)
	if b.cache, err = redis.Open(ctx, redis.Config{URL: url, Prefix: b.prefix}, b.logger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.cache.Close)
	b.raw = testenv.RawRedis(t, url)
	now := time.Now().UTC().Truncate(time.Microsecond)
	b.voucher = &seckill.Voucher{Title: "t", Stock: stock, InitialStock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
	if err := b.store.CreateVoucher(ctx, b.voucher); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cache.LoadVoucher(ctx, b.voucher); err != nil {
		t.Fatal(err)
	}
	id, err := b.cache.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cache.ArmAdmission(ctx, id); err != nil {
		t.Fatal(err)
	}
	return b
}

// key is one of the voucher's Redis keys, e.g. "stock".
func (b *rig) key(name string) string {
	return testenv.VoucherKey(b.prefix, b.voucher.ID, name)
}

// admit admits the user and returns the order id.
func (b *rig) admit(user int64) int64 {
	b.t.Helper()
	id := b.nextID.Add(1)
	if err := b.cache.Admit(context.Background(), b.admission(user, id)); err != nil {
		b.t.Fatalf("admit user %d: %v", user, err)
	}
	return id
}

// reserve admits the user as the queue mode does, without the stream, and
// returns the order to queue.
func (b *rig) reserve(user int64) (*seckill.Order, error) {
	id := b.nextID.Add(1)
	if err := b.cache.Reserve(context.Background(), b.admission(user, id)); err != nil {
		return nil, err
	}
	return &seckill.Order{ID: id, UserID: user, VoucherID: b.voucher.ID, Status: seckill.OrderPending, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}, nil
}

// admission is the user's admission to the rig's voucher with order id.
func (b *rig) admission(user, id int64) seckill.Admission {
	return seckill.Admission{VoucherID: b.voucher.ID, Generation: b.voucher.Generation, UserID: user, OrderID: id}
}

// pool returns a pool on the rig's stream. With start, it reads and
// reclaims on its own; without, the test drives it.
func (b *rig) pool(consumer string, start bool, store Store) *Pool {
	b.t.Helper()
	return b.poolWith(Config{
		Consumer:     consumer,
		Block:        50 * time.Millisecond,
		Lease:        time.Second,
		ReclaimEvery: 100 * time.Millisecond,
		WatchEvery:   100 * time.Millisecond,
		BackoffMax:   200 * time.Millisecond,
	}, nil, store, prometheus.NewRegistry(), start)
}

// poolWith is pool with cfg, on stream and store (nil: the rig's).
func (b *rig) poolWith(cfg Config, stream Stream, store Store, reg prometheus.Registerer, start bool) *Pool {
	b.t.Helper()
	if stream == nil {
		stream = b.cache
	}
	if store == nil {
		store = b.store
	}
	// The rebuild keeps the pool's clock and retention, as serve wires
	// them: else a reader that finds a retired voucher's stream gone
	// (TestRetire) would rebuild it as a sale still kept.
	vs := &seckill.VoucherService{Store: b.store, Logger: b.logger, Clock: cfg.Clock.Now, Retention: cfg.Retention}
	ledger := redisledger.New(b.cache, vs, b.logger)
	vs.Ledger = ledger
	p, err := New(cfg, stream, store, ledger.Rebuild, reg, b.logger)
	if err != nil {
		b.t.Fatal(err)
	}
	if start {
		if err := p.Start(context.Background()); err != nil {
			b.t.Fatal(err)
		}
	} else {
		p.init(context.Background())
	}
	b.t.Cleanup(p.Stop)
	return p
}

func (b *rig) int(cmd rueidis.Completed) int64 {
	b.t.Helper()
	n, err := b.raw.Do(context.Background(), cmd).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		b.t.Fatal(err)
	}
	return n
}

func (b *rig) dlqLen() int64     { return b.int(b.raw.B().Xlen().Key(b.key("dlq")).Build()) }
func (b *rig) redisStock() int64 { return b.int(b.raw.B().Get().Key(b.key("stock")).Build()) }
func (b *rig) pending() int64 {
	b.t.Helper()
	res, err := b.raw.Do(context.Background(), b.raw.B().Xpending().Key(b.key("orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		b.t.Fatal(err)
	}
	n, _ := res[0].AsInt64()
	return n
}

func (b *rig) dbVoucher() *seckill.Voucher {
	b.t.Helper()
	v, err := b.store.Voucher(context.Background(), b.voucher.ID)
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// TestRedeliveredThreeTimes is G4: one message delivered three times,
// twice at once to two workers, makes one row and one stock decrement.
func TestRedeliveredThreeTimes(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"mysql", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			b := newRig(t, backend, 10)
			ctx := context.Background()
			id := b.admit(42)
			pa, pb, pc := b.pool("a", false, nil), b.pool("b", false, nil), b.pool("c", false, nil)

			first, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "a", 10, 0)
			if err != nil || len(first) != 1 {
				t.Fatalf("read: %v, %v", first, err)
			}
			second, _, err := b.cache.ClaimStale(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "b", 0, 10)
			if err != nil || len(second) != 1 || second[0].Deliveries != 2 {
				t.Fatalf("claim: %+v, %v", second, err)
			}
			var wg sync.WaitGroup
			for _, run := range []struct {
				p   *Pool
				msg seckill.OrderMessage
			}{{pa, first[0]}, {pb, second[0]}} {
				wg.Go(func() { run.p.persist([]seckill.OrderMessage{run.msg}) })
			}
			wg.Wait()
			// The third delivery: the message was acknowledged; put it back as
			// a reclaimer would find it had a worker died before its ack.
			if n := b.pending(); n != 0 {
				t.Fatalf("%d messages pending after two deliveries settled, want 0", n)
			}
			third := first[0]
			third.Deliveries = 3
			pc.persist([]seckill.OrderMessage{third})

			if n, err := b.store.CountOrders(ctx, b.voucher.ID); err != nil || n != 1 {
				t.Fatalf("orders in the database = %d, %v; want 1", n, err)
			}
			if v := b.dbVoucher(); v.Stock != 9 {
				t.Errorf("database stock %d, want 9 (one decrement)", v.Stock)
			}
			o, err := b.store.Order(ctx, id)
			if err != nil || o.Status != seckill.OrderCreated {
				t.Errorf("order = %+v, %v; want created", o, err)
			}
			if n := b.dlqLen(); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
		})
	}
}

// TestMalformedMessage: a message that cannot be read goes to the dead
// letters with its stock and buyer slot given back and its order failed,
// while the other orders flow.
func TestMalformedMessage(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 100)
	ctx := context.Background()
	for u := range int64(20) {
		b.admit(100 + u)
	}
	// An admission whose message is malformed: stock and slot taken as
	// admit.lua does, and a message whose admission time is garbage.
	const badUser, badID = 999, 777
	for _, cmd := range []rueidis.Completed{
		b.raw.B().Decr().Key(b.key("stock")).Build(),
		b.raw.B().Hset().Key(b.key("buyers")).FieldValue().FieldValue(fmt.Sprint(badUser), fmt.Sprint(badID)).Build(),
		b.raw.B().Xadd().Key(b.key("orders")).Id("*").FieldValue().FieldValue("id", fmt.Sprint(badID)).FieldValue("user", fmt.Sprint(badUser)).
			FieldValue("voucher", fmt.Sprint(b.voucher.ID)).FieldValue("at", "yesterday").Build(),
	} {
		if err := b.raw.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for u := range int64(20) {
		b.admit(200 + u)
	}
	b.pool("w", true, nil)
	testenv.WaitFor(t, 20*time.Second, "40 orders persisted and the bad one dead-lettered", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 40 && b.dlqLen() == 1
	})
	if got := b.redisStock(); got != 60 {
		t.Errorf("Redis stock %d, want 60: the bad message's unit given back", got)
	}
	if err := b.raw.Do(ctx, b.raw.B().Hget().Key(b.key("buyers")).Field(fmt.Sprint(badUser)).Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Errorf("the bad message's buyer still holds a slot (err %v)", err)
	}
	o, err := b.store.Order(ctx, badID)
	if err != nil || o.Status != seckill.OrderFailed || !strings.Contains(o.Reason, "malformed") {
		t.Errorf("the bad order = %+v, %v; want failed, malformed", o, err)
	}
	testenv.WaitFor(t, 5*time.Second, "nothing pending", func() bool { return b.pending() == 0 })
}

// TestDatabaseDownThenBack: while the database refuses connections, the
// workers retry without acknowledging or dead-lettering anything, and all
// drains when it is back.
func TestDatabaseDownThenBack(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 100)
	ctx := context.Background()
	proxy := faults.StartProxy(t, "127.0.0.1:3306")
	viaProxy, err := mysql.Open(ctx, strings.Replace(b.dbURL, "127.0.0.1:3306", proxy.Addr(), 1), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaProxy.Close() })
	proxy.Down()
	for u := range int64(30) {
		b.admit(300 + u)
	}
	p := b.pool("w", true, viaProxy)
	p.Watch(b.voucher)
	// Read in one batch, and held unacknowledged: a worker is retrying.
	testenv.WaitFor(t, 10*time.Second, "30 messages read", func() bool { return b.pending() == 30 })
	if n, _ := b.store.CountOrders(ctx, b.voucher.ID); n != 0 {
		t.Fatalf("%d orders persisted with the database down", n)
	}
	proxy.Up()
	testenv.WaitFor(t, 20*time.Second, "30 orders persisted after the database is back", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 30
	})
	testenv.WaitFor(t, 5*time.Second, "nothing pending", func() bool { return b.pending() == 0 })
	if n := b.dlqLen(); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	if v := b.dbVoucher(); v.Stock != 70 {
		t.Errorf("database stock %d, want 70", v.Stock)
	}
}

// TestStreamLost: when Redis loses a voucher (its stream and group, its
// stock and buyers), the reader rebuilds it from the database, with the
// buyers of the orders already persisted, and goes on.
func TestStreamLost(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 50)
	ctx := context.Background()
	b.pool("w", true, nil)
	for u := range int64(10) {
		b.admit(400 + u)
	}
	testenv.WaitFor(t, 10*time.Second, "10 orders persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 10
	})
	if err := b.raw.Do(ctx, b.raw.B().Del().Key(b.key("stock"), b.key("meta"), b.key("buyers"), b.key("orders")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "voucher rebuilt", func() bool {
		return b.int(b.raw.B().Exists().Key(b.key("stock")).Build()) == 1
	})
	if got := b.redisStock(); got != 40 {
		t.Errorf("rebuilt stock %d, want 40", got)
	}
	// The buyers persisted before the loss are known again.
	err := b.cache.Admit(ctx, b.admission(400, b.nextID.Add(1)))
	if !errors.Is(err, seckill.ErrDuplicateOrder) {
		t.Errorf("a persisted buyer buying again after the rebuild: %v, want ErrDuplicateOrder", err)
	}
	for u := range int64(5) {
		b.admit(500 + u)
	}
	testenv.WaitFor(t, 10*time.Second, "15 orders persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 15
	})
	if v := b.dbVoucher(); v.Stock != 35 {
		t.Errorf("database stock %d, want 35", v.Stock)
	}
}

// loseAdmission makes Redis lose the buyer's admission the way it loses
// data: a restart from an older snapshot, a failover to a replica behind,
// lose the admission script's writes together, the buyer's slot and the
// unit of stock it took (and the stream entry, long acknowledged here).
func (b *rig) loseAdmission(user int64) {
	b.t.Helper()
	ctx := context.Background()
	for _, res := range b.raw.DoMulti(ctx,
		b.raw.B().Multi().Build(),
		b.raw.B().Hdel().Key(b.key("buyers")).Field(fmt.Sprint(user)).Build(),
		b.raw.B().Incr().Key(b.key("stock")).Build(),
		b.raw.B().Exec().Build(),
	) {
		if err := res.Error(); err != nil {
			b.t.Fatal(err)
		}
	}
}

// checkAdmittedTwice checks the state after the second order of a buyer
// Redis admitted twice was settled: it failed in the database, the buyer's
// slot in Redis holds the first, and the stock the second took stays
// taken, for it counts the first: remaining + created + pending == stock.
func (b *rig) checkAdmittedTwice(user, first, second, pending int64) {
	b.t.Helper()
	ctx := context.Background()
	o, err := b.store.Order(ctx, second)
	if err != nil || o.Status != seckill.OrderFailed {
		b.t.Errorf("second order = %+v, %v; want failed", o, err)
	}
	slot, err := b.raw.Do(ctx, b.raw.B().Hget().Key(b.key("buyers")).Field(fmt.Sprint(user)).Build()).AsInt64()
	if err != nil || slot != first {
		b.t.Errorf("buyer slot = %d, %v; want the persisted order %d", slot, err, first)
	}
	created, err := b.store.CountOrders(ctx, b.voucher.ID)
	if err != nil || created != 1 {
		b.t.Errorf("%d orders created in the database (%v), want 1", created, err)
	}
	if left := b.redisStock(); left+created+pending != b.voucher.InitialStock {
		b.t.Errorf("Redis stock %d + %d created + %d pending = %d, want the initial stock %d: the second admission's unit must stay taken",
			left, created, pending, left+created+pending, b.voucher.InitialStock)
	}
}

// buyTheRest admits new buyers with admit until one is refused as sold
// out, and returns the orders admitted.
func (b *rig) buyTheRest(admit func(user int64) (*seckill.Order, error)) []*seckill.Order {
	b.t.Helper()
	var sold []*seckill.Order
	for user := int64(1000); ; user++ {
		o, err := admit(user)
		if errors.Is(err, seckill.ErrSoldOut) {
			return sold
		}
		if err != nil {
			b.t.Fatalf("admit user %d: %v", user, err)
		}
		sold = append(sold, o)
		if len(sold) > int(b.voucher.InitialStock) {
			b.t.Fatalf("%d buyers admitted to a stock of %d", len(sold), b.voucher.InitialStock)
		}
	}
}

// checkSoldOut checks that the later buyers bought exactly what was left,
// and that every order answered as admitted was created.
func (b *rig) checkSoldOut(sold []*seckill.Order) {
	b.t.Helper()
	ctx := context.Background()
	if want := b.voucher.InitialStock - 1; int64(len(sold)) != want {
		b.t.Errorf("later buyers bought %d, want the %d left", len(sold), want)
	}
	testenv.WaitFor(b.t, 20*time.Second, "the later orders settled", func() bool {
		created, _ := b.store.CountOrders(ctx, b.voucher.ID)
		failed, _ := b.store.CountFailedOrders(ctx, b.voucher.ID)
		return created+failed == 1+int64(len(sold))+1
	})
	for _, o := range sold {
		if got, err := b.store.Order(ctx, o.ID); err != nil || got.Status != seckill.OrderCreated {
			b.t.Errorf("order %d answered as admitted = %+v, %v; want created", o.ID, got, err)
		}
	}
	if v := b.dbVoucher(); v.Stock != 0 {
		b.t.Errorf("database stock %d, want 0", v.Stock)
	}
}

// TestBuyerAdmittedTwice: Redis loses a buyer's persisted order together
// with the unit it took, and admits the buyer again. The worker finds the
// buyer's order in the database: the second order goes to the dead
// letters, failed, the buyer keeps the first, and its unit stays taken: a
// later buyer can buy what is left, and no more.
func TestBuyerAdmittedTwice(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	p := b.pool("w", true, nil)
	first := b.admit(7)
	testenv.WaitFor(t, 10*time.Second, "first order persisted and acknowledged", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 1 && b.pending() == 0
	})
	b.loseAdmission(7)
	second := b.admit(7)
	testenv.WaitFor(t, 10*time.Second, "second order dead-lettered", func() bool { return b.dlqLen() == 1 && b.pending() == 0 })
	b.checkAdmittedTwice(7, first, second, b.pending())
	if got := testutil.ToFloat64(p.metrics.doubleAdmissions); got != 1 {
		t.Errorf("double admissions metric = %v, want 1", got)
	}

	sold := b.buyTheRest(func(user int64) (*seckill.Order, error) {
		id := b.nextID.Add(1)
		return &seckill.Order{ID: id}, b.cache.Admit(ctx, b.admission(user, id))
	})
	b.checkSoldOut(sold)
	if n := b.dlqLen(); n != 1 {
		t.Errorf("%d dead letters, want 1: the second order's", n)
	}
}

// queue returns a queue mode's queue with cfg that writes to store (nil:
// the rig's database), started if start.
func (b *rig) queue(cfg QueueConfig, store Store, reg prometheus.Registerer, start bool) *Queue {
	b.t.Helper()
	if store == nil {
		store = b.store
	}
	q, err := NewQueue(cfg, store, b.cache, reg, b.logger)
	if err != nil {
		b.t.Fatal(err)
	}
	if start {
		if err := q.Start(context.Background()); err != nil {
			b.t.Fatal(err)
		}
	}
	b.t.Cleanup(q.Stop)
	return q
}

// offer queues o, failing the test if the queue refuses it.
func offer(t *testing.T, q *Queue, o *seckill.Order) {
	t.Helper()
	if !q.Offer(o) {
		t.Fatalf("the queue refused order %d", o.ID)
	}
}

// TestQueueBuyerAdmittedTwice is TestBuyerAdmittedTwice in the queue mode:
// a reserved order of a buyer Redis admitted twice fails, the buyer keeps
// the order in the database, and the unit stays taken.
func TestQueueBuyerAdmittedTwice(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	q := b.queue(QueueConfig{BackoffMax: 200 * time.Millisecond}, nil, prometheus.NewRegistry(), true)
	first, err := b.reserve(7)
	if err != nil {
		t.Fatal(err)
	}
	offer(t, q, first)
	testenv.WaitFor(t, 10*time.Second, "first order persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 1
	})
	b.loseAdmission(7)
	second, err := b.reserve(7)
	if err != nil {
		t.Fatalf("the buyer Redis forgot is not admitted again: %v", err)
	}
	offer(t, q, second)
	testenv.WaitFor(t, 10*time.Second, "second order settled", func() bool {
		o, err := b.store.Order(ctx, second.ID)
		if err != nil || o.Status != seckill.OrderFailed {
			return false
		}
		slot, err := b.raw.Do(ctx, b.raw.B().Hget().Key(b.key("buyers")).Field("7").Build()).AsInt64()
		return err != nil || slot != second.ID // the slot was settled, one way or the other
	})
	b.checkAdmittedTwice(7, first.ID, second.ID, int64(len(q.ch)))

	sold := b.buyTheRest(func(user int64) (*seckill.Order, error) {
		o, err := b.reserve(user)
		if err == nil {
			offer(t, q, o)
		}
		return o, err
	})
	b.checkSoldOut(sold)
}

// TestReclaimAndReap: a consumer that read messages and died is relieved
// of them after the lease by a live one, and removed from the group once
// it holds nothing.
func TestReclaimAndReap(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 100)
	ctx := context.Background()
	for u := range int64(25) {
		b.admit(600 + u)
	}
	// "dead" reads everything and never acknowledges.
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: b.voucher.ID}, "dead", 100, 0)
	if err != nil || len(msgs) != 25 {
		t.Fatalf("dead consumer read %d, %v", len(msgs), err)
	}
	b.pool("live", true, nil)
	testenv.WaitFor(t, 15*time.Second, "the dead consumer's orders persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 25
	})
	testenv.WaitFor(t, 15*time.Second, "the dead consumer removed", func() bool {
		res, err := b.raw.Do(ctx, b.raw.B().XinfoConsumers().Key(b.key("orders")).Group(redis.Group).Build()).ToArray()
		if err != nil {
			return false
		}
		for _, c := range res {
			m, _ := c.AsStrMap()
			if m["name"] == "dead" {
				return false
			}
		}
		return true
	})
	if n := b.dlqLen(); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}

// TestPoolWidensWithBacklog: the pool persists more batches at once while
// a backlog waits, up to its maximum, and narrows again once drained.
func TestPoolWidensWithBacklog(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 2000)
	ctx := context.Background()
	for u := range int64(1000) {
		b.admit(10_000 + u)
	}
	vs := &seckill.VoucherService{Store: b.store, Logger: b.logger, Clock: time.Now}
	ledger := redisledger.New(b.cache, vs, b.logger)
	vs.Ledger = ledger
	p, err := New(Config{
		Consumer: "wide", Workers: 2, WorkersMax: 6, BatchSize: 10,
		Block: 50 * time.Millisecond, BacklogEvery: 20 * time.Millisecond,
	}, b.cache, b.store, ledger.Rebuild, prometheus.NewRegistry(), b.logger)
	if err != nil {
		t.Fatal(err)
	}
	p.init(ctx)
	t.Cleanup(p.Stop)
	p.mu.Lock()
	p.watching[b.voucher.ID] = &watch{shards: 1, stop: func() {}}
	p.mu.Unlock()
	p.watchBacklog()
	if w := p.WorkerStats(); w.Allowed != 6 {
		t.Fatalf("with 1,000 orders waiting, %d batches allowed at once, want the maximum 6", w.Allowed)
	}
	p.mu.Lock()
	delete(p.watching, b.voucher.ID)
	p.mu.Unlock()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.Watch(b.voucher)
	testenv.WaitFor(t, 30*time.Second, "1,000 orders persisted", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 1000
	})
	testenv.WaitFor(t, 10*time.Second, "the pool narrowed again", func() bool { return p.WorkerStats().Allowed == 2 })
}
