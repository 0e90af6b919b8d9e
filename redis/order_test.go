package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// snapshot is what admission writes for a voucher.
type snapshot struct {
	Stock  int64
	Buyers map[string]string
	Orders []rueidis.XRangeEntry
}

func snap(t *testing.T, c *Client, voucherID int64) snapshot {
	t.Helper()
	k := c.keys.voucher(voucherID)
	return snapshot{Stock: stock(t, c, voucherID), Buyers: hash(t, c, k.Buyers), Orders: entries(t, c, k.Orders)}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		mustLoad(t, c, onSale(1, 2))
		k := c.keys.voucher(1)

		before := time.Now().UnixMilli()
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1001}); err != nil {
			t.Fatalf("Admit: %v", err)
		}
		after := time.Now().UnixMilli()
		got := snap(t, c, 1)
		if len(got.Orders) != 1 {
			t.Fatalf("stream holds %d entries, want 1", len(got.Orders))
		}
		at, err := strconv.ParseInt(got.Orders[0].FieldValues["at"], 10, 64)
		if err != nil || at < before-1 || at > after+1 {
			t.Errorf("entry's at = %q, want the admission time in [%d, %d]", got.Orders[0].FieldValues["at"], before, after)
		}
		want := snapshot{Stock: 1, Buyers: map[string]string{"7": "1001"}, Orders: []rueidis.XRangeEntry{{
			ID:          got.Orders[0].ID,
			FieldValues: map[string]string{"id": "1001", "user": "7", "voucher": "1", "at": got.Orders[0].FieldValues["at"]},
		}}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("after admission (-want +got):\n%s", diff)
		}

		// The same buyer again, with a new order id: the first order comes
		// back (G5), and nothing is written.
		e := errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1002}), seckill.ErrDuplicateOrder)
		if e.OrderID != 1001 {
			t.Errorf("duplicate answer carries order %d, want the first, 1001", e.OrderID)
		}
		if diff := cmp.Diff(want, snap(t, c, 1)); diff != "" {
			t.Errorf("after a duplicate (-want +got):\n%s", diff)
		}

		mustAdmit(t, c, 1, 8, 1003)
		want = snap(t, c, 1)
		if want.Stock != 0 || len(want.Buyers) != 2 || len(want.Orders) != 2 {
			t.Fatalf("after the last unit: %+v, want stock 0, 2 buyers, 2 entries", want)
		}
		errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 9, OrderID: 1004}), seckill.ErrSoldOut)
		if diff := cmp.Diff(want, snap(t, c, 1)); diff != "" {
			t.Errorf("after a sold-out answer (-want +got):\n%s", diff)
		}
		// A buyer who has an order hears of it even when sold out.
		if e := errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 8, OrderID: 1005}), seckill.ErrDuplicateOrder); e.OrderID != 1003 {
			t.Errorf("duplicate after sold out carries order %d, want 1003", e.OrderID)
		}
		if got := xlen(t, c, k.Orders); got != 2 {
			t.Errorf("stream length %d, want 2", got)
		}
	})
}

func TestAdmitWindow(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		now := time.Now()
		mustLoad(t, c, &seckill.Voucher{ID: 2, Stock: 5, BeginTime: now.Add(time.Hour), EndTime: now.Add(2 * time.Hour)})
		mustLoad(t, c, &seckill.Voucher{ID: 3, Stock: 5, BeginTime: now.Add(-2 * time.Hour), EndTime: now.Add(-time.Hour)})

		errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 2, UserID: 7, OrderID: 1001}), seckill.ErrNotStarted)
		errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 3, UserID: 7, OrderID: 1002}), seckill.ErrEnded)
		for _, id := range []int64{2, 3} {
			want := snapshot{Stock: 5}
			if diff := cmp.Diff(want, snap(t, c, id), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("voucher %d after a refused admission (-want +got):\n%s", id, diff)
			}
		}
	})
}

// TestAdmitWindowBounds checks the window's edges to the millisecond on
// the embedded server, whose clock the test sets: [begin, end).
func TestAdmitWindowBounds(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	arm(t, c)
	ctx := context.Background()
	begin := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	end := begin.Add(time.Hour)
	mustLoad(t, c, &seckill.Voucher{ID: 4, Stock: 5, BeginTime: begin, EndTime: end})
	tests := []struct {
		at   time.Time
		want error
	}{
		{begin.Add(-time.Millisecond), seckill.ErrNotStarted},
		{begin, nil},
		{end.Add(-time.Millisecond), nil},
		{end, seckill.ErrEnded},
	}
	for i, tt := range tests {
		c.server.SetTime(tt.at)
		err := c.Admit(ctx, seckill.Admission{VoucherID: 4, UserID: int64(10 + i), OrderID: int64(100 + i)})
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("Admit at %v: got %v, want %v", tt.at, err, tt.want)
		}
	}
	if got := stock(t, c, 4); got != 3 {
		t.Errorf("stock %d, want 3", got)
	}
}

func TestAdmitNotLoaded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		k := c.keys.voucher(5)
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 5, UserID: 7, OrderID: 1001}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Fatalf("Admit to a voucher never loaded: got %v, want ErrVoucherNotLoaded", err)
		}
		for _, key := range []string{k.Stock, k.Meta, k.Buyers, k.Orders} {
			if n, _ := do(t, c, "EXISTS", key).AsInt64(); n != 0 {
				t.Errorf("key %s written by a refused admission", key)
			}
		}
		// Half loaded: a window and no stock (unloaded), or a stock and no
		// window, is not loaded either.
		mustLoad(t, c, onSale(5, 3))
		if err := c.Unload(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 5, UserID: 7, OrderID: 1002}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit with a window and no stock: got %v, want ErrVoucherNotLoaded", err)
		}
		do(t, c, "SET", k.Stock, "3")
		do(t, c, "HDEL", k.Meta, "begin", "end")
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 5, UserID: 7, OrderID: 1003}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit with a stock and no window: got %v, want ErrVoucherNotLoaded", err)
		}
		if got := snap(t, c, 5); got.Stock != 3 || len(got.Buyers) != 0 || len(got.Orders) != 0 {
			t.Errorf("after refused admissions: %+v, want stock 3 and nothing else", got)
		}
	})
}

// TestAdmitUnverified: admission runs only on a server that an instance
// checked and armed; on one that restarted (its script cache empty) or was
// disarmed it answers ErrCacheUnverified and writes nothing, and it never
// loads the script on the way as other scripts do.
func TestAdmitUnverified(t *testing.T) {
	t.Parallel()
	// A server of the test's own: flushing the shared one's scripts would
	// stop other tests' admissions.
	url, _ := faults.StartRedis(t)
	own, err := Open(context.Background(), Config{URL: url}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	embedded, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(embedded.Close)
	for name, c := range map[string]*Client{"redis": own, "embedded": embedded} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mustLoad(t, c, onSale(1, 3))
			// Never armed: a server just started.
			if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1001}); !errors.Is(err, seckill.ErrCacheUnverified) {
				t.Fatalf("Admit on a server never armed = %v, want ErrCacheUnverified", err)
			}
			arm(t, c)
			mustAdmit(t, c, 1, 7, 1001)
			if err := c.DisarmAdmission(ctx); err != nil {
				t.Fatal(err)
			}
			for range 2 { // and not loaded on the way by the first try
				if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 8, OrderID: 1002}); !errors.Is(err, seckill.ErrCacheUnverified) {
					t.Fatalf("Admit on a disarmed server = %v, want ErrCacheUnverified", err)
				}
			}
			if got := snap(t, c, 1); got.Stock != 2 || len(got.Buyers) != 1 || len(got.Orders) != 1 {
				t.Errorf("after refused admissions: %+v, want stock 2 and the first buyer alone", got)
			}
			arm(t, c)
			mustAdmit(t, c, 1, 8, 1002)
		})
	}
	// Another deployment on the same server (another key prefix) is not
	// armed by this one's check: its admission script is its own.
	other, err := Open(context.Background(), Config{URL: url, Prefix: "other"}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	mustLoad(t, other, onSale(1, 3))
	if err := other.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1001}); !errors.Is(err, seckill.ErrCacheUnverified) {
		t.Errorf("Admit of another deployment once this one armed the server = %v, want ErrCacheUnverified", err)
	}
}

func TestAdmitUnavailable(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustLoad(t, c, onSale(6, 3))
	c.server.Close()
	if err := c.Admit(context.Background(), seckill.Admission{VoucherID: 6, UserID: 7, OrderID: 1001}); !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("Admit with Redis gone: got %v, want ErrUnavailable", err)
	}
}

func TestAdmitConcurrent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		const (
			goroutines = 50
			tries      = 4
			users      = 20
			stockLeft  = 10
		)
		ctx := context.Background()
		mustLoad(t, c, onSale(1, stockLeft))
		var (
			mu       sync.Mutex
			admitted = map[int64]int{}            // user -> admissions
			seen     = map[int64]map[int64]bool{} // user -> order ids answered
			others   []error                      // unexpected answers
			soldOut  = map[int64]int{}            // user -> sold-out answers
			nextID   atomic.Int64
			wg       sync.WaitGroup
		)
		nextID.Store(5000)
		for g := range goroutines {
			wg.Go(func() {
				user := int64(g%users + 1)
				for range tries {
					id := nextID.Add(1)
					err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: user, OrderID: id})
					var e *seckill.Error
					mu.Lock()
					if seen[user] == nil {
						seen[user] = map[int64]bool{}
					}
					switch {
					case err == nil:
						admitted[user]++
						seen[user][id] = true
					case errors.As(err, &e) && e.Kind == seckill.ErrDuplicateOrder:
						seen[user][e.OrderID] = true
					case errors.Is(err, seckill.ErrSoldOut):
						soldOut[user]++
					default:
						others = append(others, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(others) > 0 {
			t.Fatalf("unexpected answers: %v", others)
		}
		total := 0
		for user, n := range admitted {
			total += n
			if n != 1 {
				t.Errorf("user %d admitted %d times", user, n)
			}
		}
		if total != stockLeft {
			t.Errorf("%d admissions, want %d", total, stockLeft)
		}
		buyers := hash(t, c, c.keys.voucher(1).Buyers)
		for user, ids := range seen {
			if len(ids) > 1 {
				t.Errorf("user %d was answered with %d order ids: %v", user, len(ids), ids)
			}
			if admitted[user] == 0 && len(ids) > 0 {
				t.Errorf("user %d never admitted but told of orders %v", user, ids)
			}
			for id := range ids {
				if buyers[strconv.FormatInt(user, 10)] != strconv.FormatInt(id, 10) {
					t.Errorf("user %d told of order %d, buyers hash holds %q", user, id, buyers[strconv.FormatInt(user, 10)])
				}
			}
		}
		es := entries(t, c, c.keys.voucher(1).Orders)
		fromStream := map[string]string{}
		for _, e := range es {
			fromStream[e.FieldValues["user"]] = e.FieldValues["id"]
		}
		if len(es) != stockLeft {
			t.Errorf("stream length %d, want %d", len(es), stockLeft)
		}
		if diff := cmp.Diff(buyers, fromStream); diff != "" {
			t.Errorf("buyers hash vs stream's users and orders (-buyers +stream):\n%s", diff)
		}
		if got := stock(t, c, 1); got != 0 {
			t.Errorf("stock %d, want 0", got)
		}
	})
}

func TestBuyerOrders(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		for id := int64(1); id <= 3; id++ {
			mustLoad(t, c, onSale(id, 5))
		}
		mustAdmit(t, c, 1, 7, 1001)
		mustAdmit(t, c, 3, 7, 3001)
		mustAdmit(t, c, 3, 8, 3002)

		got, err := c.BuyerOrders(ctx, 7, 1, 2, 3, 99)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{1: 1001, 3: 3001}, got); diff != "" {
			t.Errorf("BuyerOrders(7) (-want +got):\n%s", diff)
		}
		got, err = c.BuyerOrders(ctx, 9, 1, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{}, got); diff != "" {
			t.Errorf("BuyerOrders of a user with none (-want +got):\n%s", diff)
		}
		got, err = c.BuyerOrders(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int64]int64{}, got); diff != "" {
			t.Errorf("BuyerOrders of no vouchers (-want +got):\n%s", diff)
		}
		// BuyerOrder: one voucher's slot, 0 when it holds none.
		for _, tc := range []struct{ user, voucher, want int64 }{{7, 1, 1001}, {7, 2, 0}, {7, 3, 3001}, {8, 3, 3002}, {8, 1, 0}, {7, 99, 0}} {
			if got, err := c.BuyerOrder(ctx, tc.user, tc.voucher); err != nil || got != tc.want {
				t.Errorf("BuyerOrder(user %d, voucher %d) = %d, %v; want %d", tc.user, tc.voucher, got, err, tc.want)
			}
		}
	})
}

// TestHotVoucherKeys: the keys kept for the vouchers being sold are
// keyspace.voucher's, however many vouchers come and go.
func TestHotVoucherKeys(t *testing.T) {
	t.Parallel()
	c := &Client{keys: keyspace{prefix: "p"}}
	for round := range 3 {
		for id := int64(1); id <= maxHotKeys+10; id += 7 {
			if got, want := *c.hotVoucher(id), c.keys.voucher(id); got != want {
				t.Fatalf("round %d: hotVoucher(%d) = %+v, want %+v", round, id, got, want)
			}
		}
	}
	if n := c.hot.Len(); n == 0 || n > maxHotKeys {
		t.Errorf("hotKeys holds more than %d vouchers", maxHotKeys)
	}
}

// benchClient opens the real Redis under a prefix of the benchmark's own.
func benchClient(b *testing.B) *Client {
	b.Helper()
	c, err := Open(context.Background(), Config{URL: testenv.RedisURL(b), Prefix: testenv.RedisPrefix(b)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	arm(b, c)
	return c
}

// BenchmarkAdmit measures one admission on the real Redis, from many
// goroutines, each buyer distinct.
func BenchmarkAdmit(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	if _, err := c.LoadVoucher(ctx, onSale(1, 1<<40)); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // many buyers at once: rueidis pipelines their calls
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: n, OrderID: n}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAdmitSoldOut measures the sold-out answer, the one most buyers
// of a flash sale get.
func BenchmarkAdmitSoldOut(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := onSale(1, 1)
	if _, err := c.LoadVoucher(ctx, v); err != nil {
		b.Fatal(err)
	}
	if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 1}); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	next.Store(1)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: n, OrderID: n}); !errors.Is(err, seckill.ErrSoldOut) {
				b.Errorf("got %v, want ErrSoldOut", err)
				return
			}
		}
	})
}

// TestAdmitDuplicateAfterEnd: a buyer who asks again once the sale has
// ended (a retry after a lost answer, say) still learns of their order
// (G5), as they do once it is sold out.
func TestAdmitDuplicateAfterEnd(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	arm(t, c)
	begin := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	mustLoad(t, c, &seckill.Voucher{ID: 1, Stock: 5, BeginTime: begin, EndTime: begin.Add(time.Hour)})
	c.server.SetTime(begin)
	mustAdmit(t, c, 1, 7, 1001)
	c.server.SetTime(begin.Add(time.Hour))
	if e := errKind(t, c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 7, OrderID: 1002}), seckill.ErrDuplicateOrder); e.OrderID != 1001 {
		t.Errorf("duplicate after the end carries order %d, want 1001", e.OrderID)
	}
}
