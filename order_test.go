package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/soldout"
)

// lostReply is the real cache, except that Admit's answer can be lost on
// the way back (the script ran) or its request lost on the way there (it
// did not), as a network failure does either.
type lostReply struct {
	*redis.Client
	mode string // "reply": ran, answer lost; "request": never ran; "both": and the look-up fails too
}

func (l *lostReply) Admit(ctx context.Context, a seckill.Admission) error {
	return l.lose(ctx, a, l.Client.Admit)
}

// Reserve is the queue mode's admission, its answer lost the same way.
func (l *lostReply) Reserve(ctx context.Context, a seckill.Admission) error {
	return l.lose(ctx, a, l.Client.Reserve)
}

func (l *lostReply) lose(ctx context.Context, a seckill.Admission, admit func(context.Context, seckill.Admission) error) error {
	if l.mode == "reply" {
		if err := admit(ctx, a); err != nil {
			return err
		}
	}
	return fmt.Errorf("redis: admit: %w: EOF", seckill.ErrUnavailable)
}

func (l *lostReply) BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	if l.mode == "both" {
		return 0, fmt.Errorf("redis: read buyer: %w: EOF", seckill.ErrUnavailable)
	}
	return l.Client.BuyerOrder(ctx, userID, voucherID)
}

func (l *lostReply) BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error) {
	if l.mode == "both" {
		return nil, fmt.Errorf("redis: read buyer: %w: EOF", seckill.ErrUnavailable)
	}
	return l.Client.BuyerOrders(ctx, userID, voucherIDs...)
}

// counter makes order ids n+1, n+2, …, safely from many goroutines.
type counter struct{ n int64 }

func (c *counter) Next() (int64, error) { return atomic.AddInt64(&c.n, 1), nil }

// TestBuyUnknownOutcome: when admission's answer is lost, the buyer's entry
// in Redis decides: found, the order stands (200); not found, or not
// readable, the outcome is unknown (503 with Retry-After), never a guess.
func TestBuyUnknownOutcome(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("lost replies", 10))
	if err != nil {
		t.Fatal(err)
	}
	real := cacheOf(vs)
	for _, tc := range []struct {
		mode string
		ok   bool
	}{{"reply", true}, {"request", false}, {"both", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			lost := &lostReply{Client: real, mode: tc.mode}
			s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: lost, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}, Store: store, Vouchers: vs, IDs: &counter{n: map[string]int64{"reply": 100, "request": 200, "both": 300}[tc.mode]}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
			user := map[string]int64{"reply": 1, "request": 2, "both": 3}[tc.mode]
			o, err := s.Buy(ctx, user, v.ID)
			if tc.ok {
				if err != nil || o.Status != seckill.OrderPending {
					t.Fatalf("Buy with the reply lost = %+v, %v; want the pending order", o, err)
				}
				found, _ := real.BuyerOrders(ctx, user, v.ID)
				if found[v.ID] != o.ID {
					t.Errorf("Redis holds order %d for the buyer, Buy answered %d", found[v.ID], o.ID)
				}
				return
			}
			var e *seckill.Error
			if !errors.As(err, &e) || !errors.Is(err, seckill.ErrUnavailable) || e.RetryAfter <= 0 {
				t.Fatalf("Buy with the outcome unknown = %+v, %v; want ErrUnavailable with RetryAfter", o, err)
			}
			// The buyer asks again once Redis answers: one order, theirs.
			again := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: real, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}, Store: store, Vouchers: vs, IDs: &counter{n: 900 + user}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
			o, err = again.Buy(ctx, user, v.ID)
			if err != nil {
				t.Fatalf("Buy again = %v", err)
			}
			if o.ID != 901+user {
				t.Errorf("Buy again = order %d, want the new order %d", o.ID, 901+user)
			}
		})
	}
}

// queue is the queue mode's queue, recording what it is offered.
type queue struct {
	mu     sync.Mutex
	orders []*seckill.Order
}

func (q *queue) Offer(o *seckill.Order) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.orders = append(q.orders, o)
	return true
}

// TestBuyUnknownOutcomeQueued: in the queue mode, an admission whose answer
// was lost, found in the buyer's slot, is answered 200: its order must be
// queued too, or it is answered and never written.
func TestBuyUnknownOutcomeQueued(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("lost replies, queue mode", 10))
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{}
	lost := &lostReply{Client: cacheOf(vs), mode: "reply"}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: lost, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, Queue: q}, Store: store, Vouchers: vs, IDs: &counter{n: 100}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	o, err := s.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatalf("Buy with the reply lost = %v; want the pending order", err)
	}
	if len(q.orders) != 1 || q.orders[0].ID != o.ID {
		t.Errorf("queued %v after answering order %d, want it queued once", q.orders, o.ID)
	}
}

// TestBuySoldOut: once a voucher is found sold out, buyers are answered
// from memory of that fact alone: a buyer who holds an order still gets it
// back (G5), read from their own slot; the others are sold out; stock given
// back is sold again once the memory expires, and the memory is dropped
// then.
func TestBuySoldOut(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("sold out", 2))
	if err != nil {
		t.Fatal(err)
	}
	cache := &countingCache{Client: cacheOf(vs)}
	ids := &counter{n: 100}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: time.Hour}, Store: store, Vouchers: vs, IDs: ids, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	first, err := s.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 2, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 3, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("buy of the third buyer = %v, want sold out", err)
	}
	admits := cache.admits.Load()
	for range 3 {
		if _, err := s.Buy(ctx, 4, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
			t.Errorf("buy once known sold out = %v, want sold out", err)
		}
		_, err := s.Buy(ctx, 1, v.ID)
		var e *seckill.Error
		if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != first.ID {
			t.Errorf("buyer 1 asking again once known sold out = %v, want duplicate_order with %d", err, first.ID)
		}
	}
	if n := cache.admits.Load() - admits; n != 0 {
		t.Errorf("%d admissions ran once the voucher was known sold out, want 0", n)
	}
	// With admissions confirmed by replicas, a buyer who holds an order
	// is answered through the admission, which confirms the order it
	// names; a buyer with none is still answered from memory.
	redisLedger(s).Confirmed = true
	admits = cache.admits.Load()
	if _, err := s.Buy(ctx, 1, v.ID); !errors.Is(err, seckill.ErrDuplicateOrder) {
		t.Errorf("buyer 1 asking again, confirmed = %v, want duplicate_order", err)
	}
	if _, err := s.Buy(ctx, 4, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("buyer 4, confirmed = %v, want sold out", err)
	}
	if n := cache.admits.Load() - admits; n != 1 {
		t.Errorf("%d admissions ran for a buyer with an order and one without, confirmed; want 1 (the buyer with an order)", n)
	}
	redisLedger(s).Confirmed = false
	// A unit given back (a dead letter) is sold by another instance, which
	// has not seen the voucher sold out, while this one still remembers it
	// so: its buyer asking here again still gets their order back.
	if _, err := cache.Release(ctx, v.ID, 2, 102); err != nil {
		t.Fatal(err)
	}
	other := orderService(vs, store, 300)
	late, err := other.Buy(ctx, 6, v.ID)
	if err != nil {
		t.Fatalf("buy through another instance of the unit given back = %v", err)
	}
	_, err = s.Buy(ctx, 6, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != late.ID {
		t.Errorf("buyer 6 asking again here, which remembers the voucher sold out = %v, want duplicate_order with %d", err, late.ID)
	}
	// Stock given back (a repair) sells again once the memory expires.
	s2 := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: 20 * time.Millisecond}, Store: store, Vouchers: vs, IDs: &counter{n: 200}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	if _, err := s2.Buy(ctx, 5, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatal(err)
	}
	if _, err := cache.Release(ctx, v.ID, 6, late.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s2.Buy(ctx, 5, v.ID)
		if err == nil {
			break
		}
		if !errors.Is(err, seckill.ErrSoldOut) || time.Now().After(deadline) {
			t.Fatalf("buy after stock was given back = %v, want admitted once the memory expires", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBuySoldOutAfterRedisCameBackOlder: Redis restarts from a snapshot
// taken before a buyer was admitted (their order is in the database since)
// while this instance remembers the voucher sold out. The buyer asking
// again must get their order back, once the open vouchers are rebuilt from
// the database, never sold_out: the memory of a sold-out voucher, and the
// slots it reads, are of a Redis not checked since it came back (G5, G6).
func TestBuySoldOutAfterRedisCameBackOlder(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t)
	vs, store, _ := services(t, "redis://"+rp.Addr)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("older", 2))
	if err != nil {
		t.Fatal(err)
	}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: time.Hour}, Store: store, Vouchers: vs, IDs: &counter{n: 100}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	first, err := s.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Do(ctx, "SAVE"); err != nil {
		t.Fatal(err)
	}
	second, err := s.Buy(ctx, 2, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Persisted, as the workers do.
	if _, err := store.SaveOrders(ctx, []*seckill.Order{first, second}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 3, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("third buyer = %v, want sold out", err)
	}
	var e *seckill.Error
	if _, err := s.Buy(ctx, 2, v.ID); !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != second.ID {
		t.Fatalf("buyer 2 asking again = %v, want duplicate_order with %d", err, second.ID)
	}
	rp.Restart(t) // back with the snapshot: no buyer 2, one unit left
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.Buy(ctx, 2, v.ID)
		if errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("buyer 2, who holds order %d, asking after Redis came back older: %v", second.ID, err)
		}
		if errors.As(err, &e) && e.Kind == seckill.ErrDuplicateOrder && e.OrderID == second.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("buyer 2 asking after Redis came back older: %v after 20s, want duplicate_order with %d", err, second.ID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBuySoldOutAfterRedisLostData: Redis loses its data (FLUSHDB: the
// admission script stays loaded, and no check has seen it yet) while this
// instance remembers the voucher sold out. A buyer asking again must get
// their order back, from the voucher rebuilt from the database, never
// sold_out read from a voucher no longer there.
func TestBuySoldOutAfterRedisLostData(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t)
	vs, store, _ := services(t, "redis://"+rp.Addr)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("lost", 2))
	if err != nil {
		t.Fatal(err)
	}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: time.Hour}, Store: store, Vouchers: vs, IDs: &counter{n: 100}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	var orders []*seckill.Order
	for u := int64(1); u <= 2; u++ {
		o, err := s.Buy(ctx, u, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, o)
	}
	if _, err := store.SaveOrders(ctx, orders); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 3, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("third buyer = %v, want sold out", err)
	}
	if _, err := rp.Do(ctx, "FLUSHDB"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Buy(ctx, 2, v.ID)
	if e := (*seckill.Error)(nil); !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != orders[1].ID {
		t.Fatalf("buyer 2, who holds order %d, asking after Redis lost its data: %v; want duplicate_order", orders[1].ID, err)
	}
}

// TestSoldOutMemoryDoubtedWhenRedisChanged: the sold-out memory is learnt
// from a Redis server this process checked. Once a check finds the server
// is not the one checked (a restart or a failover, here one whose script
// cache still holds the admission script), what the memory knew is
// dropped: the next buy runs the admission, on the server checked and
// rebuilt since, rather than be answered from before.
func TestSoldOutMemoryDoubtedWhenRedisChanged(t *testing.T) {
	t.Parallel()
	rp := faults.StartRedisProc(t)
	vs, store, _ := services(t, "redis://"+rp.Addr)
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("changed", 1))
	if err != nil {
		t.Fatal(err)
	}
	cache := &countingCache{Client: cacheOf(vs)}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: time.Hour}, Store: store, Vouchers: vs, IDs: &counter{n: 100}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	first, err := s.Buy(ctx, 1, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SaveOrders(ctx, []*seckill.Order{first}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Buy(ctx, 2, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("second buyer = %v, want sold out", err)
		}
	}
	if n := cache.admits.Load(); n != 2 {
		t.Fatalf("%d admissions, want 2: the second buyer asking again is answered from memory", n)
	}
	if _, err := rp.Do(ctx, "HSET", "seckill:{fence}:identity", "identity", "a server that is gone"); err != nil {
		t.Fatal(err)
	}
	if err := ledgerOf(vs).Fence.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 2, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("second buyer after the check = %v, want sold out", err)
	}
	// The check unloaded the voucher: the buy's admission finds it not
	// loaded, rebuilds it and admits again, so one buy may count two.
	if n := cache.admits.Load(); n == 2 {
		t.Errorf("%d admissions, want more: the memory learnt from the server before the check must not answer after it", n)
	}
}

// soldOutReader returns what answers the buyers of a voucher found sold
// out, as internal/app wires it: copies of their buyers over the service's
// Redis, closed when the test ends (before the Redis client).
func soldOutReader(t *testing.T, vs *seckill.VoucherService) redisledger.SoldOutReader {
	t.Helper()
	copies := soldout.New(cacheOf(vs), soldout.Config{}, vs.Logger)
	t.Cleanup(copies.Close)
	return copies
}

// countingCache is the real cache, counting admissions.
type countingCache struct {
	*redis.Client
	admits atomic.Int64
}

func (c *countingCache) Admit(ctx context.Context, a seckill.Admission) error {
	c.admits.Add(1)
	return c.Client.Admit(ctx, a)
}

// TestRebuildDetached: a rebuild runs apart from the request that started
// it: the first caller going away fails neither the rebuild nor those who
// wait for it.
func TestRebuildDetached(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("slow rebuild", 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerOf(vs).Cache.Unload(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	gate := &gatedStore{Store: store, reading: make(chan struct{}), release: make(chan struct{})}
	vs.Store = gate
	first, cancel := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- ledgerOf(vs).Rebuild(first, v.ID) }()
	<-gate.reading // the rebuild is reading the database
	cancel()       // the first client goes away
	if err := <-firstDone; !errors.Is(err, seckill.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("the first caller's Rebuild = %v, want ErrUnavailable and context.Canceled", err)
	}
	joined := make(chan error, 1)
	go func() { joined <- ledgerOf(vs).Rebuild(ctx, v.ID) }()
	close(gate.release)
	if err := <-joined; err != nil {
		t.Errorf("a later caller's Rebuild = %v, want success", err)
	}
	if gate.canceled.Load() {
		t.Error("the rebuild's database reads were cancelled with the first caller's request")
	}
	if left, err := ledgerOf(vs).Cache.Remaining(ctx, v.ID); err != nil || left[v.ID] != 10 {
		t.Errorf("remaining after the rebuild = %v, %v; want 10", left, err)
	}
}

// gatedStore holds reads of a voucher's orders until released, and records
// whether a read's context ended while it waited.
type gatedStore struct {
	seckill.Store
	once             sync.Once
	reading, release chan struct{}
	canceled         atomic.Bool
}

func (g *gatedStore) VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
	g.once.Do(func() { close(g.reading) })
	select {
	case <-g.release:
	case <-ctx.Done():
		g.canceled.Store(true)
		return nil, ctx.Err()
	}
	return g.Store.VoucherOrders(ctx, voucherID, afterID, limit)
}

// TestBuyEndedNotLoaded: a late buy of a voucher whose sale ended and that
// Redis no longer holds (its keys deleted after the retention, or lost) is
// answered ended, without rebuilding it.
func TestBuyEndedNotLoaded(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := &seckill.Voucher{Title: "over", Stock: 3, InitialStock: 3, BeginTime: now.Add(-2 * time.Hour), EndTime: now.Add(-time.Hour), Generation: 9}
	if err := store.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	s := orderService(vs, store, 100)
	if _, err := s.Buy(ctx, 1, v.ID); !errors.Is(err, seckill.ErrEnded) {
		t.Fatalf("late buy = %v, want ended", err)
	}
	st, err := ledgerOf(vs).Cache.State(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Loaded {
		t.Errorf("a late buy rebuilt the ended voucher: %+v", st)
	}
}

// forgetfulCache is a Redis that lost every buyer's slot once forget is
// set, as after a restart without persistence.
type forgetfulCache struct {
	*redis.Client
	forget bool
}

func (c *forgetfulCache) BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	if c.forget {
		return 0, nil
	}
	return c.Client.BuyerOrder(ctx, userID, voucherID)
}

func (c *forgetfulCache) BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error) {
	if c.forget {
		return map[int64]int64{}, nil
	}
	return c.Client.BuyerOrders(ctx, userID, voucherIDs...)
}

// stalledIDs makes order ids until stalled is set, as a node lease that
// can no longer be confirmed.
type stalledIDs struct {
	n       int64
	stalled bool
}

func (s *stalledIDs) Next() (int64, error) {
	if s.stalled {
		return 0, errors.New("node lease not confirmed")
	}
	s.n++
	return s.n, nil
}

// TestBuyNoIDsNotSoldOut: Redis lost its data (the buyers' slots, and the
// node lease with them) while the voucher is remembered sold out. A buyer
// who holds an order is told to try again, not sold_out, a final answer
// that the rebuild would have turned into duplicate_order (G5).
func TestBuyNoIDsNotSoldOut(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("x", 1))
	if err != nil {
		t.Fatal(err)
	}
	cache := &forgetfulCache{Client: cacheOf(vs)}
	ids := &stalledIDs{n: 100}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger, SoldOutFor: time.Hour}, Store: store, Vouchers: vs, IDs: ids, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	if _, err := s.Buy(ctx, 1, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, 2, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("second buyer = %v, want sold out", err)
	}
	cache.forget, ids.stalled = true, true
	if _, err := s.Buy(ctx, 1, v.ID); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("the buyer with an order, Redis's data and the order ids lost = %v, want unavailable (try again)", err)
	}
}

// persistAfterList is an order store where a worker persists an order
// just after the buyer's stored orders are read, before the pending ones
// are checked against the database: the order is in neither read as
// pending nor stored.
type persistAfterList struct {
	seckill.OrderStore
	t     *testing.T
	order *seckill.Order // persisted after the next UserOrders
}

func (s *persistAfterList) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	orders, err := s.OrderStore.UserOrders(ctx, userID, limit)
	if o := s.order; err == nil && o != nil {
		s.order = nil
		saved := *o
		saved.Status = seckill.OrderCreated
		if _, err := s.OrderStore.SaveOrders(ctx, []*seckill.Order{&saved}); err != nil {
			s.t.Fatalf("persist order %d: %v", o.ID, err)
		}
	}
	return orders, err
}

// TestOrdersPersistedBetweenReads: a buyer's order list shows an order
// that a worker persists while the list is read: it was pending in Redis
// when the database's orders were read, and in the database when Redis's
// pending ones were checked against it. It must show, created.
func TestOrdersPersistedBetweenReads(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("persisted between reads", 10))
	if err != nil {
		t.Fatal(err)
	}
	racy := &persistAfterList{OrderStore: store, t: t}
	s := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cacheOf(vs), SoldOut: soldOutReader(t, vs), Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}, Store: racy, Vouchers: vs, IDs: &counter{n: 500}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	const user = 7
	o, err := s.Buy(ctx, user, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	racy.order = o
	orders, err := s.Orders(ctx, user, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 1 || orders[0].ID != o.ID || orders[0].Status != seckill.OrderCreated {
		var got []string
		for _, x := range orders {
			got = append(got, fmt.Sprintf("%d %s", x.ID, x.Status))
		}
		t.Fatalf("Orders = %v; want order %d, created (persisted while the list was read)", got, o.ID)
	}
}

// TestSoldOutMemoryNeedsAReader: the sold-out memory answers a buyer only
// through OrderService.SoldOut, the fenced read of their slot. Without one
// it is off: Redis restarts from an older file within SoldOutFor of the
// sell-out (buyer 1's admission lost, the fence names another server, the
// scripts flushed), and buyer 1, whose order is in the database, asking
// again must get it back, not sold_out from an unfenced read of a slot
// Redis lost.
func TestSoldOutMemoryNeedsAReader(t *testing.T) {
	t.Parallel()
	for _, wired := range []bool{true, false} {
		t.Run(map[bool]string{true: "reader", false: "no reader"}[wired], func(t *testing.T) {
			t.Parallel()
			url, _ := faults.StartRedis(t)
			vs, store, _ := services(t, url)
			ctx := context.Background()
			v, err := vs.Create(ctx, onSale("one unit", 1))
			if err != nil {
				t.Fatal(err)
			}
			orders := orderService(vs, store, 100)
			redisLedger(orders).SoldOutFor = time.Hour
			if !wired {
				redisLedger(orders).SoldOut = nil
			}
			first, err := orders.Buy(ctx, 1, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.SaveOrders(ctx, []*seckill.Order{first}); err != nil {
				t.Fatal(err)
			}
			if _, err := orders.Buy(ctx, 2, v.ID); !errors.Is(err, seckill.ErrSoldOut) {
				t.Fatalf("buyer 2 = %v, want sold out", err)
			}
			cameBackOlder(t, url, v.ID, 1)
			_, err = orders.Buy(ctx, 1, v.ID)
			var e *seckill.Error
			if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != first.ID {
				t.Errorf("buyer 1, who holds order %d, asking again = %v; want duplicate_order", first.ID, err)
			}
		})
	}
}

// countingSlots is the cache as the sold-out copies read it, counting the
// slot reads they fall back to when no copy may answer.
type countingSlots struct {
	*redis.Client
	n atomic.Int64
}

func (c *countingSlots) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	c.n.Add(1)
	return c.Client.SoldOutBuyerOrder(ctx, userID, voucherID)
}

// TestCancelledBuyerAnsweredAlikeWhenSoldOut: a buyer whose order was
// cancelled (a voucher with a payment deadline that does not let them buy
// again) is answered duplicate_order with that order before the sell-out
// (by admission) and after it: from the sold-out memory through a read of
// their slot, and through this instance's copy of the buyers; not
// sold_out, which the memory answered when it read only the buyers.
func TestCancelledBuyerAnsweredAlikeWhenSoldOut(t *testing.T) {
	t.Parallel()
	for _, copied := range []bool{false, true} {
		t.Run(map[bool]string{false: "slot read", true: "copy"}[copied], func(t *testing.T) {
			t.Parallel()
			vs, store, _ := services(t, "")
			cache := cacheOf(vs)
			ctx := t.Context()
			in := onSale("a cancelled buyer", 2)
			in.PayWithin = time.Hour
			view, err := vs.Create(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			id := view.ID
			orders := orderService(vs, store, 100)
			slots := &countingSlots{Client: cache}
			if copied {
				copies := soldout.New(slots, soldout.Config{}, vs.Logger)
				t.Cleanup(copies.Close)
				redisLedger(orders).SoldOut = copies
			}
			memory := &countingReader{SoldOutReader: redisLedger(orders).SoldOut}
			redisLedger(orders).SoldOut = memory
			o, err := orders.Buy(ctx, 1, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.SaveOrders(ctx, []*seckill.Order{o}); err != nil { // as a worker writes it
				t.Fatal(err)
			}
			payments := &seckill.PaymentService{Store: store, Ledger: cache, Orders: orders, Vouchers: vs, Provider: payment.Fake{}, Logger: vs.Logger}
			if c, err := payments.Cancel(ctx, 1, o.ID); err != nil || !c.Status.Cancelled() {
				t.Fatalf("Cancel = %+v, %v", c, err)
			}
			answer := func(when string) {
				t.Helper()
				_, err := orders.Buy(ctx, 1, id)
				var e *seckill.Error
				if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != o.ID {
					t.Fatalf("the cancelled buyer %s: %v, want duplicate_order with their order %d", when, err, o.ID)
				}
			}
			answer("before the sell-out")
			if n := memory.n.Load(); n != 0 {
				t.Fatalf("%d answers from the sold-out memory before the sell-out", n)
			}
			for u := int64(2); u <= 3; u++ {
				if _, err := orders.Buy(ctx, u, id); err != nil {
					t.Fatalf("buy of user %d: %v", u, err)
				}
			}
			// Sold out, and known so: the memory answers from here on (each
			// round renews it with a buyer who has nothing).
			fresh := int64(1000)
			soldOut := func() {
				t.Helper()
				fresh++
				if _, err := orders.Buy(ctx, fresh, id); !errors.Is(err, seckill.ErrSoldOut) {
					t.Fatalf("buy of user %d after the sell-out = %v, want sold_out", fresh, err)
				}
			}
			soldOut()
			read := memory.n.Load()
			answer("after the sell-out")
			if memory.n.Load() == read {
				t.Fatal("the cancelled buyer after the sell-out was not answered from the sold-out memory")
			}
			if !copied {
				return
			}
			// Until an answer comes from the copy, not from a slot read.
			testenv.WaitFor(t, 10*time.Second, "an answer from the copy of the buyers", func() bool {
				soldOut()
				fromMemory, fromSlot := memory.n.Load(), slots.n.Load()
				answer("after the sell-out, from the copy")
				return memory.n.Load() > fromMemory && slots.n.Load() == fromSlot
			})
		})
	}
}
