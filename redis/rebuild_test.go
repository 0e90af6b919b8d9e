package redis

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seckill/seckill"
)

// database is the created orders of a voucher as the database holds them,
// read a page at a time as seckill.OrderPages reads them.
type database struct {
	mu     sync.Mutex
	orders []*seckill.Order // by id ascending
	// onPage, if set, runs before each page is read: a test's way to act
	// in the middle of a rebuild.
	onPage func(page int)
	pages  int
}

func (d *database) read(_ context.Context, _, afterID int64, limit int) ([]*seckill.Order, error) {
	d.mu.Lock()
	page, on := d.pages, d.onPage
	d.pages++
	d.mu.Unlock()
	if on != nil {
		on(page)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*seckill.Order
	for _, o := range d.orders {
		if o.ID > afterID && len(out) < limit {
			out = append(out, o)
		}
	}
	return out, nil
}

func rebuild(t *testing.T, c *Client, v *seckill.Voucher, db *database) seckill.Rebuilt {
	t.Helper()
	if db == nil {
		db = &database{}
	}
	res, err := c.Rebuild(context.Background(), v, db.read)
	if err != nil {
		t.Fatalf("Rebuild(%d): %v", v.ID, err)
	}
	passHold(t, c, v.ID)
	return res
}

// queue appends an order message to the voucher's stream as admit.lua does.
func queue(t *testing.T, c *Client, voucherID, userID, orderID int64) {
	t.Helper()
	do(t, c, "XADD", c.keys.voucher(voucherID).Orders, "*", "id", strconv.FormatInt(orderID, 10),
		"user", strconv.FormatInt(userID, 10), "voucher", strconv.FormatInt(voucherID, 10),
		"at", strconv.FormatInt(time.Now().UnixMilli(), 10))
}

// groups returns the stream's groups' names and last delivered ids.
func groups(t *testing.T, c *Client, stream string) map[string]string {
	t.Helper()
	rows, err := do(t, c, "XINFO", "GROUPS", stream).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		m, err := r.AsMap()
		if err != nil {
			t.Fatal(err)
		}
		name, last := m["name"], m["last-delivered-id"]
		n, _ := name.ToString()
		l, _ := last.ToString()
		got[n] = l
	}
	return got
}

func TestRebuild(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(9, 10)
		k := c.keys.voucher(9)
		db := &database{orders: []*seckill.Order{{ID: 11, UserID: 1}, {ID: 12, UserID: 2}, {ID: 13, UserID: 3}, {ID: 14, UserID: 4}}}
		queue(t, c, 9, 5, 15) // admitted, not in the database yet
		queue(t, c, 9, 2, 12) // admitted and in the database already

		if res := rebuild(t, c, v, db); !res.Done || res.Remaining != 5 || res.Replaced {
			t.Errorf("Rebuild = %+v; want done, 5 left (10 less 5 buyers), nothing replaced", res)
		}
		if got := stock(t, c, 9); got != 5 {
			t.Errorf("stock %d, want 5", got)
		}
		wantMeta := map[string]string{
			"begin": strconv.FormatInt(v.BeginTime.UnixMilli(), 10),
			"end":   strconv.FormatInt(v.EndTime.UnixMilli(), 10),
			// Generation 0 (a voucher made before generations) and the
			// first epoch are the absent fields. The row's pause, where
			// meta held none (control.lua).
			"paused": "0",
		}
		gotMeta := hash(t, c, k.Meta)
		// The rebuild held the stock for a moment, and set a new version
		// (soldout.go): both are there, and not compared.
		for _, f := range []string{"held", "ver"} {
			if gotMeta[f] == "" {
				t.Errorf("meta %v: no %s", gotMeta, f)
			}
			delete(gotMeta, f)
		}
		if diff := cmp.Diff(wantMeta, gotMeta); diff != "" {
			t.Errorf("meta (-want +got):\n%s", diff)
		}
		wantBuyers := map[string]string{"1": "11", "2": "12", "3": "13", "4": "14", "5": "15"}
		if diff := cmp.Diff(wantBuyers, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		g := groups(t, c, k.Orders)
		if last, ok := g[Group]; !ok || len(g) != 1 || (last != "0-0" && last != "0") {
			t.Errorf("groups %v, want only %s at 0", g, Group)
		}
		// Made at 0, the group delivers what the stream holds.
		if got := readOrders(t, c, 9, "a", 10); len(got) != 2 {
			t.Errorf("ReadOrders after the rebuild: %d messages, want the 2 queued", len(got))
		}

		// Rebuilt: admission works, a buyer of the database is known.
		mustAdmit(t, c, 9, 6, 16)
		if e := errKind(t, c.Admit(ctx, seckill.Admission{VoucherID: 9, UserID: 3, OrderID: 17}), seckill.ErrDuplicateOrder); e.OrderID != 13 {
			t.Errorf("Admit of a buyer from the database: duplicate of %d, want 13", e.OrderID)
		}
		wantBuyers["6"] = "16"

		// A second rebuild changes nothing.
		if res := rebuild(t, c, v, db); res.Done {
			t.Errorf("second Rebuild = %+v; want nothing done", res)
		}
		if got := stock(t, c, 9); got != 4 {
			t.Errorf("stock %d, want 4", got)
		}
		if diff := cmp.Diff(wantBuyers, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}

		// Unload drops stock and buyers, and admission stops.
		if err := c.Unload(ctx, 9); err != nil {
			t.Fatal(err)
		}
		if got := stock(t, c, 9); got != -1 {
			t.Errorf("stock %d after Unload, want none", got)
		}
		if got := hash(t, c, k.Buyers); len(got) != 0 {
			t.Errorf("buyers %v after Unload, want none", got)
		}
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 9, UserID: 8, OrderID: 18}); !errors.Is(err, seckill.ErrVoucherNotLoaded) {
			t.Errorf("Admit after Unload: got %v, want ErrVoucherNotLoaded", err)
		}
		if n := xlen(t, c, k.Orders); n != 3 {
			t.Errorf("stream length %d after Unload, want 3: the queue is kept", n)
		}
		// Rebuilt from the queue alone (the group exists: BUSYGROUP is fine).
		if res := rebuild(t, c, v, nil); !res.Done || res.Remaining != 7 {
			t.Errorf("Rebuild after Unload = %+v; want done, 7 left (10 less the 3 queued buyers)", res)
		}
		if diff := cmp.Diff(map[string]string{"5": "15", "2": "12", "6": "16"}, hash(t, c, k.Buyers)); diff != "" {
			t.Errorf("buyers rebuilt from the queue (-want +got):\n%s", diff)
		}
	})
}

// TestRebuildLarge: a voucher of 50,000 orders, more than Lua unpacks in one
// call, and a backlog of 3,000 queued orders, more than one page of the
// stream, are rebuilt; then exactly the rest of the stock sells.
func TestRebuildLarge(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		const (
			persisted = 50_000
			queued    = 3_000
			initial   = 60_000
		)
		db := &database{}
		for i := range int64(persisted) {
			db.orders = append(db.orders, &seckill.Order{ID: 1_000_000 + i, UserID: 1 + i})
		}
		for i := range int64(queued) {
			queue(t, c, 1, 100_000+i, 2_000_000+i)
		}
		res := rebuild(t, c, onSale(1, initial), db)
		if want := int64(initial - persisted - queued); !res.Done || res.Remaining != want {
			t.Fatalf("Rebuild = %+v; want done with %d left", res, want)
		}
		if n, _ := do(t, c, "HLEN", c.keys.voucher(1).Buyers).AsInt64(); n != persisted+queued {
			t.Errorf("%d buyers after the rebuild, want %d", n, persisted+queued)
		}
		// A buyer of each kind is known.
		for _, b := range [][2]int64{{1, 1_000_000}, {persisted, 1_000_000 + persisted - 1}, {100_000 + queued - 1, 2_000_000 + queued - 1}} {
			e := errKind(t, c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: b[0], OrderID: 9}), seckill.ErrDuplicateOrder)
			if e.OrderID != b[1] {
				t.Errorf("buyer %d: duplicate of %d, want %d", b[0], e.OrderID, b[1])
			}
		}
		// The rest of the stock, to more buyers than it has, at once.
		left := initial - persisted - queued
		var admitted, soldOut atomic.Int64
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for range 16 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(left)+500 {
						return
					}
					err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 500_000 + i, OrderID: 3_000_000 + i})
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, seckill.ErrSoldOut):
						soldOut.Add(1)
					default:
						t.Errorf("Admit: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != int64(left) || soldOut.Load() != 500 || stock(t, c, 1) != 0 {
			t.Errorf("selling the rest: %d admitted, %d sold out, stock %d; want %d, 500, 0", admitted.Load(), soldOut.Load(), stock(t, c, 1), left)
		}
	})
}

// TestRebuildSupersededByUnload: a repair (Unload) while a rebuild is in
// flight, after the rebuild staged buyers that the unload deletes, must not
// let the rebuild set the stock from what is left: it starts over.
func TestRebuildSupersededByUnload(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		db := &database{}
		for i := range int64(2*rebuildPage + 10) {
			db.orders = append(db.orders, &seckill.Order{ID: 1 + i, UserID: 1 + i})
		}
		unloads := 0
		db.onPage = func(page int) {
			// After the first page is staged, the second time round too.
			if page == 1 || page == 4 {
				unloads++
				if err := c.Unload(ctx, 1); err != nil {
					t.Error(err)
				}
			}
		}
		res := rebuild(t, c, onSale(1, 20_000), db)
		if want := int64(20_000 - len(db.orders)); !res.Done || res.Remaining != want {
			t.Errorf("Rebuild with %d unloads in the middle = %+v; want done with %d left", unloads, res, want)
		}
		if n, _ := do(t, c, "HLEN", c.keys.voucher(1).Buyers).AsInt64(); n != int64(len(db.orders)) {
			t.Errorf("%d buyers, want %d", n, len(db.orders))
		}
		// An unload at every page: it gives up, and leaves no stock behind.
		db.onPage = func(int) {
			if err := c.Unload(ctx, 1); err != nil {
				t.Error(err)
			}
		}
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Rebuild(ctx, onSale(1, 20_000), db.read); !errors.Is(err, seckill.ErrUnavailable) {
			t.Errorf("Rebuild unloaded at every page = %v, want ErrUnavailable", err)
		}
		if got := stock(t, c, 1); got != -1 {
			t.Errorf("stock %d after a rebuild that gave up, want none", got)
		}
	})
}

// TestRebuildConcurrent: rebuilds racing one another, here or in other
// instances, and unloads racing them, end with the one right stock.
func TestRebuildConcurrent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		db := &database{}
		for i := range int64(rebuildPage + 100) {
			db.orders = append(db.orders, &seckill.Order{ID: 1 + i, UserID: 1 + i})
		}
		for i := range int64(50) {
			queue(t, c, 1, 900_000+i, 900_000+i)
		}
		v := onSale(1, 10_000)
		want := int64(10_000 - len(db.orders) - 50)
		for round := range 5 {
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					if i == 0 && round > 0 {
						if err := c.Unload(ctx, 1); err != nil {
							t.Error(err)
						}
					}
					if _, err := c.Rebuild(ctx, v, db.read); err != nil && !errors.Is(err, seckill.ErrUnavailable) {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			// Whatever raced, one more rebuild leaves the right stock.
			rebuild(t, c, v, db)
			if got := stock(t, c, 1); got != want {
				t.Fatalf("round %d: stock %d, want %d", round, got, want)
			}
		}
	})
}

// TestRebuildReplacesOtherGeneration: state of another generation of the
// voucher's id (a database reset) is deleted, not merged.
func TestRebuildReplacesOtherGeneration(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		old := onSale(1, 10)
		old.Generation = 5
		mustLoad(t, c, old)
		if err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, Generation: 5, UserID: 7, OrderID: 70}); err != nil {
			t.Fatal(err)
		}
		fresh := onSale(1, 3)
		fresh.Generation = 6
		if res := rebuild(t, c, fresh, &database{orders: []*seckill.Order{{ID: 80, UserID: 8}}}); !res.Done || !res.Replaced || res.Remaining != 2 {
			t.Errorf("Rebuild over another generation = %+v; want done, replaced, 2 left", res)
		}
		if diff := cmp.Diff(map[string]string{"8": "80"}, hash(t, c, c.keys.voucher(1).Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if n := xlen(t, c, c.keys.voucher(1).Orders); n != 0 {
			t.Errorf("the other generation's stream holds %d entries, want none", n)
		}
		if err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, Generation: 6, UserID: 7, OrderID: 71}); err != nil {
			t.Errorf("Admit of the other generation's buyer = %v, want admitted", err)
		}
	})
}

// TestRebuildMoreBuyersThanStock: the stock never goes below zero.
func TestRebuildMoreBuyersThanStock(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		queue(t, c, 1, 3, 13)
		db := &database{orders: []*seckill.Order{{ID: 11, UserID: 1}, {ID: 12, UserID: 2}}}
		if res := rebuild(t, c, onSale(1, 2), db); !res.Done || res.Remaining != 0 {
			t.Errorf("Rebuild = %+v; want done, 0 left", res)
		}
		errKind(t, c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 4, OrderID: 14}), seckill.ErrSoldOut)
	})
}

// TestRebuildAfterDeadLetter: a dead-lettered message gave its stock and
// slot back, and is gone from the stream. Rebuilding must not take them
// again.
func TestRebuildAfterDeadLetter(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		admitN(t, c, 1, 5, 2) // users 1, 2; orders 1001, 1002
		read, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 10*time.Millisecond)
		if err != nil || len(read) != 2 {
			t.Fatalf("ReadOrders = %d, %v", len(read), err)
		}
		if _, err := c.DeadLetter(ctx, read[0], seckill.DeadLetter{Reason: "failed"}); err != nil {
			t.Fatal(err)
		}
		ack(t, c, 1, read[1].EntryID) // persisted
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		db := &database{orders: []*seckill.Order{{ID: 1002, UserID: 2}}} // the database's order
		if res := rebuild(t, c, onSale(1, 5), db); !res.Done || res.Remaining != 4 {
			t.Errorf("Rebuild = %+v; want done, 4 left (5 less the one order in the database)", res)
		}
		if diff := cmp.Diff(map[string]string{"2": "1002"}, hash(t, c, c.keys.voucher(1).Buyers)); diff != "" {
			t.Errorf("buyers (-want +got):\n%s", diff)
		}
		if err := c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 1003}); err != nil {
			t.Errorf("Admit of the buyer whose order failed: %v, want admitted", err)
		}
	})
}

// TestDeadLetterWhileUnloaded: a dead letter during a rebuild frees the
// buyer's slot but makes no stock (an INCR would make a stock without a
// window: a voucher half there, that no rebuild finishes).
func TestDeadLetterWhileUnloaded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		admitN(t, c, 1, 5, 2)
		read := readOrders(t, c, 1, "a", 10)
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// As a rebuild staging the stream does.
		do(t, c, "HSET", c.keys.voucher(1).Buyers, "1", "1001")
		m := seckill.OrderMessage{EntryID: read[0].EntryID, VoucherID: 1, Order: read[0].Order}
		if _, err := c.DeadLetter(ctx, m, seckill.DeadLetter{Reason: "failed"}); err != nil {
			t.Fatal(err)
		}
		if got := stock(t, c, 1); got != -1 {
			t.Errorf("stock %d after a dead letter while unloaded, want none", got)
		}
		if got := hash(t, c, c.keys.voucher(1).Buyers); len(got) != 0 {
			t.Errorf("buyers %v, want the slot freed", got)
		}
		if res := rebuild(t, c, onSale(1, 5), nil); !res.Done || res.Remaining != 4 {
			t.Errorf("Rebuild = %+v; want done, 4 left (the queued order 1002 alone counts)", res)
		}
	})
}

// TestTrimWhileUnloaded: a trim does nothing while the voucher is unloaded:
// a rebuild in flight counts the buyers of the stream's entries, and one
// persisted after the rebuild read the database would be counted nowhere.
func TestTrimWhileUnloaded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 5, 2)
		readOrders(t, c, 1, "a", 10)
		ack(t, c, 1, es[0].ID, es[1].ID)
		if err := c.Unload(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if n, err := c.TrimOrders(ctx, seckill.Shard{VoucherID: 1}); err != nil || n != 0 {
			t.Errorf("TrimOrders while unloaded = %d, %v; want 0, nil", n, err)
		}
		if n := xlen(t, c, c.keys.voucher(1).Orders); n != 2 {
			t.Errorf("stream length %d after a trim while unloaded, want 2", n)
		}
		// The rebuild, reading a database that missed both, still counts them.
		if res := rebuild(t, c, onSale(1, 5), nil); !res.Done || res.Remaining != 3 {
			t.Errorf("Rebuild = %+v; want done, 3 left", res)
		}
		if n, err := c.TrimOrders(ctx, seckill.Shard{VoucherID: 1}); err != nil || n != 2 {
			t.Errorf("TrimOrders once loaded = %d, %v; want 2, nil", n, err)
		}
	})
}

// TestRebuildRestoresLostGroup: the workers answer ErrStreamLost with a
// rebuild, which "also makes the group" (worker.readFailed). When the group
// is gone and the stock is not, the rebuild must still make it, or the
// readers loop on ErrStreamLost and the queued orders are never read.
func TestRebuildRestoresLostGroup(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		es := admitN(t, c, 1, 10, 2)
		do(t, c, "XGROUP", "DESTROY", c.keys.voucher(1).Orders, Group)
		if _, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 10*time.Millisecond); !errors.Is(err, seckill.ErrStreamLost) {
			t.Fatalf("ReadOrders with the group gone: got %v, want ErrStreamLost", err)
		}
		if res := rebuild(t, c, onSale(1, 10), nil); res.Done {
			t.Errorf("Rebuild with the stock there = %+v, want nothing done", res)
		}
		if got := stock(t, c, 1); got != 8 {
			t.Errorf("stock %d, want 8 (untouched)", got)
		}
		got, err := c.ReadOrders(ctx, seckill.Shard{VoucherID: 1}, "a", 10, 10*time.Millisecond)
		if err != nil {
			t.Fatalf("ReadOrders after the rebuild: %v", err)
		}
		if diff := cmp.Diff(wantMsgs(t, 1, es, 0), msgs(got)); diff != "" {
			t.Errorf("ReadOrders after the rebuild (-want +got):\n%s", diff)
		}
	})
}

// TestRebuildAcrossOlderRestart: a rebuild is staging a voucher's buyers
// when Redis comes back from an older snapshot, and the check unloads the
// voucher again. The epoch the rebuild holds must not come back: an epoch
// that counted up from the snapshot's was the very one the rebuild held,
// its later steps passed, and it set the stock from the buyers staged after
// the restart alone, selling again every unit of those staged before
// (found by review).
func TestRebuildAcrossOlderRestart(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(1, 20_000)
		v.Generation = 7
		mustLoad(t, c, v)
		// The snapshot Redis comes back with: the voucher's stock and meta
		// as they are now (it has no buyers yet). Written back, not a
		// restart, so that the rebuild's connections stay up and its next
		// step shows what it finds (a step whose call fails stops the
		// rebuild, which is safe, and tells nothing).
		k := c.keys.voucher(v.ID)
		oldStock, err := do(t, c, "GET", k.Stock).ToString()
		if err != nil {
			t.Fatal(err)
		}
		oldMeta := []string{"HSET", k.Meta}
		for f, val := range hash(t, c, k.Meta) {
			oldMeta = append(oldMeta, f, val)
		}
		if err := c.Unload(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		// The database holds 5,010 orders: two pages.
		var orders []*seckill.Order
		for i := range int64(rebuildPage + 10) {
			orders = append(orders, &seckill.Order{ID: 1000 + i, UserID: 1 + i, VoucherID: v.ID, Status: seckill.OrderCreated})
		}
		var restored bool
		pages := func(ctx context.Context, voucherID, afterID int64, limit int) ([]*seckill.Order, error) {
			i := sort.Search(len(orders), func(i int) bool { return orders[i].ID > afterID })
			if i > 0 && !restored {
				// The first page is staged: Redis comes back with the
				// snapshot, and the check unloads the voucher before the
				// rebuild's next step.
				restored = true
				do(t, c, "DEL", k.Meta, k.Buyers)
				do(t, c, oldMeta...)
				do(t, c, "SET", k.Stock, oldStock)
				if err := c.Unload(ctx, v.ID); err != nil {
					t.Fatal(err)
				}
			}
			return orders[i:min(i+limit, len(orders))], nil
		}
		if _, err := c.Rebuild(ctx, v, pages); err != nil {
			t.Fatal(err)
		}
		if got, want := stock(t, c, v.ID), v.InitialStock-int64(len(orders)); got != want {
			t.Errorf("stock after the rebuild %d, want %d: the buyers staged before the restart are sold again", got, want)
		}
		if n, _ := do(t, c, "HLEN", c.keys.voucher(v.ID).Buyers).AsInt64(); n != int64(len(orders)) {
			t.Errorf("%d buyers after the rebuild, want %d", n, len(orders))
		}
	})
}
