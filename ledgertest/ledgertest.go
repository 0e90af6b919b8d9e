// Package ledgertest is the conformance suite of [seckill.Ledger]: every
// ledger (redisledger in its stream and queue modes, sqlledger on each
// store) runs it from its own tests, so that the modes keep one behaviour
// under real concurrency against the real services: exact stock, one order
// per buyer, a unit returned once, the operator's controls, the ledger
// agreeing with the database, and, where the ledger can lose its state,
// its recovery.
//
// A ledger's test hands [Run] a function that builds a [Harness] for one
// test: the ledger wired as the service wires it, on a database (and a
// Redis key prefix) of the test's own.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// Harness is one ledger wired for one test.
type Harness struct {
	// Ledger is the ledger under test, and Vouchers the voucher service
	// over it (its Ledger), whose Create loads a voucher and whose Pause,
	// End and AddStock call Ledger.Control.
	Ledger   seckill.Ledger
	Vouchers *seckill.VoucherService
	// Store is the database. The orders Admit takes reach it on their own:
	// written by Admit (the SQL ledger), or by the mode's workers, which
	// the harness runs (the Redis ledger).
	Store seckill.Store
	// InDatabase says the ledger is the database (the SQL ledger): it
	// holds no voucher apart from its row, records no buyer apart from
	// the orders, and a cancellation's own transaction gives the unit
	// back (ReturnUnit gives nothing).
	InDatabase bool
	// Lose makes the ledger lose the voucher's sale, as a Redis that lost
	// its keys would: its stock and buyers, of every shard; the orders on
	// their way to the database stay. The suite calls it mid-sale, from a
	// buyer's goroutine. Nil: the ledger keeps nothing to lose, and the
	// recovery cases do not run.
	Lose func(ctx context.Context, v *seckill.Voucher) error
	// Flush makes the ledger lose everything at once, as a Redis
	// restarted without its data: FLUSHALL on a server of the harness's
	// own. Only RunFlush calls it.
	Flush func(ctx context.Context) error
	// Known names the cases this ledger is known to fail, and why: they
	// are kept, and skipped saying so, until the ledger is fixed.
	Known map[string]string
}

// NewHarness builds a Harness for one test, isolated from every other
// test, and closes what it started when t ends.
type NewHarness func(t *testing.T) *Harness

// Run runs the suite against the ledger that newHarness builds. Subtests
// run in parallel, each on a harness of its own. A ledger that takes
// sharded vouchers (MaxShards of 4 or more) runs the sales again on a
// voucher of 4 shards.
func Run(t *testing.T, newHarness NewHarness) {
	s := suite{newHarness: newHarness}
	type tc struct {
		name string
		fn   func(*testing.T)
	}
	cases := []tc{
		{"Load", s.testLoad},
		{"ExactStock", func(t *testing.T) { s.testExactStock(t, 1) }},
		{"OneOrderPerBuyer", func(t *testing.T) { s.testOneOrderPerBuyer(t, 1) }},
		{"ReturnUnitOnce", s.testReturnUnitOnce},
		{"Controls", s.testControls},
	}
	// One harness tells what the ledger takes: the cases it does not
	// apply to are not run at all.
	probe := newHarness(t)
	if most, _ := probe.Ledger.MaxShards(); most >= shards {
		cases = append(cases,
			tc{"Sharded/ExactStock", func(t *testing.T) { s.testExactStock(t, shards) }},
			tc{"Sharded/OneOrderPerBuyer", func(t *testing.T) { s.testOneOrderPerBuyer(t, shards) }},
		)
	}
	if probe.Lose != nil {
		cases = append(cases, tc{"Recovery", func(t *testing.T) { s.testRecovery(t, 1) }})
		if most, _ := probe.Ledger.MaxShards(); most >= shards {
			cases = append(cases, tc{"Sharded/Recovery", func(t *testing.T) { s.testRecovery(t, shards) }})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if why, ok := probe.Known[c.name]; ok {
				t.Skip("known: " + why)
			}
			c.fn(t)
		})
	}
}

// RunFlush runs the suite's recovery from a ledger that loses everything
// mid-sale (Harness.Flush), on an unsharded voucher and, where the ledger
// takes them, on a voucher of 4 shards: each harness on a server of its
// own, so apart from Run.
func RunFlush(t *testing.T, newHarness NewHarness) {
	s := suite{newHarness: newHarness}
	t.Run("Flush", func(t *testing.T) {
		t.Parallel()
		s.testFlush(t, 1)
	})
	t.Run("Sharded/Flush", func(t *testing.T) {
		t.Parallel()
		s.testFlush(t, shards)
	})
}

// shards is how many shards the sharded cases split a voucher into.
const shards = 4

type suite struct {
	newHarness NewHarness
}

// ids hands out order ids and user ids unique in the process, so that no
// two cases' buyers or orders meet; they start high so that they never
// look like a database's own auto-increment ids.
var ids atomic.Int64

func init() { ids.Store(1 << 40) }

func nextID() int64 { return ids.Add(1) }

// order returns a new order of the user for the voucher, as the order
// service makes one before it asks the ledger.
func order(userID, voucherID int64) *seckill.Order {
	return &seckill.Order{ID: nextID(), UserID: userID, VoucherID: voucherID, Status: seckill.OrderPending,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
}

// onSale creates a voucher on sale now with the stock and shards through
// the voucher service, which loads it into the ledger.
func onSale(t *testing.T, h *Harness, stock int64, shards int) *seckill.Voucher {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := &seckill.Voucher{Title: fmt.Sprintf("ledgertest %d", stock), Stock: stock, Shards: shards,
		BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
	view, err := h.Vouchers.Create(t.Context(), v)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return view.Voucher
}

// retryFor bounds how long a buyer asks again after answers to try again.
const retryFor = 30 * time.Second

// admit asks the ledger for o's unit as a buyer's client does: again, as
// it was, while the answer is to try again (ErrUnavailable, or a
// transient failure of the database: both 503), after the answer's
// Retry-After, at most a few milliseconds here. A retry whose first ask
// was admitted after all may be answered with o's own id as the buyer's
// order: that is o admitted, and admit answers nil.
func admit(ctx context.Context, l seckill.Ledger, o *seckill.Order) (retries int, err error) {
	deadline := time.Now().Add(retryFor)
	for {
		var status seckill.OrderStatus
		if status, err = l.Admit(ctx, *o); err == nil {
			o.Status = status
		}
		if retries > 0 && heldBy(err) == o.ID {
			return retries, nil
		}
		if !errors.Is(err, seckill.ErrUnavailable) && !errors.Is(err, seckill.ErrTransient) || time.Now().After(deadline) {
			return retries, err
		}
		retries++
		var e *seckill.Error
		wait := time.Millisecond
		if errors.As(err, &e) && e.RetryAfter > 0 {
			wait = min(e.RetryAfter, 5*time.Millisecond)
		}
		// The client's Retry-After, not a test's wait for a condition.
		time.Sleep(wait)
	}
}

// heldBy returns the order an ErrDuplicateOrder names; 0 for any other
// answer.
func heldBy(err error) int64 {
	var e *seckill.Error
	if errors.As(err, &e) && errors.Is(err, seckill.ErrDuplicateOrder) {
		return e.OrderID
	}
	return 0
}

// answer is what the ledger answered one order.
type answer struct {
	o   *seckill.Order
	err error
}

// sale is the outcome of many buys at once.
type sale struct {
	answers []answer
	retries atomic.Int64
	elapsed time.Duration
}

// admitted returns the orders admitted.
func (s *sale) admitted() []*seckill.Order {
	var os []*seckill.Order
	for _, a := range s.answers {
		if a.err == nil {
			os = append(os, a.o)
		}
	}
	return os
}

// buyAll asks the ledger for each of orders from workers goroutines at
// once, released together, and returns every answer. during, if set, is
// called with each answer as it comes, from the goroutine that got it.
func buyAll(t *testing.T, l seckill.Ledger, orders []*seckill.Order, workers int, during func(answer)) *sale {
	t.Helper()
	s := &sale{answers: make([]answer, len(orders))}
	var next atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for {
				i := int(next.Add(1)) - 1
				if i >= len(orders) {
					return
				}
				retries, err := admit(t.Context(), l, orders[i])
				s.retries.Add(int64(retries))
				s.answers[i] = answer{orders[i], err}
				if during != nil {
					during(s.answers[i])
				}
			}
		})
	}
	begun := time.Now()
	close(start)
	wg.Wait()
	s.elapsed = time.Since(begun)
	return s
}

// persisted waits until the database holds each of the admitted orders as
// created, as the mode writes them, and fails t otherwise.
func persisted(t *testing.T, h *Harness, orders []*seckill.Order) {
	t.Helper()
	if len(orders) == 0 {
		return
	}
	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("the %d admitted orders written to the database", len(ids)), func() bool {
		st, err := h.Store.OrderStatuses(t.Context(), ids)
		if err != nil {
			t.Logf("OrderStatuses: %v", err)
			return false
		}
		for _, id := range ids {
			if st[id] != seckill.OrderCreated {
				return false
			}
		}
		return true
	})
}

// row returns the voucher's row in the database.
func row(t *testing.T, h *Harness, id int64) *seckill.Voucher {
	t.Helper()
	v, err := h.Store.Voucher(t.Context(), id)
	if err != nil {
		t.Fatalf("Voucher(%d): %v", id, err)
	}
	return v
}

// remaining returns what the ledger says remains of v, and whether it
// holds v at all: where the ledger says the rows are the sale (a nil
// map), the stock of v's row read now.
func remaining(t *testing.T, h *Harness, v *seckill.Voucher) (int64, bool) {
	t.Helper()
	left, err := h.Ledger.Remaining(t.Context(), v)
	if err != nil {
		t.Fatalf("Remaining(%d): %v", v.ID, err)
	}
	if left == nil {
		return row(t, h, v.ID).Stock, true
	}
	n, ok := left[v.ID]
	return n, ok
}

// checkRemaining fails t unless the ledger holds v with want units left.
func checkRemaining(t *testing.T, h *Harness, v *seckill.Voucher, want int64) {
	t.Helper()
	if got, ok := remaining(t, h, v); !ok || got != want {
		t.Errorf("Remaining(%d) = %d (held: %v); want %d", v.ID, got, ok, want)
	}
}

// checkAgree fails t unless the ledger and the database agree on v, every
// admitted order persisted and every returned unit given back: what
// remains in the ledger is the row's stock, and the row's stock and the
// orders that hold a unit make its initial stock. It returns the row.
func checkAgree(t *testing.T, h *Harness, v *seckill.Voucher) *seckill.Voucher {
	t.Helper()
	r := row(t, h, v.ID)
	n, err := h.Store.CountOrders(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("CountOrders(%d): %v", v.ID, err)
	}
	if r.Stock+n != r.InitialStock {
		t.Errorf("voucher %d: stock %d + %d orders = %d; want the initial stock %d", v.ID, r.Stock, n, r.Stock+n, r.InitialStock)
	}
	checkRemaining(t, h, r, r.Stock)
	view, err := h.Vouchers.Get(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("Get(%d): %v", v.ID, err)
	}
	if view.Remaining == nil || *view.Remaining != r.Stock {
		t.Errorf("Get(%d).Remaining = %v; want %d", v.ID, deref(view.Remaining), r.Stock)
	}
	return r
}

func deref(p *int64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// checkKind fails t unless err is of kind want.
func checkKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v; want %v", what, err, want)
	}
}
