package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/postgres"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// manyOrders returns n new orders of the voucher, of buyers of their own.
func (b *rig) manyOrders(n int) []*seckill.Order {
	orders := make([]*seckill.Order, n)
	for i := range orders {
		orders[i] = &seckill.Order{ID: b.nextID.Add(1), UserID: 900_000 + int64(i), VoucherID: b.voucher.ID,
			Status: seckill.OrderPending, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	}
	return orders
}

// slot returns the order id the buyer's slot holds in Redis, 0 if none.
func (b *rig) slot(user int64) int64 {
	b.t.Helper()
	n, _ := b.raw.Do(context.Background(), b.raw.B().Hget().Key(b.key("buyers")).Field(itoa(user)).Build()).AsInt64()
	return n
}

// TestQueueDatabaseReadOnly: the queue mode's queued orders meet a database
// that refuses writes (read-only, as after a failover) for a while. That is
// the database's state: they must wait in place and be created once it
// takes writes, never recorded failed with their buyers' slots given back,
// answered 200 and gone.
func TestQueueDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	b := newRig(t, "postgres", 100)
	ctx := context.Background()
	ro := faults.PostgresReadOnly(t, b.dbURL)
	store, err := postgres.Open(ctx, ro.URL, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q := b.queue(QueueConfig{BackoffMax: 100 * time.Millisecond}, unclassified{store}, prometheus.NewRegistry(), true)
	ro.Set(true)
	var queued []*seckill.Order
	for u := range int64(10) {
		o, err := b.reserve(u + 1)
		if err != nil {
			t.Fatal(err)
		}
		offer(t, q, o)
		queued = append(queued, o)
	}
	time.Sleep(2 * time.Second) // the length of the outage, not a wait for an event
	if n, _ := b.store.CountFailedOrders(ctx, b.voucher.ID); n != 0 {
		t.Errorf("%d orders recorded failed while the database was read-only", n)
	}
	ro.Set(false)
	testenv.WaitFor(t, 30*time.Second, "the queued orders created", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == int64(len(queued))
	})
	for _, o := range queued {
		if got := b.slot(o.UserID); got != o.ID {
			t.Errorf("buyer %d's slot holds %d, want their order %d", o.UserID, got, o.ID)
		}
	}
	if n, _ := b.store.CountFailedOrders(ctx, b.voucher.ID); n != 0 {
		t.Errorf("%d orders failed, want none", n)
	}
	if got := b.redisStock(); got != 90 {
		t.Errorf("Redis stock %d, want 90", got)
	}
}

// TestQueueSoldOutInDatabase: Redis admits ten buyers the database has
// stock for one of (their stocks disagree). The nine the database refuses
// as sold out fail, and their units stay taken, as the stream mode keeps
// them: given back, Redis would sell them again to buyers the database
// refuses too.
func TestQueueSoldOutInDatabase(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	// The database's stock is 1; Redis's 10.
	if _, err := b.store.SaveOrders(ctx, b.manyOrders(9)); err != nil {
		t.Fatal(err)
	}
	q := b.queue(QueueConfig{BackoffMax: 100 * time.Millisecond}, nil, prometheus.NewRegistry(), true)
	var queued []*seckill.Order
	for u := range int64(10) {
		o, err := b.reserve(1000 + u)
		if err != nil {
			t.Fatal(err)
		}
		offer(t, q, o)
		queued = append(queued, o)
	}
	testenv.WaitFor(t, 20*time.Second, "the queued orders settled", func() bool {
		created, _ := b.store.CountOrders(ctx, b.voucher.ID)
		failed, _ := b.store.CountFailedOrders(ctx, b.voucher.ID)
		return created == 10 && failed == 9
	})
	if got := b.redisStock(); got != 0 {
		t.Errorf("Redis stock %d, want 0: units the database refused as sold out were given back", got)
	}
	for _, o := range queued {
		if got := b.slot(o.UserID); got != o.ID {
			t.Errorf("buyer %d's slot holds %d, want their order %d, created or failed", o.UserID, got, o.ID)
		}
	}
	if _, err := b.reserve(2000); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("a new buyer after = %v, want sold out", err)
	}
}

// failingFailures is a store that refuses every order as invalid and
// cannot record a failure.
type failingFailures struct{ Store }

func (failingFailures) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	return nil, seckill.Errorf(seckill.ErrInvalidArgument, "refused")
}

func (failingFailures) FailOrder(ctx context.Context, o *seckill.Order) error {
	return errors.New("cannot record it")
}

// TestQueueFailureNotRecorded: an order the database refuses, whose
// failure it cannot record either, keeps its reservation: given back, it
// would be answered 200 and gone, in neither table, its buyer free to buy
// again.
func TestQueueFailureNotRecorded(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	q := b.queue(QueueConfig{BackoffMax: 50 * time.Millisecond}, failingFailures{b.store}, prometheus.NewRegistry(), true)
	o, err := b.reserve(7)
	if err != nil {
		t.Fatal(err)
	}
	offer(t, q, o)
	// Stop drains the queue: the order has been handled once it returns.
	q.Stop()
	if got := b.slot(7); got != o.ID {
		t.Errorf("the buyer's slot holds %d, want their order %d kept", got, o.ID)
	}
	if got := b.redisStock(); got != 9 {
		t.Errorf("Redis stock %d, want 9: the unit given back", got)
	}
}

// flakyUserOrders fails the first read of a buyer's orders as transient.
type flakyUserOrders struct {
	Store
	failed atomic.Bool
}

func (s *flakyUserOrders) UserOrders(ctx context.Context, userID int64, limit int) ([]*seckill.Order, error) {
	if s.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: injected", seckill.ErrTransient)
	}
	return s.Store.UserOrders(ctx, userID, limit)
}

// TestQueueBuyerAdmittedTwiceReadFails: the queue mode meets a buyer Redis
// admitted twice, and its first read of the buyer's order in the database
// fails for now. Read as none, the unit the second admission holds (which
// counts the first order) was given back and sold again; it must be read
// again, and the slot handed to the database's order.
func TestQueueBuyerAdmittedTwiceReadFails(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	store := &flakyUserOrders{Store: b.store}
	q := b.queue(QueueConfig{BackoffMax: 100 * time.Millisecond}, store, prometheus.NewRegistry(), true)
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
		t.Fatal(err)
	}
	offer(t, q, second)
	testenv.WaitFor(t, 10*time.Second, "second order failed", func() bool {
		o, err := b.store.Order(ctx, second.ID)
		return err == nil && o.Status == seckill.OrderFailed
	})
	q.Stop()
	if !store.failed.Load() {
		t.Fatal("the buyer's orders were never read")
	}
	if got := b.slot(7); got != first.ID {
		t.Errorf("buyer 7's slot holds %d, want the database's order %d", got, first.ID)
	}
	if got := b.redisStock(); got != 9 {
		t.Errorf("Redis stock %d, want 9: the unit that counts the first order was given back", got)
	}
}

// heldThenRefused fails a batch of both its orders for no known reason,
// refuses a alone as sold out, and fails b alone for no known reason a few
// times, then refuses it as sold out (the stock gone meanwhile). It counts
// the saves.
type heldThenRefused struct {
	Store
	a, b  int64
	saves atomic.Int64
	bs    atomic.Int64
}

func (s *heldThenRefused) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	s.saves.Add(1)
	switch {
	case len(orders) > 1:
		return nil, errors.New("injected failure of no known kind")
	case orders[0].ID == s.a:
		return nil, fmt.Errorf("injected: %w", seckill.ErrSoldOut)
	case s.bs.Add(1) <= 3:
		return nil, errors.New("injected failure of no known kind")
	}
	return nil, fmt.Errorf("injected: %w", seckill.ErrSoldOut)
}

// TestQueueHeldThenRefused: a queued order held in place (its batch failed
// for no known reason, none written) that the database then refuses as
// sold out is failed, not written again at once without a pause (73,297
// saves in 2 s, found by review), and not lost at shutdown.
func TestQueueHeldThenRefused(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 10)
	ctx := context.Background()
	oa, err := b.reserve(1)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := b.reserve(2)
	if err != nil {
		t.Fatal(err)
	}
	store := &heldThenRefused{Store: b.store, a: oa.ID, b: ob.ID}
	q := b.queue(QueueConfig{Workers: 1, BackoffMax: 50 * time.Millisecond}, store, prometheus.NewRegistry(), false)
	offer(t, q, oa)
	offer(t, q, ob) // queued before the workers start: one batch
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "both orders failed", func() bool {
		n, _ := b.store.CountFailedOrders(ctx, b.voucher.ID)
		return n == 2
	})
	time.Sleep(200 * time.Millisecond) // a window to count more saves in, not a wait for an event
	q.Stop()
	if n := store.saves.Load(); n > 20 {
		t.Errorf("%d saves of two orders, want a few: the refused order was written again and again", n)
	}
}
