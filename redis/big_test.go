package redis

import (
	"context"
	"errors"
	"fmt"
	"github.com/seckill/seckill/internal/testenv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
)

// What the big voucher's deletes and rebuild may take. A delete of the
// voucher (unload, replace, drop) may spend at most deleteCPU of Redis's
// main thread: CPU time, which a loaded machine's stalls do not stretch.
// With UNLINK it spent 0-2 ms; a DEL of two million buyers spent about a
// second (0.1 s for a hash as RESTORE lays it out). A call that runs longer
// than slowCall (SLOWLOG, wall time) is logged, and one longer than
// stalled fails the test: each of a rebuild's steps takes well under a
// millisecond, but a loaded test machine stretched some to 300 ms.
const (
	deleteCPU = 20 * time.Millisecond
	slowCall  = 5 * time.Millisecond
	stalled   = time.Second
)

// TestBigVoucherNeverBlocksRedis: a voucher of two million buyers and a
// long order stream is unloaded, rebuilt, replaced by another generation
// (by a load and by a rebuild) and dropped while another voucher sells,
// and none of it holds Redis: each delete takes Redis's main thread next
// to no time (the scripts delete big keys with UNLINK, whose memory Redis
// frees in a background thread), and a rebuild stages in bounded steps.
func TestBigVoucherNeverBlocksRedis(t *testing.T) {
	t.Parallel()
	const (
		buyers  = 2_000_000
		entries = 100_000
		big     = int64(1)
		sold    = int64(2)
	)
	p := faults.StartRedisProc(t, "--slowlog-log-slower-than", strconv.FormatInt(slowCall.Microseconds(), 10), "--slowlog-max-len", "128")
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testenv.Logger(t))
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
	// retention is): the first time by a Lua loop, then by restoring what
	// that made. Its slow calls are cleared from the SLOWLOG after.
	var dumps map[string]string
	slow, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// populating is set while populate runs: the test's own setup, which
	// RESTOREs millions of entries in one command and blocks Redis for
	// seconds under load (no step under test does): an admission of the
	// other voucher that meets it may time out, and is not counted.
	var populating atomic.Bool
	populate := func() {
		t.Helper()
		populating.Store(true)
		defer populating.Store(false)
		start := time.Now()
		defer func() { t.Logf("populating took %v", time.Since(start).Round(time.Millisecond)) }()
		if dumps != nil {
			for key, dump := range dumps {
				// On a connection of its own with a long deadline: a
				// client's usual timeout is shorter than moving 2 M buyers
				// on a loaded machine.
				if _, err := p.Do(slow, "RESTORE", key, "0", dump, "REPLACE"); err != nil {
					t.Fatalf("RESTORE %s: %v", key, err)
				}
			}
			do(t, c, "SLOWLOG", "RESET")
			return
		}
		// In Redis, a chunk a call: the test's process builds nothing.
		const chunk = 50_000
		fill := `for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  if ARGV[3] == 'buyers' then
    redis.call('HSET', KEYS[1], i, 1000000000 + i)
  else
    redis.call('XADD', KEYS[1], '*', 'id', 2000000000 + i, 'user', 10000000 + i, 'voucher', '1', 'at', '0')
  end
end`
		for _, f := range []struct {
			key, what string
			n         int
		}{{k.Buyers, "buyers", buyers}, {k.Orders, "orders", entries}} {
			for i := 1; i <= f.n; i += chunk {
				do(t, c, "EVAL", fill, "1", f.key, strconv.Itoa(i), strconv.Itoa(min(i+chunk-1, f.n)), f.what)
			}
		}
		do(t, c, "XGROUP", "SETID", k.Orders, Group, "$")
		if n, _ := do(t, c, "HLEN", k.Buyers).AsInt64(); n != buyers {
			t.Fatalf("%d buyers populated, want %d", n, buyers)
		}
		dumps = map[string]string{}
		for _, key := range []string{k.Buyers, k.Orders} {
			dump, err := p.Do(slow, "DUMP", key)
			if err != nil {
				t.Fatalf("DUMP %s: %v", key, err)
			}
			dumps[key], _ = dump.(string)
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
	seller, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seller.Close)
	stop := make(chan struct{})
	var admitted atomic.Int64
	var slowest atomic.Int64
	var sellErr error
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopSelling := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopSelling) // also when the test fails half-way
	wg.Go(func() {
		for u := int64(1); ; u++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			during := populating.Load()
			err := seller.Admit(ctx, seckill.Admission{VoucherID: sold, UserID: u, OrderID: u})
			if during || populating.Load() {
				continue // the setup's RESTORE, not a step under test
			}
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
	// mainCPU returns the CPU time Redis's main thread has spent.
	mainCPU := func() time.Duration {
		t.Helper()
		info, err := do(t, c, "INFO", "cpu").ToString()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_sys_main_thread" || k == "used_cpu_user_main_thread" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("INFO cpu: %s: %v", line, err)
				}
				sum += f
			}
		}
		if sum == 0 {
			t.Fatalf("INFO cpu has no main thread's times:\n%s", info)
		}
		return time.Duration(sum * float64(time.Second))
	}
	// step runs fn, a delete of the big voucher if deletes.
	step := func(name string, deletes bool, fn func() error) {
		t.Helper()
		slowest.Store(0)
		start, cpu := time.Now(), mainCPU()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cpu = mainCPU() - cpu
		t.Logf("%s took %v, %v of Redis's main thread; the other voucher's slowest admission meanwhile took %v", name,
			time.Since(start).Round(time.Millisecond), cpu.Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Microsecond))
		if deletes && cpu > deleteCPU {
			t.Errorf("%s took %v of Redis's main thread (the other voucher's admissions meanwhile included), want at most %v", name, cpu.Round(time.Millisecond), deleteCPU)
		}
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
	step("an unload (unload.lua)", true, func() error { return c.Unload(ctx, big) })
	step("a rebuild", false, rebuildAs(1, db))
	step("a load replacing another generation (load_voucher.lua)", true, func() error {
		w := *v
		w.Generation = 2
		_, err := c.LoadVoucher(ctx, &w)
		return err
	})
	populate()
	step("a rebuild replacing another generation (rebuild_begin.lua)", true, rebuildAs(3, nil))
	populate()
	step("a drop (drop_voucher.lua)", true, func() error {
		dropped, err := c.DropVoucher(ctx, big)
		if err == nil && !dropped {
			err = errors.New("not dropped")
		}
		return err
	})
	stopSelling()
	if sellErr != nil {
		t.Errorf("selling the other voucher: %v", sellErr)
	}
	if admitted.Load() == 0 {
		t.Error("the other voucher sold nothing meanwhile")
	}
	t.Logf("the other voucher sold %d meanwhile", admitted.Load())
}
