package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
)

// dlqRig is a DeadLetterService on a Redis and a store of the test's own
// (this machine's services, or the embedded backend; see
// internal/apptest), with a raw Redis client to look at the keys
// and the service's log.
type dlqRig struct {
	t        *testing.T
	store    seckill.Store
	cache    *redis.Client
	raw      rueidis.Client
	prefix   string
	vouchers *seckill.VoucherService
	svc      *redisledger.DeadLetterService
	logs     *syncBuffer
}

// syncBuffer is a log destination that tests read while services write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newDLQRig(t *testing.T) *dlqRig {
	t.Helper()
	ctx := context.Background()
	store := apptest.Store(t)
	b := &dlqRig{t: t, store: store, logs: &syncBuffer{}}
	logger := slog.New(slog.NewTextHandler(b.logs, nil))
	var url string
	b.cache, url, b.prefix = apptest.Redis(t, logger)
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	opt.ForceSingleClient = true
	if b.raw, err = rueidis.NewClient(opt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.raw.Close)
	b.vouchers = newVouchers(store, b.cache, logger, time.Now)
	if err := ledgerOf(b.vouchers).Restore(ctx); err != nil {
		t.Fatal(err)
	}
	b.svc = &redisledger.DeadLetterService{Cache: b.cache, Store: store, Vouchers: b.vouchers, Logger: logger,
		Admitter:  admitter(b.vouchers, b.cache),
		OrderTime: func(int64) time.Time { return time.Unix(1, 0) }}
	return b
}

// voucher creates a voucher on sale with stock.
func (b *dlqRig) voucher(stock int64) *seckill.Voucher {
	b.t.Helper()
	v, err := b.vouchers.Create(context.Background(), onSale("dlq", stock))
	if err != nil {
		b.t.Fatal(err)
	}
	return v.Voucher
}

// key is one of the voucher's Redis keys, e.g. "stock".
func (b *dlqRig) key(v int64, name string) string {
	return fmt.Sprintf("%s:{v%d}:%s", b.prefix, v, name)
}

func (b *dlqRig) admit(v, user, order int64) {
	b.t.Helper()
	row, err := b.store.Voucher(context.Background(), v)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.cache.Admit(context.Background(), seckill.Admission{VoucherID: v, Generation: row.Generation, UserID: user, OrderID: order}); err != nil {
		b.t.Fatalf("admit user %d with order %d: %v", user, order, err)
	}
}

// deadLetter admits the user with the order and dead-letters its message
// as the workers do: the order recorded failed, then the message moved
// with its stock and buyer slot given back.
func (b *dlqRig) deadLetter(v, user, order int64, reason string) {
	b.t.Helper()
	b.admit(v, user, order)
	b.fail(v, user, order, reason)
	b.kill(v, order, seckill.DeadLetter{Reason: reason})
}

func (b *dlqRig) fail(v, user, order int64, reason string) {
	b.t.Helper()
	if err := b.store.FailOrder(context.Background(), &seckill.Order{ID: order, UserID: user, VoucherID: v, Status: seckill.OrderFailed, Reason: reason}); err != nil {
		b.t.Fatal(err)
	}
}

// kill reads the voucher's new messages and dead-letters the order's; the
// others stay pending.
func (b *dlqRig) kill(v, order int64, dl seckill.DeadLetter) {
	b.t.Helper()
	ctx := context.Background()
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: v}, "test", 100, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Order.ID == order {
			if moved, err := b.cache.DeadLetter(ctx, m, dl); err != nil || !moved {
				b.t.Fatalf("dead-letter order %d: %v, %v", order, moved, err)
			}
			return
		}
	}
	b.t.Fatalf("no new message of order %d in %+v", order, msgs)
}

// queued returns how many messages of the order the voucher's stream holds.
func (b *dlqRig) queued(v, order int64) int {
	b.t.Helper()
	es, err := b.raw.Do(context.Background(), b.raw.B().Xrange().Key(b.key(v, "orders")).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.FieldValues["id"] == strconv.FormatInt(order, 10) {
			n++
		}
	}
	return n
}

func (b *dlqRig) stock(v int64) int64 {
	b.t.Helper()
	n, err := b.raw.Do(context.Background(), b.raw.B().Get().Key(b.key(v, "stock")).Build()).AsInt64()
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// slot returns the buyer's order in Redis, or 0.
func (b *dlqRig) slot(v, user int64) int64 {
	b.t.Helper()
	found, err := b.cache.BuyerOrders(context.Background(), user, v)
	if err != nil {
		b.t.Fatal(err)
	}
	return found[v]
}

// list returns the dead letters by id.
func (b *dlqRig) list() map[string]seckill.DeadLetterEntry {
	b.t.Helper()
	entries, err := b.svc.DeadLetters(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	out := make(map[string]seckill.DeadLetterEntry, len(entries))
	for _, e := range entries {
		out[e.ID] = e
	}
	return out
}

func (b *dlqRig) status(order int64) seckill.OrderStatus {
	b.t.Helper()
	o, err := b.store.Order(context.Background(), order)
	if err != nil {
		b.t.Fatalf("order %d: %v", order, err)
	}
	return o.Status
}

// logged reports whether a log line holds every one of parts.
func (b *dlqRig) logged(parts ...string) bool {
	for _, line := range strings.Split(b.logs.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// nextMilli returns once the clock has moved to the next millisecond.
func nextMilli() {
	for now := time.Now().UnixMilli(); time.Now().UnixMilli() == now; {
		runtime.Gosched()
	}
}

func TestDeadLetterList(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	a, c := b.voucher(10), b.voucher(10)
	before := time.Now().Add(-time.Second)
	// Dead letters are listed by their millisecond: one each.
	b.deadLetter(a.ID, 1, 101, "first")
	nextMilli()
	b.deadLetter(c.ID, 2, 202, "second")
	nextMilli()
	b.deadLetter(a.ID, 3, 103, "third")
	nextMilli()
	// A malformed message: no order id, no buyer.
	if err := b.raw.Do(ctx, b.raw.B().Xadd().Key(b.key(c.ID, "orders")).Id("*").FieldValue().FieldValue("junk", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.cache.ReadOrders(ctx, seckill.Shard{VoucherID: c.ID}, "test", 10, 0)
	if err != nil || len(msgs) != 1 || msgs[0].Err == nil {
		t.Fatalf("read the malformed message: %+v, %v", msgs, err)
	}
	if _, err := b.cache.DeadLetter(ctx, msgs[0], seckill.DeadLetter{Reason: "malformed"}); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second)
	// A voucher whose sale ended two days ago is not looked at.
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := &seckill.Voucher{Title: "old", Stock: 1, InitialStock: 1, BeginTime: now.Add(-72 * time.Hour), EndTime: now.Add(-48 * time.Hour)}
	if err := b.store.CreateVoucher(ctx, old); err != nil {
		t.Fatal(err)
	}
	oldEntry, err := b.raw.Do(ctx, b.raw.B().Xadd().Key(b.key(old.ID, "dlq")).Id("*").FieldValue().
		FieldValue("id", "909").FieldValue("user", "9").FieldValue("reason", "old").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}

	entries, err := b.svc.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("%d dead letters, want 4: %+v", len(entries), entries)
	}
	malformed := entries[3]
	if !strings.HasPrefix(malformed.ID, fmt.Sprintf("%d:", c.ID)) || malformed.OrderID != 0 || malformed.UserID != 0 || malformed.Reason != "malformed" || malformed.StockReturned {
		t.Errorf("the malformed dead letter = %+v; want id <voucher>:<entry>, no order, no user, stock not returned", malformed)
	}
	want := []seckill.DeadLetterEntry{
		{ID: "101", DeadLetterRecord: seckill.DeadLetterRecord{VoucherID: a.ID, OrderID: 101, UserID: 1, Reason: "first", StockReturned: true}},
		{ID: "202", DeadLetterRecord: seckill.DeadLetterRecord{VoucherID: c.ID, OrderID: 202, UserID: 2, Reason: "second", StockReturned: true}},
		{ID: "103", DeadLetterRecord: seckill.DeadLetterRecord{VoucherID: a.ID, OrderID: 103, UserID: 3, Reason: "third", StockReturned: true}},
		{ID: malformed.ID, DeadLetterRecord: seckill.DeadLetterRecord{VoucherID: c.ID, Reason: "malformed"}},
	}
	for i, e := range entries {
		if e.At.Before(before) || e.At.After(after) {
			t.Errorf("dead letter %s at %v, want between %v and %v", e.ID, e.At, before, after)
		}
		if i > 0 && e.At.Before(entries[i-1].At) {
			t.Errorf("dead letter %s (at %v) listed after %s (at %v): want oldest first", e.ID, e.At, entries[i-1].ID, entries[i-1].At)
		}
		if e.EntryID == "" {
			t.Errorf("dead letter %s has no stream entry id", e.ID)
		}
		e.At, e.EntryID = time.Time{}, ""
		if e != want[i] {
			t.Errorf("dead letter %d = %+v, want %+v", i, e, want[i])
		}
	}

	// Ids name dead letters for retry and discard, whichever form.
	if _, err := b.svc.RetryDeadLetter(ctx, malformed.ID, 7); !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot be admitted") {
		t.Errorf("retry of the malformed dead letter = %v, want ErrInvalidArgument saying it cannot be admitted", err)
	}
	if err := b.svc.DiscardDeadLetter(ctx, malformed.ID, 7); err != nil {
		t.Errorf("discard of the malformed dead letter = %v", err)
	}
	if _, ok := b.list()[malformed.ID]; ok {
		t.Error("the malformed dead letter is listed after its discard")
	}
	if !b.logged("admin=7", "dead_letter="+malformed.ID, "outcome=malformed") || !b.logged("admin=7", "dead_letter="+malformed.ID, "outcome=discarded") {
		t.Errorf("the admin's retry and discard are not both logged with the admin, the dead letter and the outcome:\n%s", b.logs)
	}
	// The old voucher's dead letter: not listed, but reachable by entry.
	if err := b.svc.DiscardDeadLetter(ctx, "909", 7); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
		t.Errorf("discard of an old voucher's dead letter by order id = %v, want ErrDeadLetterNotFound", err)
	}
	if err := b.svc.DiscardDeadLetter(ctx, fmt.Sprintf("%d:%s", old.ID, oldEntry), 7); err != nil {
		t.Errorf("discard of an old voucher's dead letter by entry = %v", err)
	}
	if st := b.status(909); st != seckill.OrderFailed {
		t.Errorf("the discarded dead letter's order, unknown to the database, is %s; want failed", st)
	}
}

func TestDeadLetterIDs(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(10)
	b.deadLetter(v.ID, 1, 101, "r")
	for _, id := range []string{"", "0", "-1", "01", "+1", "abc", "1.5", "99999999999999999999", ":", "1:", "0:1-1", "01:1-1",
		"1:1", "1:1-", "1:-1", "1:1-1-1", "1:01-1", "1:a-1", "1:1-1:2", " 101", "101 ",
		"1.0:1-1", "1.01:1-1", "1.64:1-1", "1.:1-1", "1.a:1-1", "1.2.3:1-1", ".1:1-1", "1.-1:1-1", "1.2"} {
		if _, err := b.svc.RetryDeadLetter(ctx, id, 1); !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Errorf("RetryDeadLetter(%q) = %v, want ErrInvalidArgument", id, err)
		}
		if err := b.svc.DiscardDeadLetter(ctx, id, 1); !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Errorf("DiscardDeadLetter(%q) = %v, want ErrInvalidArgument", id, err)
		}
	}
	for _, id := range []string{"999", "102", fmt.Sprintf("%d:1-1", v.ID), fmt.Sprintf("%d:1-1", v.ID+50)} {
		if _, err := b.svc.RetryDeadLetter(ctx, id, 1); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
			t.Errorf("RetryDeadLetter(%q) = %v, want ErrDeadLetterNotFound", id, err)
		}
		if err := b.svc.DiscardDeadLetter(ctx, id, 1); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
			t.Errorf("DiscardDeadLetter(%q) = %v, want ErrDeadLetterNotFound", id, err)
		}
	}
	if _, ok := b.list()["101"]; !ok {
		t.Error("the dead letter is gone after retries and discards of other ids")
	}
}

func TestRetryDeadLetter(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(2)
	b.deadLetter(v.ID, 1, 101, "database refused it")
	if got := b.stock(v.ID); got != 2 {
		t.Fatalf("stock %d after the dead letter, want 2", got)
	}

	o, err := b.svc.RetryDeadLetter(ctx, "101", 9)
	if err != nil {
		t.Fatal(err)
	}
	want := seckill.Order{ID: 101, UserID: 1, VoucherID: v.ID, Status: seckill.OrderPending, CreatedAt: time.Unix(1, 0)}
	if *o != want {
		t.Errorf("RetryDeadLetter = %+v, want %+v", *o, want)
	}
	if n := b.queued(v.ID, 101); n != 1 {
		t.Errorf("the stream holds %d messages of order 101, want 1", n)
	}
	if got := b.stock(v.ID); got != 1 {
		t.Errorf("stock %d after the retry, want 1", got)
	}
	if got := b.slot(v.ID, 1); got != 101 {
		t.Errorf("buyer 1 holds order %d, want 101", got)
	}
	if len(b.list()) != 0 {
		t.Errorf("dead letters after the retry: %v, want none", b.list())
	}
	if !b.logged("admin=9", "dead_letter=101", "outcome=admitted") {
		t.Errorf("the retry is not logged with the admin, the dead letter and the outcome:\n%s", b.logs)
	}
	if _, err := b.svc.RetryDeadLetter(ctx, "101", 9); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
		t.Errorf("a second retry = %v, want ErrDeadLetterNotFound", err)
	}

	// A retry that admitted the order and could not remove the dead letter
	// is made again: the order counts as admitted, and is not queued twice.
	b.deadLetter(v.ID, 2, 102, "r")
	b.admit(v.ID, 2, 102)
	if _, err := b.svc.RetryDeadLetter(ctx, "102", 9); err != nil {
		t.Fatalf("retry of a dead letter whose order was admitted again = %v", err)
	}
	if n := b.queued(v.ID, 102); n != 1 {
		t.Errorf("the stream holds %d new messages of order 102, want 1", n)
	}
	if len(b.list()) != 0 {
		t.Errorf("dead letters: %v, want none", b.list())
	}
	if !b.logged("dead_letter=102", "outcome=already_admitted") {
		t.Errorf("the retry of an admitted order is not logged as such:\n%s", b.logs)
	}
}

// TestRetryDeadLetterRefused: each refusal of the admission comes back as
// it is, and leaves the dead letter, the failed order and Redis as they
// were.
func TestRetryDeadLetterRefused(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(2)
	b.deadLetter(v.ID, 1, 101, "r")
	b.deadLetter(v.ID, 3, 103, "r")
	b.admit(v.ID, 2, 102)
	b.admit(v.ID, 3, 104) // buyer 3 bought again; the last unit
	window := func(begin, end time.Time) {
		t.Helper()
		if err := b.raw.Do(ctx, b.raw.B().Hset().Key(b.key(v.ID, "meta")).FieldValue().
			FieldValue("begin", fmt.Sprint(begin.UnixMilli())).FieldValue("end", fmt.Sprint(end.UnixMilli())).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for _, tc := range []struct {
		name, id string
		setup    func()
		kind     error
		orderID  int64 // of the buyer's other order, for ErrDuplicateOrder
	}{
		{"sold out", "101", func() {}, seckill.ErrSoldOut, 0},
		{"duplicate", "103", func() {}, seckill.ErrDuplicateOrder, 104},
		{"ended", "101", func() { window(now.Add(-time.Hour), now.Add(-time.Minute)) }, seckill.ErrEnded, 0},
		{"not started", "101", func() { window(now.Add(time.Minute), now.Add(time.Hour)) }, seckill.ErrNotStarted, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			stock := b.stock(v.ID)
			_, err := b.svc.RetryDeadLetter(ctx, tc.id, 5)
			var de *seckill.Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &de) || de.OrderID != tc.orderID || !strings.Contains(err.Error(), "stays failed") {
				t.Fatalf("RetryDeadLetter(%s) = %v, want %v (order %d) saying the order stays failed", tc.id, err, tc.kind, tc.orderID)
			}
			if _, ok := b.list()[tc.id]; !ok {
				t.Error("the dead letter is gone after a refused retry")
			}
			order, _ := strconv.ParseInt(tc.id, 10, 64)
			if st := b.status(order); st != seckill.OrderFailed {
				t.Errorf("order %s is %s after a refused retry, want failed", tc.id, st)
			}
			if n := b.queued(v.ID, order); n != 0 {
				t.Errorf("the stream holds %d messages of order %s after a refused retry", n, tc.id)
			}
			if got := b.stock(v.ID); got != stock {
				t.Errorf("stock %d after a refused retry, want %d", got, stock)
			}
			if !b.logged("admin=5", "dead_letter="+tc.id, "outcome=refused") {
				t.Errorf("the refusal is not logged:\n%s", b.logs)
			}
		})
	}
	if got := b.slot(v.ID, 1); got != 0 {
		t.Errorf("buyer 1 holds order %d after refused retries, want none", got)
	}

	// The queue and sync modes have no workers on the stream: refused.
	// They are wired with no Admitter (app.NewOps).
	queue := *b.svc
	queue.Mode, queue.Admitter = seckill.ModeQueue, nil
	window(now.Add(-time.Hour), now.Add(time.Hour))
	if err := b.raw.Do(ctx, b.raw.B().Incr().Key(b.key(v.ID, "stock")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.RetryDeadLetter(ctx, "101", 5); !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), "stream mode") {
		t.Errorf("RetryDeadLetter in the queue mode = %v, want ErrInvalidArgument naming the stream mode", err)
	}
	if n := b.queued(v.ID, 101); n != 0 {
		t.Errorf("the queue mode's refused retry queued order 101 %d times", n)
	}
}

func TestDiscardDeadLetter(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(5)
	b.deadLetter(v.ID, 1, 101, "r")
	b.deadLetter(v.ID, 2, 102, "r")
	stock := b.stock(v.ID)
	if err := b.svc.DiscardDeadLetter(ctx, "101", 4); err != nil {
		t.Fatal(err)
	}
	got := b.list()
	if _, ok := got["101"]; ok || len(got) != 1 {
		t.Errorf("dead letters after discarding 101: %v, want 102 only", got)
	}
	if st := b.status(101); st != seckill.OrderFailed {
		t.Errorf("order 101 is %s after its discard, want failed", st)
	}
	if s := b.stock(v.ID); s != stock || b.queued(v.ID, 101) != 0 || b.slot(v.ID, 1) != 0 {
		t.Errorf("the discard changed the sale: stock %d (was %d), queued %d, slot %d", s, stock, b.queued(v.ID, 101), b.slot(v.ID, 1))
	}
	if !b.logged("admin=4", "dead_letter=101", "outcome=discarded") {
		t.Errorf("the discard is not logged:\n%s", b.logs)
	}
	if err := b.svc.DiscardDeadLetter(ctx, "101", 4); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
		t.Errorf("a second discard = %v, want ErrDeadLetterNotFound", err)
	}
}

// TestRetryDeadLetterRedisLost: a retry to a voucher Redis lost rebuilds
// it from the database first, as a buy does.
func TestRetryDeadLetterRedisLost(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(3)
	b.deadLetter(v.ID, 1, 101, "r")
	if err := b.cache.Unload(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.RetryDeadLetter(ctx, "101", 1); err != nil {
		t.Fatalf("RetryDeadLetter after Redis lost the voucher = %v", err)
	}
	if got, slot := b.stock(v.ID), b.slot(v.ID, 1); got != 2 || slot != 101 {
		t.Errorf("after the rebuild and retry: stock %d, buyer 1 holds %d; want 2 and 101", got, slot)
	}
}

// lostAdmit is the real cache, except that the answer of Admit is lost: it
// ran ("reply") or never did ("request").
type lostAdmit struct {
	*redis.Client
	ran bool
}

func (l *lostAdmit) Admit(ctx context.Context, a seckill.Admission) error {
	if l.ran {
		if err := l.Client.Admit(ctx, a); err != nil {
			return err
		}
	}
	return fmt.Errorf("redis: admit: %w: EOF", seckill.ErrUnavailable)
}

// TestRetryDeadLetterUnknownOutcome: a retry whose admission was not heard
// is settled by the buyer's slot: admitted, or unknown (503), never a guess.
func TestRetryDeadLetterUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(3)
	b.deadLetter(v.ID, 1, 101, "r")
	lost := *b.svc
	lost.Cache = &lostAdmit{Client: b.cache}
	lost.Admitter = admitter(b.vouchers, lost.Cache.(*lostAdmit))
	if _, err := lost.RetryDeadLetter(ctx, "101", 1); !errors.Is(err, seckill.ErrUnavailable) {
		t.Fatalf("retry whose admission never ran = %v, want ErrUnavailable", err)
	}
	if _, ok := b.list()["101"]; !ok || b.queued(v.ID, 101) != 0 {
		t.Fatal("a retry whose admission never ran changed the dead letter or the stream")
	}
	lost.Cache = &lostAdmit{Client: b.cache, ran: true}
	lost.Admitter = admitter(b.vouchers, lost.Cache.(*lostAdmit))
	if _, err := lost.RetryDeadLetter(ctx, "101", 1); err != nil {
		t.Fatalf("retry whose admission's answer was lost = %v, want success", err)
	}
	if _, ok := b.list()["101"]; ok || b.queued(v.ID, 101) != 1 {
		t.Error("a retry whose answer was lost did not end admitted, with its dead letter removed")
	}
}

// TestDeadLetterSameOrderTwice: an order dead-lettered twice (a retry's
// removal failed, then it failed again) is named by entry, each.
func TestDeadLetterSameOrderTwice(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	v := b.voucher(3)
	b.deadLetter(v.ID, 1, 101, "first")
	b.admit(v.ID, 1, 101)
	b.kill(v.ID, 101, seckill.DeadLetter{Reason: "second"})
	entries, err := b.svc.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].ID == entries[1].ID || entries[0].Reason != "first" {
		t.Fatalf("dead letters = %+v; want two, distinct ids, oldest first", entries)
	}
	for _, e := range entries {
		if want := fmt.Sprintf("%d:", v.ID); !strings.HasPrefix(e.ID, want) || e.OrderID != 101 {
			t.Errorf("dead letter %+v: want an id %s<entry>, order 101", e, want)
		}
	}
	if _, err := b.svc.RetryDeadLetter(ctx, "101", 1); !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), entries[0].ID) {
		t.Errorf("retry by the shared order id = %v, want ErrInvalidArgument naming the dead letters", err)
	}
	if err := b.svc.DiscardDeadLetter(ctx, entries[0].ID, 1); err != nil {
		t.Fatal(err)
	}
	if got := b.list(); len(got) != 1 || got["101"].Reason != "second" {
		t.Errorf("after discarding the first: %v; want the second, named 101", got)
	}
}

// TestShardDeadLetterNames: the dead letters of a voucher with shards are
// listed from every shard, each named by its shard too when it has no
// order id to be named by (an entry id names an entry only within its
// shard's stream), and a discard removes the one named, from its shard.
func TestShardDeadLetterNames(t *testing.T) {
	t.Parallel()
	b := newDLQRig(t)
	ctx := context.Background()
	row := onSale("dlq", 30)
	row.Shards = 3
	v, err := b.vouchers.Create(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	sharded := *v.Voucher
	sharded.Shards = 3 // the store may not keep it yet
	b.cache.Learn(&sharded)
	dlq := func(i int) string { return b.prefix + ":{" + sharded.ShardTag(i) + "}:dlq" }
	add := func(i int, entry string, fields ...string) {
		t.Helper()
		cmd := b.raw.B().Xadd().Key(dlq(i)).Id(entry).FieldValue().FieldValue("voucher", strconv.FormatInt(v.ID, 10)).FieldValue("reason", "r")
		for j := 0; j+1 < len(fields); j += 2 {
			cmd = cmd.FieldValue(fields[j], fields[j+1])
		}
		if err := b.raw.Do(ctx, cmd.Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// The same entry id on shards 0 and 2, neither with an order id; and
	// an order's on shard 2.
	add(0, "5-1")
	add(2, "5-1")
	add(2, "6-1", "id", "7002", "user", "2", "stock_returned", "1")
	shard0, shard2 := fmt.Sprintf("%d:5-1", v.ID), fmt.Sprintf("%d.2:5-1", v.ID)
	got := b.list()
	if len(got) != 3 || got[shard0].Shard != 0 || got[shard2].Shard != 2 || got["7002"].Shard != 2 || got["7002"].EntryID != "6-1" {
		t.Fatalf("dead letters %+v; want %s on shard 0, %s and 7002 on shard 2", got, shard0, shard2)
	}
	for _, id := range []string{fmt.Sprintf("%d.1:5-1", v.ID), fmt.Sprintf("%d.3:5-1", v.ID)} {
		if err := b.svc.DiscardDeadLetter(ctx, id, 1); !errors.Is(err, seckill.ErrDeadLetterNotFound) {
			t.Errorf("DiscardDeadLetter(%s) = %v, want ErrDeadLetterNotFound", id, err)
		}
	}
	if err := b.svc.DiscardDeadLetter(ctx, shard2, 1); err != nil {
		t.Fatalf("DiscardDeadLetter(%s): %v", shard2, err)
	}
	for i, want := range []int64{1, 0, 1} {
		if n, err := b.raw.Do(ctx, b.raw.B().Xlen().Key(dlq(i)).Build()).AsInt64(); err != nil || n != want {
			t.Errorf("shard %d's dead letters after the discard of %s: %d, %v; want %d", i, shard2, n, err, want)
		}
	}
	if got := b.list(); len(got) != 2 || got[shard0].Shard != 0 || got["7002"].Shard != 2 {
		t.Errorf("dead letters after the discard %+v; want %s and 7002", got, shard0)
	}
}
