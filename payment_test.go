package seckill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
)

// lifecycle is a sold-out voucher whose buyers must pay within an hour,
// its orders in the database, with the services that pay, cancel and
// sweep them.
type lifecycle struct {
	vs       *seckill.VoucherService
	store    seckill.Store
	cache    *redis.Client
	v        *seckill.Voucher
	orders   map[int64]*seckill.Order // by id
	payments *seckill.PaymentService
	// base is when the first order was created, the next a second later,
	// and so on.
	base time.Time
}

// dueAt is a sweeper's clock at which order i (0 first) and those before
// it are past their deadline, and no later one.
func (l *lifecycle) dueAt(i int64) time.Time {
	return l.base.Add(time.Duration(i)*time.Second + l.v.PayWithin + time.Second/2)
}

// soldLifecycle sells a voucher of the stock to as many buyers (users
// 1001 and up), admitted in Redis and written to the database as a worker
// writes them, with rebuy as given.
func soldLifecycle(t *testing.T, stock int64, rebuy bool) *lifecycle {
	t.Helper()
	return soldLifecycleTB(t, stock, rebuy)
}

// testPrice is the price of the tests' vouchers with a deadline, in fen:
// a free voucher's orders are paid without the provider.
const testPrice = 1250

// took returns a payment event's amount: what the provider took.
func took(amount int64) *int64 { return &amount }

// soldLifecycleTB is soldLifecycle for a test or a benchmark.
func soldLifecycleTB(t testing.TB, stock int64, rebuy bool) *lifecycle {
	t.Helper()
	return pricedLifecycle(t, stock, rebuy, testPrice)
}

// pricedLifecycle is soldLifecycle of a voucher sold at price (in fen).
func pricedLifecycle(t testing.TB, stock int64, rebuy bool, price int64) *lifecycle {
	t.Helper()
	ctx := context.Background()
	vs, store, _ := services(t, "")
	cache := cacheOf(vs)
	in := onSale("lifecycle", stock)
	in.PayWithin, in.RebuyAfterCancel = time.Hour, rebuy
	in.Price, in.Currency = price, "CNY"
	view, err := vs.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	l := &lifecycle{vs: vs, store: store, cache: cache, v: view.Voucher, orders: map[int64]*seckill.Order{}}
	var batch []*seckill.Order
	// A second apart, so that a sweeper's clock can make one order due at
	// a time (dueAt); in the future, so that each is due from its
	// CreatedAt, not from when it is written (the later of the two).
	l.base = time.Now().Add(time.Hour).Truncate(time.Second)
	for i := range stock {
		o := &seckill.Order{ID: 50_000 + i, UserID: 1001 + i, VoucherID: l.v.ID, CreatedAt: l.base.Add(time.Duration(i) * time.Second)}
		// Reserve: admitted without a stream entry, as the queue mode
		// admits, so that nothing waits in a stream for a worker.
		if err := cache.Reserve(ctx, seckill.Admission{VoucherID: l.v.ID, Generation: l.v.Generation, UserID: o.UserID, OrderID: o.ID}); err != nil {
			t.Fatalf("admit buyer %d: %v", o.UserID, err)
		}
		batch = append(batch, o)
		l.orders[o.ID] = o
	}
	if _, err := store.SaveOrders(ctx, batch); err != nil {
		t.Fatal(err)
	}
	orders := &seckill.OrderService{Ledger: &redisledger.Ledger{Cache: cache, Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}, Store: store, Vouchers: vs, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
	l.payments = &seckill.PaymentService{Store: store, Ledger: cache, Orders: orders, Vouchers: vs, Provider: payment.Fake{}, Logger: vs.Logger}
	return l
}

// sweeper returns a sweeper of l whose clock is now's.
func (l *lifecycle) sweeper(now func() time.Time) *seckill.Sweeper {
	return &seckill.Sweeper{Store: l.store, Ledger: l.cache, Logger: l.vs.Logger, Batch: 7, Clock: now}
}

// check checks that every order ended paid or cancelled, never both nor
// neither, as won says (order id → the status its winner left), and that
// each cancelled order's unit is back exactly once: in Redis, in the
// database, and marked returned; and that reconcile finds them agreeing.
func (l *lifecycle) check(t *testing.T, won map[int64]seckill.OrderStatus) (paid, cancelled int64) {
	t.Helper()
	ctx := context.Background()
	for id := range l.orders {
		o, err := l.store.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case o.Status == seckill.OrderPaid:
			paid++
		case o.Status.Cancelled():
			// Refunded: paid a moment after the cancellation, and given
			// back at once by the fake provider; never refunding.
			cancelled++
			if !o.Returned {
				t.Errorf("order %d is %s and its unit not marked returned", id, o.Status)
			}
			if o.Status == seckill.OrderRefunding {
				t.Errorf("order %d is refunding: the fake provider refunds at once", id)
			}
		default:
			t.Errorf("order %d ended %s, want paid or cancelled", id, o.Status)
		}
		if w, ok := won[id]; ok && w.Cancelled() != o.Status.Cancelled() {
			t.Errorf("order %d: a %s was answered, and it ended %s", id, w, o.Status)
		}
	}
	st, err := l.cache.State(ctx, l.v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != cancelled {
		t.Errorf("Redis holds %d units for %d cancelled orders: a unit given back %s", st.Remaining, cancelled,
			map[bool]string{true: "twice", false: "never"}[st.Remaining > cancelled])
	}
	dbv, err := l.store.Voucher(ctx, l.v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if dbv.Stock != cancelled {
		t.Errorf("the database's stock is %d for %d cancelled orders", dbv.Stock, cancelled)
	}
	rec, err := (&redisledger.Reconciler{Vouchers: l.vs, Repairer: ledgerOf(l.vs), Store: l.store, Cache: l.cache}).Reconcile(ctx, l.v.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.OK() {
		t.Errorf("reconcile: %+v", rec)
	}
	return paid, cancelled
}

// TestPayCancelDeadlineRace forces the race the issue names, for each of
// 120 orders in turn: its buyer's pay, its buyer's cancel, and two
// sweepers whose clocks say its deadline just passed, all let go at once. Exactly one of pay
// and cancel (the buyer's or the deadline's) wins each order; a pay
// answered paid is paid, a cancel answered cancelled is cancelled; each
// cancelled order's unit is back once, however many tried.
func TestPayCancelDeadlineRace(t *testing.T) {
	t.Parallel()
	const n = 120
	l := soldLifecycle(t, n, false)
	ctx := context.Background()
	var clock sync.Mutex
	var now time.Time
	tick := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return now
	}
	sweepers := []*seckill.Sweeper{l.sweeper(tick), l.sweeper(tick)}
	var (
		mu  sync.Mutex
		won = map[int64]seckill.OrderStatus{}
	)
	answer := func(id int64, status seckill.OrderStatus, err error, refusal error) {
		switch {
		case err == nil:
			mu.Lock()
			defer mu.Unlock()
			if w, ok := won[id]; ok && w != status {
				t.Errorf("order %d answered both %s and %s", id, w, status)
			}
			won[id] = status
		case !errors.Is(err, refusal):
			t.Errorf("order %d: %v", id, err)
		}
	}
	for i := range int64(n) {
		id := 50_000 + i
		o := l.orders[id]
		clock.Lock()
		now = l.dueAt(i)
		clock.Unlock()
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			res, err := l.payments.Pay(ctx, o.UserID, id)
			var status seckill.OrderStatus
			if err == nil {
				status = res.Order.Status
			}
			answer(id, status, err, seckill.ErrOrderCancelled)
		})
		wg.Go(func() {
			<-start
			c, err := l.payments.Cancel(ctx, o.UserID, id)
			var status seckill.OrderStatus
			if err == nil {
				status = c.Status
			}
			answer(id, status, err, seckill.ErrOrderPaid)
		})
		for _, s := range sweepers {
			wg.Go(func() {
				<-start
				if _, _, err := s.Sweep(ctx); err != nil {
					t.Errorf("sweep: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	paid, cancelled := l.check(t, won)
	t.Logf("%d orders: %d paid, %d cancelled (%d by the sweepers)", n, paid, cancelled,
		sweepers[0].Stats().Cancelled+sweepers[1].Stats().Cancelled)
	if paid == 0 || cancelled == 0 {
		t.Errorf("paid %d, cancelled %d: the race was never raced both ways", paid, cancelled)
	}
	// Every cancelled order's unit is given back once: asking again gives
	// nothing. (Only a cancelled order's: the callers give back no other.)
	for id, o := range l.orders {
		if stored, err := l.store.Order(ctx, id); err != nil || !stored.Status.Cancelled() {
			continue
		}
		if did, err := l.cache.ReturnUnit(ctx, l.v, o.UserID, id); err != nil || did {
			t.Errorf("ReturnUnit of order %d again = %v, %v; want nothing done", id, did, err)
		}
	}
	l.check(t, won)
}

// BenchmarkSweep measures a sweep of 1,000 orders past their deadline, on
// the test's MariaDB and Redis: cancelled in the database in batches of
// the sweeper's, their units given back to Redis, and marked returned. It
// reports the cost per 1,000 orders (ms/1000orders).
func BenchmarkSweep(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		l := soldLifecycleTB(b, n, false)
		s := &seckill.Sweeper{Store: l.store, Ledger: l.cache, Logger: l.vs.Logger, Clock: func() time.Time { return l.dueAt(n) }}
		b.StartTimer()
		start := time.Now()
		cancelled, returned, err := s.Sweep(ctx)
		total += time.Since(start)
		if err != nil || cancelled != n || returned != n {
			b.Fatalf("Sweep = %d cancelled, %d returned, %v; want %d each", cancelled, returned, err, n)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/1000orders")
}
