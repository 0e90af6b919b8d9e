package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

const defaultWait = 30 * time.Second

func itoa(n int) string { return strconv.Itoa(n) }

// replicated starts a master with one replica in sync and opens a client
// that waits for one replica with the given timeout. Its admissions run
// alone: the batches are redisledger's, tested there.
func replicated(t *testing.T, timeout time.Duration) (*Client, *faults.RedisProc) {
	t.Helper()
	// No delay before the full sync (5 s by default): the replica syncs at once.
	master := faults.StartRedisProc(t, "--repl-diskless-sync-delay", "0")
	replica := faults.StartRedisProc(t, "--replicaof", "127.0.0.1", itoa(master.Port))
	testenv.WaitFor(t, defaultWait, "the replica to sync", func() bool {
		return replica.Role() == "slave" && testenvField(replica.Info("replication"), "master_link_status") == "up"
	})
	c, err := Open(context.Background(), Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: timeout},
		testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	return c, replica
}

func testenvField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// TestWaitReplicas: with WaitReplicas 1, an admission the replica has is
// admitted; one it cannot acknowledge (paused) is answered unavailable as a
// final *seckill.Error, never admitted, and the buyer's retry once the
// replica is back gets the same order back as a duplicate.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	// Every acknowledgement the test expects must come within it, from
	// another process on a loaded machine.
	c, replica := replicated(t, time.Second)
	ctx := context.Background()
	mustLoad(t, c, onSale(1, 10))
	mustAdmit(t, c, 1, 1, 101)

	replica.Pause()
	err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("Admit with the replica paused = %v; want a final *seckill.Error of ErrUnavailable with RetryAfter", err)
	}
	// The admission stands on the master: the buyer must look for it
	// before buying elsewhere.
	if !strings.Contains(e.Message, "GET /api/orders") {
		t.Errorf("the answer's message is %q: want it to send the buyer to GET /api/orders", e.Message)
	}
	// A duplicate names an order the buyer is told they hold: it waits for
	// the replica too, since the order it names (102 here) may be one the
	// replica never had.
	err = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 103})
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Errorf("Admit(buyer 2 again) with the replica paused = %v; want ErrUnavailable, not the unconfirmed order", err)
	}
	// Answers that write nothing do not wait for the replica.
	mustLoad(t, c, onSale(2, 0))
	if err := c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: 1, OrderID: 105}); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("Admit(sold out) with the replica paused = %v, want ErrSoldOut", err)
	}
	replica.Resume()

	// The buyer's retry, again while the replica, just woken, is slow to
	// acknowledge.
	testenv.WaitFor(t, 10*time.Second, "the retry confirmed by the replica", func() bool {
		err = c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 104})
		return !errors.Is(err, seckill.ErrUnavailable)
	})
	e = errKind(t, err, seckill.ErrDuplicateOrder)
	if e.OrderID != 102 {
		t.Errorf("the retry's order = %d, want 102 (the unconfirmed admission survived)", e.OrderID)
	}
	if got := stock(t, c, 1); got != 8 {
		t.Errorf("stock = %d, want 8", got)
	}
}

// TestWaitDoesNotStall: an admission blocked in WAIT holds only its own
// connection; admissions beside it are answered meanwhile.
func TestWaitDoesNotStall(t *testing.T) {
	t.Parallel()
	c, replica := replicated(t, 3*time.Second)
	ctx := context.Background()
	mustLoad(t, c, onSale(1, 10))
	mustLoad(t, c, onSale(2, 0))
	replica.Pause()
	defer replica.Resume()

	blocked := make(chan error, 1)
	go func() { blocked <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101}) }()
	testenv.WaitFor(t, defaultWait, "the first admission to run and wait", func() bool { return stock(t, c, 1) == 9 })
	// Sold-out answers on the same client, while the first waits for its
	// replica: each must come back before the blocked one does.
	for i := range 20 {
		err := c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: int64(10 + i), OrderID: int64(200 + i)})
		if !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("Admit(sold out) = %v, want ErrSoldOut", err)
		}
		select {
		case err := <-blocked:
			t.Fatalf("the waiting admission returned (%v) before the sold-out answer %d: something stalled behind it", err, i)
		default:
		}
	}
	if err := <-blocked; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("the waiting admission = %v, want ErrUnavailable", err)
	}
}

// TestWaitAdmissionBesideIdleReaders: stream readers waiting on idle
// streams (one per voucher an instance watches, each blocked in XREAD up
// to the workers' Block), as many as rueidis' pool of blocking connections
// holds, do not hold up an admission that waits for its replicas: such
// admissions have connections of their own.
func TestWaitAdmissionBesideIdleReaders(t *testing.T) {
	t.Parallel()
	c, _ := replicated(t, 10*time.Second)
	ctx := context.Background()
	mustLoad(t, c, onSale(1, 10))
	mustLoad(t, c, onSale(2, 10))

	// Readers block far longer than the test waits for the admission.
	rctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() {
		cancel()
		readers.Wait()
	}()
	blocked := func() int {
		info, _ := do(t, c, "INFO", "clients").ToString()
		n, _ := strconv.Atoi(testenvField(info, "blocked_clients"))
		return n
	}
	// A hundred at a time: a thousand connections dialled at once overflow
	// the server's listen backlog, and the dials retried take long.
	for started := 0; started < rueidis.DefaultPoolSize; {
		batch := min(100, rueidis.DefaultPoolSize-started)
		for range batch {
			// As a worker's reader does, each waits again after an error.
			readers.Go(func() {
				for rctx.Err() == nil {
					if _, err := c.WaitOrders(rctx, seckill.Shard{VoucherID: 2}, time.Minute); err != nil && rctx.Err() == nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		started += batch
		testenv.WaitFor(t, defaultWait, fmt.Sprintf("%d readers blocked in Redis", started), func() bool { return blocked() >= started })
	}

	admitted := make(chan error, 1)
	go func() { admitted <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101}) }()
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatalf("Admit beside idle readers = %v, want admitted", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the admission waiting for its replica was not answered within 15s: it waits for a connection behind %d idle readers",
			rueidis.DefaultPoolSize)
	}
}

// TestTransferWaitsForReplicas: with WaitReplicas 1, a transfer's take
// must be on the donor's replica before the receiver adds its units (a
// failover to a replica without the take would give them back to the
// donor while the receiver sells them too). With the replica paused, a
// borrow moves nothing to the receiver and leaves the transfer taken, in
// flight; once the replica is back, FinishTransfers gives it, and the
// shards hold the initial stock throughout.
func TestTransferWaitsForReplicas(t *testing.T) {
	t.Parallel()
	c, replica := replicated(t, 300*time.Millisecond)
	ctx := context.Background()
	v := onSale(1, 10)
	v.Shards, v.Generation = 2, 7
	mustLoad(t, c, v)
	l := c.Learn(v)
	// Shard 0 is empty: its buyers must borrow from shard 1.
	do(t, c, "SET", l.shards[0].Stock, "0")
	do(t, c, "SET", l.shards[1].Stock, "10")

	replica.Pause()
	if b, err := c.Borrow(ctx, v.ID, 0); err == nil || b.Moved != 0 {
		t.Fatalf("Borrow with the donor's replica paused = %+v, %v; want an error, nothing moved", b, err)
	}
	if n := stockOf(t, c, l.shards[0]); n != 0 {
		t.Errorf("the receiver's stock is %d with the take not on a replica; want 0", n)
	}
	s := checkObservedInvariant(t, c, v, "after a borrow whose take was not replicated")
	if s.inFlight == 0 {
		t.Errorf("nothing in flight after the take; want the take's units in flight")
	}
	replica.Resume()
	testenv.WaitFor(t, defaultWait, "the stalled transfer to be given", func() bool {
		_, err := c.FinishTransfers(ctx, v.ID, 0)
		return err == nil && stockOf(t, c, l.shards[0]) > 0
	})
	if s := checkObservedInvariant(t, c, v, "after the transfer was finished"); s.inFlight != 0 {
		t.Errorf("%d units still in flight after FinishTransfers", s.inFlight)
	}
}
