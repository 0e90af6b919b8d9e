package main

// The books of the end-to-end tests: the database and Redis read directly,
// and the checks after a sale that nothing was oversold, doubled or lost
// (G1–G6) whatever the API said.

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
)

// database is a direct look into the database of a test, with
// database/sql, to check what the API says.
type database struct {
	db *sql.DB
	pg bool
}

// openDatabase opens the mysql:// or postgres:// URL that serve is given.
func openDatabase(t *testing.T, raw string) *database {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	d := &database{pg: u.Scheme != "mysql"}
	if d.pg {
		d.db, err = sql.Open("pgx", raw)
	} else {
		cfg := mysqldriver.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		d.db, err = sql.Open("mysql", cfg.FormatDSN())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.db.Close() })
	return d
}

// query runs a query written with ? placeholders.
func (d *database) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if d.pg {
		var b strings.Builder
		n := 0
		for _, r := range q {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		q = b.String()
	}
	return d.db.QueryContext(ctx, q, args...)
}

// pairs returns the two columns of a query's rows.
func (d *database) pairs(ctx context.Context, q string, args ...any) (map[int64]int64, error) {
	rows, err := d.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			return nil, err
		}
		out[a] = b
	}
	return out, rows.Err()
}

// orders returns the voucher's created and failed orders: order id → buyer.
func (d *database) orders(ctx context.Context, voucher int64) (created, failed map[int64]int64, err error) {
	if created, err = d.pairs(ctx, "SELECT id, user_id FROM orders WHERE voucher_id = ?", voucher); err != nil {
		return nil, nil, err
	}
	if failed, err = d.pairs(ctx, "SELECT id, user_id FROM failed_orders WHERE voucher_id = ?", voucher); err != nil {
		return nil, nil, err
	}
	return created, failed, nil
}

// doubleBuyers returns the buyers with more than one order of the voucher,
// and how many they have.
func (d *database) doubleBuyers(ctx context.Context, voucher int64) (map[int64]int64, error) {
	return d.pairs(ctx, "SELECT user_id, COUNT(*) FROM orders WHERE voucher_id = ? GROUP BY user_id HAVING COUNT(*) > 1", voucher)
}

// stock returns the voucher's stock and initial stock in the database.
func (d *database) stock(ctx context.Context, voucher int64) (stock, initial int64, err error) {
	rows, err := d.query(ctx, "SELECT stock, initial_stock FROM vouchers WHERE id = ?", voucher)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	if !rows.Next() {
		return 0, 0, fmt.Errorf("voucher %d not in the database: %v", voucher, rows.Err())
	}
	err = rows.Scan(&stock, &initial)
	return stock, initial, err
}

// redisView is a direct look into a voucher's keys in Redis.
type redisView struct {
	c      rueidis.Client
	prefix string
}

func openRedisView(t *testing.T, raw, prefix string) *redisView {
	t.Helper()
	return &redisView{c: testenv.RawRedis(t, raw), prefix: prefix}
}

// key is the voucher's key of the name, as package redis builds it.
func (r *redisView) key(voucher int64, name string) string {
	return testenv.VoucherKey(r.prefix, voucher, name)
}

// streamState is what a voucher's order stream holds.
type streamState struct {
	entries     map[string]int64 // entry id → order id
	pending     int64            // delivered, not acknowledged
	undelivered int64            // not read by the group yet
	consumers   map[string]int64 // consumer → its pending count
	noGroup     bool             // the stream or its group is gone
}

func (r *redisView) stream(ctx context.Context, voucher int64) (*streamState, error) {
	k := r.key(voucher, "orders")
	st := &streamState{entries: map[string]int64{}, consumers: map[string]int64{}}
	xr, err := r.c.Do(ctx, r.c.B().Xrange().Key(k).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", k, err)
	}
	for _, e := range xr {
		st.entries[e.ID], _ = strconv.ParseInt(e.FieldValues["id"], 10, 64)
	}
	groups, err := r.c.Do(ctx, r.c.B().XinfoGroups().Key(k).Build()).ToArray()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			st.noGroup = true
			return st, nil
		}
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", k, err)
	}
	last := ""
	for _, g := range groups {
		m, err := g.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg, lastMsg := m["name"], m["last-delivered-id"]
		if name, _ := nameMsg.ToString(); name == redis.Group {
			last, _ = lastMsg.ToString()
		}
	}
	if last == "" {
		st.noGroup = true
		return st, nil
	}
	for id := range st.entries {
		if compareEntryIDs(id, last) > 0 {
			st.undelivered++
		}
	}
	summary, err := r.c.Do(ctx, r.c.B().Xpending().Key(k).Group(redis.Group).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", k, err)
	}
	st.pending, _ = summary[0].AsInt64()
	if len(summary) > 3 {
		cs, _ := summary[3].ToArray()
		for _, c := range cs {
			pair, _ := c.ToArray()
			if len(pair) == 2 {
				name, _ := pair[0].ToString()
				n, _ := pair[1].AsInt64()
				if n == 0 {
					s, _ := pair[1].ToString()
					n, _ = strconv.ParseInt(s, 10, 64)
				}
				st.consumers[name] = n
			}
		}
	}
	return st, nil
}

// consumerNames returns the names of the consumers in the voucher's group.
func (r *redisView) consumerNames(ctx context.Context, voucher int64) ([]string, error) {
	cs, err := r.c.Do(ctx, r.c.B().XinfoConsumers().Key(r.key(voucher, "orders")).Group(redis.Group).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range cs {
		m, err := c.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg := m["name"]
		name, _ := nameMsg.ToString()
		names = append(names, name)
	}
	return names, nil
}

// pendingOf returns the order ids of the entries the consumer holds
// unacknowledged.
func (r *redisView) pendingOf(ctx context.Context, voucher int64, consumer string) ([]int64, error) {
	k := r.key(voucher, "orders")
	res, err := r.c.Do(ctx, r.c.B().Xpending().Key(k).Group(redis.Group).Start("-").End("+").Count(100000).Consumer(consumer).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	st, err := r.stream(ctx, voucher)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, p := range res {
		f, err := p.ToArray()
		if err != nil || len(f) < 1 {
			return nil, fmt.Errorf("XPENDING entry %v: %v", p, err)
		}
		entry, _ := f[0].ToString()
		ids = append(ids, st.entries[entry])
	}
	return ids, nil
}

// remaining returns the voucher's stock left in Redis, and whether it has
// one.
func (r *redisView) remaining(ctx context.Context, voucher int64) (int64, bool, error) {
	n, err := r.c.Do(ctx, r.c.B().Get().Key(r.key(voucher, "stock")).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// deadLetters returns the length of the voucher's dead-letter stream.
func (r *redisView) deadLetters(ctx context.Context, voucher int64) (int64, error) {
	return r.c.Do(ctx, r.c.B().Xlen().Key(r.key(voucher, "dlq")).Build()).AsInt64()
}

// compareEntryIDs orders two stream entry ids "ms-seq".
func compareEntryIDs(a, b string) int {
	parse := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		s, _ := strconv.ParseUint(seq, 10, 64)
		return m, s
	}
	am, as := parse(a)
	bm, bs := parse(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

// waitDrained waits until every order of must is in the database (created
// or failed) and the voucher's stream holds nothing pending or undelivered,
// and returns how long that took.
func waitDrained(t *testing.T, db *database, rv *redisView, voucher int64, must map[int64]int64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	ctx := context.Background()
	var why string
	for {
		created, failed, err := db.orders(ctx, voucher)
		st, serr := rv.stream(ctx, voucher)
		switch {
		case err != nil:
			why = fmt.Sprintf("database: %v", err)
		case serr != nil:
			why = fmt.Sprintf("redis: %v", serr)
		default:
			missing := 0
			for id := range must {
				if _, ok := created[id]; !ok {
					if _, ok := failed[id]; !ok {
						missing++
					}
				}
			}
			why = fmt.Sprintf("%d orders not in the database; stream: %d pending %v, %d undelivered, group lost %v",
				missing, st.pending, st.consumers, st.undelivered, st.noGroup)
			if missing == 0 && st.pending == 0 && st.undelivered == 0 && !st.noGroup {
				return time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained within %v: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// saleState is a voucher's state read straight from the database and Redis.
type saleState struct {
	stock, initial  int64
	created, failed map[int64]int64
	remaining       int64
	loaded          bool
	pending         int64 // stream entries whose order the database lacks
	deadLetters     int64
}

func readSale(t *testing.T, db *database, rv *redisView, voucher int64) *saleState {
	t.Helper()
	ctx := context.Background()
	s := &saleState{}
	var err error
	if s.remaining, s.loaded, err = rv.remaining(ctx, voucher); err != nil {
		t.Fatalf("read remaining stock: %v", err)
	}
	st, err := rv.stream(ctx, voucher)
	if err != nil {
		t.Fatal(err)
	}
	if s.deadLetters, err = rv.deadLetters(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	if s.created, s.failed, err = db.orders(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	if s.stock, s.initial, err = db.stock(ctx, voucher); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, id := range st.entries {
		_, c := s.created[id]
		_, f := s.failed[id]
		if !c && !f && !seen[id] {
			s.pending++
		}
		seen[id] = true
	}
	return s
}

// checkDatabase checks G1 and G2 in the database: orders ≤ stock, stock
// never negative and equal to initial less orders, one order per buyer.
func checkDatabase(t *testing.T, db *database, s *saleState, voucher int64) {
	t.Helper()
	orders := int64(len(s.created))
	if orders > s.initial {
		t.Errorf("G1: the database holds %d orders of a stock of %d", orders, s.initial)
	}
	if s.stock < 0 || s.stock != s.initial-orders {
		t.Errorf("G1: the database's stock is %d with %d orders of an initial %d", s.stock, orders, s.initial)
	}
	doubles, err := db.doubleBuyers(context.Background(), voucher)
	if err != nil {
		t.Fatal(err)
	}
	if len(doubles) > 0 {
		t.Errorf("G2: buyers with more than one order in the database (buyer → orders): %v", doubles)
	}
	for id := range s.created {
		if _, ok := s.failed[id]; ok {
			t.Errorf("order %d is both created and failed in the database", id)
		}
	}
}

// checkAgreement checks G6: remaining (Redis) + orders (database) + pending
// == initial stock, and that `seckill reconcile` agrees (exit 0).
func checkAgreement(t *testing.T, env environ, s *saleState) {
	t.Helper()
	if !s.loaded {
		t.Errorf("G6: the voucher has no stock in Redis")
	}
	if sum := s.remaining + int64(len(s.created)) + s.pending; sum != s.initial {
		t.Errorf("G6: remaining %d + orders %d + pending %d = %d, want the initial stock %d (drift %d)",
			s.remaining, len(s.created), s.pending, sum, s.initial, s.initial-sum)
	}
	code, out := execReconcile(t, env)
	if code != 0 {
		t.Errorf("seckill reconcile exited %d, want 0:\n%s", code, out)
	} else {
		t.Logf("seckill reconcile:\n%s", out)
	}
}

// merge returns the orders of both maps.
func merge(a, b map[int64]int64) map[int64]int64 {
	out := make(map[int64]int64, len(a)+len(b))
	for id, u := range a {
		out[id] = u
	}
	for id, u := range b {
		out[id] = u
	}
	return out
}

// checkNothingLost checks, after the drain, that every order answered 200
// or named by a duplicate_order answer is created, through the API (G3);
// no buyer got two orders (G2, G5); the database holds no more than the
// stock, one order per buyer (G1, G2), nothing failed or dead-lettered; and
// Redis and the database agree (G6).
func checkNothingLost(t *testing.T, l *load, base string, db *database, rv *redisView, env environ) *saleState {
	t.Helper()
	l.checkAnswers(t)
	l.checkOnePerBuyer(t)
	accepted, dups := l.orders()
	all := merge(accepted, dups)
	statuses := l.statuses(t, base, all)
	notCreated := 0
	for id, u := range all {
		if statuses[id] != "created" {
			if notCreated++; notCreated <= 10 {
				how := "200"
				if _, ok := accepted[id]; !ok {
					how = "duplicate_order"
				}
				t.Errorf("G3: order %d of buyer %d, answered %s, is %q after the drain", id, u, how, statuses[id])
			}
		}
	}
	if notCreated > 0 {
		t.Errorf("G3: %d of %d orders answered are not created after the drain", notCreated, len(all))
	}
	s := readSale(t, db, rv, l.voucher)
	for id := range all {
		if _, ok := s.created[id]; !ok {
			t.Errorf("G3: order %d, answered, is not in the database's orders", id)
			break
		}
	}
	checkDatabase(t, db, s, l.voucher)
	if len(s.failed) > 0 || s.deadLetters > 0 {
		t.Errorf("%d failed orders in the database, %d dead letters in Redis; want none", len(s.failed), s.deadLetters)
	}
	checkAgreement(t, env, s)
	t.Logf("answers: %v; %d orders answered 200, %d named by duplicate_order only; database: %d orders, stock %d/%d; Redis remaining %d",
		l.stats(), len(accepted), len(all)-len(accepted), len(s.created), s.stock, s.initial, s.remaining)
	return s
}
