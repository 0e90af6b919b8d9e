package redis

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// onSale returns a voucher whose sale began a minute ago and ends in an hour.
func onSale(id, stock int64) *seckill.Voucher {
	now := time.Now()
	return &seckill.Voucher{ID: id, Stock: stock, InitialStock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
}

// mustLoad loads v, a voucher new to Redis.
func mustLoad(t *testing.T, c *Client, v *seckill.Voucher) {
	t.Helper()
	replaced, err := c.LoadVoucher(context.Background(), v)
	if err != nil || replaced {
		t.Fatalf("LoadVoucher(%d) = %v, %v; want false (nothing stale), nil", v.ID, replaced, err)
	}
}

// mustAdmit admits user with order and fails the test otherwise.
func mustAdmit(t *testing.T, c *Client, voucherID, userID, orderID int64) {
	t.Helper()
	if err := c.Admit(context.Background(), seckill.Admission{VoucherID: voucherID, UserID: userID, OrderID: orderID}); err != nil {
		t.Fatalf("Admit(voucher %d, user %d, order %d): %v", voucherID, userID, orderID, err)
	}
}

// do runs a raw command and fails the test on an error other than nil.
func do(t testing.TB, c *Client, cmd ...string) rueidis.RedisResult {
	t.Helper()
	b := c.rdb.B().Arbitrary(cmd...)
	if len(cmd) > 1 && keyFirst[cmd[0]] {
		// Sent to the key's master: a keyless command goes to any node,
		// and one that does not answer (paused) would hang the test.
		b = c.rdb.B().Arbitrary(cmd[0]).Keys(cmd[1]).Args(cmd[2:]...)
	}
	res := c.rdb.Do(context.Background(), b.Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", cmd, err)
	}
	return res
}

// passHold waits until the voucher's stock is no longer held (meta 'held',
// set by a rebuild or by units given back to a sold-out voucher), by
// Redis's clock, as the admission script reads it.
func passHold(t testing.TB, c *Client, voucherID int64) {
	t.Helper()
	for {
		held, err := do(t, c, "HGET", c.keys.voucher(voucherID).Meta, "held").AsInt64()
		if rueidis.IsRedisNil(err) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		tm, err := do(t, c, "TIME").AsStrSlice()
		if err != nil || len(tm) != 2 {
			t.Fatalf("TIME: %v %v", tm, err)
		}
		sec, _ := strconv.ParseInt(tm[0], 10, 64)
		usec, _ := strconv.ParseInt(tm[1], 10, 64)
		now := sec*1000 + usec/1000
		if now >= held {
			return
		}
		if held-now > Hold.Milliseconds() {
			t.Fatalf("held %d ms more, longer than Hold", held-now)
		}
		time.Sleep(time.Duration(held-now) * time.Millisecond)
	}
}

// stock returns the voucher's stock key's value, or -1 if it is absent.
func stock(t *testing.T, c *Client, voucherID int64) int64 {
	t.Helper()
	n, err := do(t, c, "GET", c.keys.voucher(voucherID).Stock).AsInt64()
	if rueidis.IsRedisNil(err) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keyFirst are the commands do sends as keyed by their first argument.
var keyFirst = map[string]bool{
	"GET": true, "SET": true, "DEL": true, "EXISTS": true, "DECRBY": true, "PTTL": true,
	"HGET": true, "HSET": true, "LRANGE": true, "HDEL": true, "HLEN": true, "HGETALL": true, "HEXISTS": true,
	"XADD": true, "XLEN": true, "XDEL": true, "XRANGE": true, "XPENDING": true, "XCLAIM": true,
	"SMEMBERS": true,
}

// hash returns a hash's fields; empty when it is absent.
func hash(t *testing.T, c *Client, key string) map[string]string {
	t.Helper()
	m, err := do(t, c, "HGETALL", key).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// entries returns a stream's entries, oldest first.
func entries(t *testing.T, c *Client, key string) []rueidis.XRangeEntry {
	t.Helper()
	e, err := do(t, c, "XRANGE", key, "-", "+").AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// xlen returns a stream's length.
func xlen(t *testing.T, c *Client, key string) int64 {
	t.Helper()
	n, err := do(t, c, "XLEN", key).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pel is one entry of a group's pending entries list.
type pel struct {
	Consumer   string
	Deliveries int64
}

// pending returns the pending entries of the voucher's group by entry id.
func pending(t *testing.T, c *Client, voucherID int64) map[string]pel {
	t.Helper()
	rows, err := do(t, c, "XPENDING", c.keys.voucher(voucherID).Orders, Group, "-", "+", "1000").ToArray()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]pel{}
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) != 4 {
			t.Fatalf("XPENDING row %v: %v", r, err)
		}
		id, _ := f[0].ToString()
		consumer, _ := f[1].ToString()
		n, _ := f[3].AsInt64()
		got[id] = pel{consumer, n}
	}
	return got
}

// consumers returns the names of the voucher's group's consumers, sorted,
// with their idle times.
func consumers(t *testing.T, c *Client, voucherID int64) ([]string, map[string]time.Duration) {
	t.Helper()
	rows, err := do(t, c, "XINFO", "CONSUMERS", c.keys.voucher(voucherID).Orders, Group).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	idle := map[string]time.Duration{}
	for _, r := range rows {
		m, err := r.AsMap()
		if err != nil {
			t.Fatal(err)
		}
		nameMsg, idleMsg := m["name"], m["idle"]
		name, _ := nameMsg.ToString()
		ms, _ := idleMsg.AsInt64()
		names = append(names, name)
		idle[name] = time.Duration(ms) * time.Millisecond
	}
	sort.Strings(names)
	return names, idle
}

// msg is an OrderMessage that cmp can compare: its error as text.
type msg struct {
	EntryID    string
	VoucherID  int64
	Order      seckill.Order
	Deliveries int64
	Err        string
}

func msgs(ms []seckill.OrderMessage) []msg {
	var out []msg
	for _, m := range ms {
		v := msg{EntryID: m.EntryID, VoucherID: m.VoucherID, Order: m.Order, Deliveries: m.Deliveries}
		if m.Err != nil {
			v.Err = m.Err.Error()
		}
		out = append(out, v)
	}
	return out
}

// wantMsgs returns the messages the stream entries are, as admit.lua
// writes them, each delivered the given number of times.
func wantMsgs(t *testing.T, voucherID int64, es []rueidis.XRangeEntry, deliveries int64) []msg {
	t.Helper()
	var out []msg
	for _, e := range es {
		num := func(f string) int64 {
			n, err := strconv.ParseInt(e.FieldValues[f], 10, 64)
			if err != nil {
				t.Fatalf("entry %s field %s: %v", e.ID, f, err)
			}
			return n
		}
		out = append(out, msg{EntryID: e.ID, VoucherID: voucherID, Deliveries: deliveries, Order: seckill.Order{
			ID: num("id"), UserID: num("user"), VoucherID: voucherID, Status: seckill.OrderPending,
			CreatedAt: time.UnixMilli(num("at")).UTC(),
		}})
	}
	return out
}

// errKind returns the *seckill.Error in err, or fails the test.
func errKind(t *testing.T, err error, kind error) *seckill.Error {
	t.Helper()
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, kind) {
		t.Fatalf("got error %v, want a *seckill.Error of kind %v", err, kind)
	}
	return e
}
