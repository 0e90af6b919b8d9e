package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// A Redis call that runs longer than slowCall is logged; longer than
// stalled, it fails the test. Each step of deleting or rebuilding a voucher
// takes well under a millisecond; a loaded test machine stretches some to
// tens of them, so the failure is set at 100 ms. Deleting two million
// buyers in one call took 3 s or more.
const (
	slowCall = 5 * time.Millisecond
	stalled  = 100 * time.Millisecond
)

// TestBigVoucherNeverBlocksRedis: a voucher of two million buyers and a
// long order stream is unloaded, rebuilt, replaced by another generation
// (by a rebuild and by a load) and dropped while another voucher sells,
// and no Redis call of any of it runs longer than a few milliseconds
// (Redis's SLOWLOG; the test fails above stalled): the scripts delete big keys with UNLINK, whose memory Redis
// frees in the background, and a rebuild stages in bounded steps.
func TestBigVoucherNeverBlocksRedis(t *testing.T) {
	t.Parallel()
	const (
		buyers  = 2_000_000
		entries = 100_000
		big     = int64(1)
		sold    = int64(2)
	)
	p := testenv.StartRedisProc(t, "--slowlog-log-slower-than", strconv.FormatInt(slowCall.Microseconds(), 10), "--slowlog-max-len", "128")
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	k := c.keys.voucher(big)
	v := onSale(big, 3*buyers)
	v.Generation = 1
	mustLoad(t, c, v)
	mustLoad(t, c, onSale(sold, 1<<40))

	// populate gives the big voucher its two million buyers, and an order
	// stream its group is done with (drained, as a voucher past its
	// retention is): the first time in pipelined batches, then by
	// restoring what that made. Its slow calls are cleared from the
	// SLOWLOG after.
	var dumps map[string]string
	populate := func() {
		t.Helper()
		start := time.Now()
		defer func() { t.Logf("populating took %v", time.Since(start).Round(time.Millisecond)) }()
		if dumps != nil {
			for key, dump := range dumps {
				do(t, c, "RESTORE", key, "0", dump, "REPLACE")
			}
			do(t, c, "SLOWLOG", "RESET")
			return
		}
		const batch = 1000
		var cmds rueidis.Commands
		for i := 0; i < buyers; i += batch {
			args := make([]string, 0, 2*batch)
			for u := i; u < i+batch; u++ {
				args = append(args, strconv.Itoa(u+1), strconv.Itoa(1_000_000_000+u))
			}
			cmds = append(cmds, c.rdb.B().Arbitrary("HSET").Keys(k.Buyers).Args(args...).Build())
		}
		for i := range entries {
			cmds = append(cmds, c.rdb.B().Xadd().Key(k.Orders).Id("*").FieldValue().
				FieldValue("id", strconv.Itoa(2_000_000_000+i)).FieldValue("user", strconv.Itoa(10_000_000+i)).
				FieldValue("voucher", "1").FieldValue("at", "0").Build())
		}
		cmds = append(cmds, c.rdb.B().Arbitrary("XGROUP", "SETID").Keys(k.Orders).Args(Group, "$").Build())
		for len(cmds) > 0 {
			n := min(len(cmds), 500)
			for _, r := range c.rdb.DoMulti(ctx, cmds[:n]...) {
				if err := r.Error(); err != nil {
					t.Fatalf("populate: %v", err)
				}
			}
			cmds = cmds[n:]
		}
		if n, _ := do(t, c, "HLEN", k.Buyers).AsInt64(); n != buyers {
			t.Fatalf("%d buyers populated, want %d", n, buyers)
		}
		dumps = map[string]string{}
		for _, key := range []string{k.Buyers, k.Orders} {
			dump, err := do(t, c, "DUMP", key).ToString()
			if err != nil {
				t.Fatal(err)
			}
			dumps[key] = dump
		}
		do(t, c, "SLOWLOG", "RESET")
	}
	// The database's orders of the big voucher, made up a page at a time.
	db := func(_ context.Context, _, after int64, limit int) ([]*seckill.Order, error) {
		first := max(after+1, 1_000_000_000)
		var out []*seckill.Order
		for id := first; id < 1_000_000_000+buyers && len(out) < limit; id++ {
			out = append(out, &seckill.Order{ID: id, UserID: id - 1_000_000_000 + 1, VoucherID: big})
		}
		return out, nil
	}

	// Another voucher sells all along, as another instance: on connections
	// of its own, so that its admissions wait for Redis alone.
	seller, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seller.Close)
	stop := make(chan struct{})
	var admitted atomic.Int64
	var slowest atomic.Int64
	var sellErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for u := int64(1); ; u++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			err := seller.Admit(ctx, seckill.Admission{VoucherID: sold, UserID: u, OrderID: u})
			if d := int64(time.Since(start)); d > slowest.Load() {
				slowest.Store(d)
			}
			if err != nil {
				sellErr = err
				return
			}
			admitted.Add(1)
		}
	})

	slowlog := func(step string) {
		t.Helper()
		rows, err := do(t, c, "SLOWLOG", "GET", "128").ToArray()
		if err != nil {
			t.Fatal(err)
		}
		var longest time.Duration
		for _, r := range rows {
			f, err := r.ToArray()
			if err != nil || len(f) < 4 {
				t.Fatalf("SLOWLOG row %v: %v", r, err)
			}
			us, _ := f[2].AsInt64()
			d := time.Duration(us) * time.Microsecond
			longest = max(longest, d)
			if d > stalled {
				args, _ := f[3].AsStrSlice()
				if len(args) > 3 {
					args = append(args[:3], "…")
				}
				t.Errorf("%s: a Redis call ran %v (over %v): %s", step, d, stalled, strings.Join(args, " "))
			}
		}
		if len(rows) > 0 {
			t.Logf("%s: %d Redis calls ran over %v, the longest %v", step, len(rows), slowCall, longest)
		}
		do(t, c, "SLOWLOG", "RESET")
	}
	step := func(name string, fn func() error) {
		t.Helper()
		start := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s took %v", name, time.Since(start).Round(time.Millisecond))
		slowlog(name)
	}
	// rebuildAs rebuilds the big voucher as generation gen from orders
	// (none if nil).
	rebuildAs := func(gen int64, orders seckill.OrderPages) func() error {
		return func() error {
			if orders == nil {
				orders = func(context.Context, int64, int64, int) ([]*seckill.Order, error) { return nil, nil }
			}
			w := *v
			w.Generation = gen
			res, err := c.Rebuild(ctx, &w, orders)
			if err == nil && !res.Done {
				err = fmt.Errorf("Rebuild = %+v, want done", res)
			}
			return err
		}
	}

	populate()
	step("an unload (unload.lua)", func() error { return c.Unload(ctx, big) })
	step("a rebuild", rebuildAs(1, db))
	step("a load replacing another generation (load_voucher.lua)", func() error {
		w := *v
		w.Generation = 2
		_, err := c.LoadVoucher(ctx, &w)
		return err
	})
	populate()
	step("a rebuild replacing another generation (rebuild_begin.lua)", rebuildAs(3, nil))
	populate()
	step("a drop (drop_voucher.lua)", func() error {
		dropped, err := c.DropVoucher(ctx, big)
		if err == nil && !dropped {
			err = errors.New("not dropped")
		}
		return err
	})
	close(stop)
	wg.Wait()
	if sellErr != nil {
		t.Errorf("selling the other voucher: %v", sellErr)
	}
	if admitted.Load() == 0 {
		t.Error("the other voucher sold nothing meanwhile")
	}
	t.Logf("the other voucher sold %d meanwhile; its slowest admission took %v", admitted.Load(), time.Duration(slowest.Load()).Round(time.Microsecond))
}
