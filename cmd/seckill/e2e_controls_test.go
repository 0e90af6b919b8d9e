package main

// The operator at the door, from outside: pause and resume, end now and
// add stock in the middle of a sale run by two serve instances.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/testenv"
)

// controlModes are the modes and databases the control tests run in: the
// stream mode on MariaDB, as the issue asks, the queue mode on MariaDB and
// the sync mode on PostgreSQL.
var controlModes = []struct {
	mode  string
	dbURL func(testing.TB) string
}{
	{"stream", testenv.MySQLURL},
	{"queue", testenv.MySQLURL},
	{"sync", testenv.PostgresURL},
}

// controlEnv starts two serve instances of the mode on one Redis prefix
// and database.
type controlEnv struct {
	env    environ
	db     *database
	rv     *redisView
	client *http.Client
	a, b   *server
	mode   string
}

func newControlEnv(t *testing.T, mode, dbURL string) *controlEnv {
	env := serveEnv(testenv.RedisURL(t), testenv.RedisPrefix(t), dbURL)
	env["SECKILL_MODE"] = mode
	return &controlEnv{
		env: env, mode: mode,
		db:     openDatabase(t, env["SECKILL_DB_URL"]),
		rv:     openRedisView(t, env["SECKILL_REDIS_URL"], env["SECKILL_REDIS_PREFIX"]),
		client: newClient(t),
		a:      startServe(t, "serve a", env),
		b:      startServe(t, "serve b", env),
	}
}

// admitted is the status of an order answered 200 in the mode.
func (e *controlEnv) admitted() string {
	if e.mode == "sync" {
		return "created"
	}
	return "pending"
}

// control sends an operator's control (pause, resume, end, stock) and
// returns the voucher answered; key and body are the stock addition's.
func (e *controlEnv) control(t *testing.T, base string, voucher int64, verb, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", fmt.Sprintf("%s/api/admin/vouchers/%d/%s", base, voucher, verb), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+mint(t, adminUser, true))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s voucher %d: %v", verb, voucher, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s voucher %d: %d %q", verb, voucher, res.StatusCode, raw)
	}
	return res.StatusCode, out
}

// mustControl is control that must answer 200.
func (e *controlEnv) mustControl(t *testing.T, base string, voucher int64, verb, key, body string) map[string]any {
	t.Helper()
	status, out := e.control(t, base, voucher, verb, key, body)
	if status != http.StatusOK {
		t.Fatalf("%s voucher %d = %d %v", verb, voucher, status, out)
	}
	return out
}

// checkBooks waits for every order the loads admitted in the database,
// and checks that the sale sold exactly want units, one per buyer, as the
// database, Redis and seckill reconcile say.
func (e *controlEnv) checkBooks(t *testing.T, voucher int64, want int, loads ...*load) {
	t.Helper()
	accepted := map[int64]int64{}
	for _, l := range loads {
		l.checkOnePerBuyer(t)
		got, _ := l.orders()
		maps.Copy(accepted, got)
	}
	if len(accepted) != want {
		t.Errorf("%d buyers admitted, want exactly %d", len(accepted), want)
	}
	waitWritten(t, e.db, voucher, accepted, time.Minute)
	ctx := context.Background()
	created, err := countStatus(ctx, e.db, voucher, "created")
	if err != nil {
		t.Fatal(err)
	}
	stock, initial, err := e.db.stock(ctx, voucher)
	if err != nil {
		t.Fatal(err)
	}
	if created != int64(want) || initial-created != stock {
		t.Errorf("database: %d created orders, stock %d of %d, want %d sold", created, stock, initial, want)
	}
	if e.mode == "sync" {
		return
	}
	if code, out := execReconcile(t, e.env); code != 0 {
		t.Errorf("seckill reconcile exited %d, want 0:\n%s", code, out)
	}
}

// admittedAfter returns the orders admitted by requests sent after at.
func (l *load) admittedAfter(at time.Time) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var late []int64
	for id, sent := range l.sentAt {
		if sent.After(at) {
			late = append(late, id)
		}
	}
	return late
}

// TestPauseMidSale pauses a sale of 1,000 units in the middle, with 2,000
// buyers 64 at once on two instances: once the pause is answered, no
// request is admitted (every buyer asking is answered 409 paused, and the
// stock does not move) until the sale is resumed; then the sale completes,
// exactly 1,000 sold, and the books agree.
func TestPauseMidSale(t *testing.T) {
	for _, c := range controlModes {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			e := newControlEnv(t, c.mode, c.dbURL(t))
			const stock, crowd = 1000, 2000
			voucher := createVoucher(t, e.client, e.a.url, stock)
			l := newLoad(t, e.client, voucher, buyers(crowd))
			l.admitted = e.admitted()
			l.controlled = true
			l.setTargets(e.a.url, e.b.url)
			l.start(t, shuffledAttempts(buyers(crowd), 0), 64, 0, 2*time.Minute)
			l.waitCount(t, "200", stock/3, time.Minute)

			out := e.mustControl(t, e.b.url, voucher, "pause", "", "")
			paused := time.Now()
			if out["paused"] != true {
				t.Fatalf("pause answered %v, want paused true", out)
			}
			before := apiRemaining(t, e.client, e.a.url, voucher)
			l.waitCount(t, "paused", l.stats()["paused"]+500, time.Minute)
			after := apiRemaining(t, e.client, e.b.url, voucher)
			if e.mode != "sync" {
				if left, _, err := e.rv.remaining(context.Background(), voucher); err != nil || left != after {
					t.Errorf("Redis remaining %d (%v), the API's %d", left, err, after)
				}
			}
			resumed := time.Now()
			late := l.admittedAfter(paused)
			if len(late) > 0 || before != after {
				t.Errorf("after the pause was answered: %d admitted (%v), remaining %d then %d", len(late), late[:min(5, len(late))], before, after)
			}
			t.Logf("paused %v after %d admissions, %d paused answers; remaining %d", resumed.Sub(paused).Round(time.Millisecond), stock-int(before), l.stats()["paused"], before)

			if out := e.mustControl(t, e.a.url, voucher, "resume", "", ""); out["paused"] != false {
				t.Fatalf("resume answered %v, want paused false", out)
			}
			l.wait()
			l.checkAnswers(t)
			e.checkBooks(t, voucher, stock, l)
		})
	}
}

// TestEndNowMidSale ends a sale in the middle: once the end is answered
// (with the voucher's new endTime), no request is admitted, and buyers are
// answered 409 ended; what was admitted before is written, and the books
// agree.
func TestEndNowMidSale(t *testing.T) {
	for _, c := range controlModes {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			e := newControlEnv(t, c.mode, c.dbURL(t))
			const stock, crowd = 1000, 2000
			voucher := createVoucher(t, e.client, e.a.url, stock)
			l := newLoad(t, e.client, voucher, buyers(crowd))
			l.admitted = e.admitted()
			l.controlled = true
			l.setTargets(e.a.url, e.b.url)
			l.start(t, shuffledAttempts(buyers(crowd), 0), 64, 0, 2*time.Minute)
			l.waitCount(t, "200", stock/3, time.Minute)

			asked := time.Now()
			out := e.mustControl(t, e.a.url, voucher, "end", "", "")
			ended := time.Now()
			end, err := time.Parse(time.RFC3339Nano, fmt.Sprint(out["endTime"]))
			if err != nil || end.Before(asked.Add(-time.Second)) || end.After(ended.Add(time.Second)) {
				t.Fatalf("end answered endTime %v (%v), want about now (%v)", out["endTime"], err, asked)
			}
			l.wait()
			l.checkAnswers(t)
			if late := l.admittedAfter(ended); len(late) > 0 {
				t.Errorf("%d admitted after the end was answered: %v", len(late), late[:min(5, len(late))])
			}
			if l.stats()["ended"] == 0 {
				t.Errorf("no buyer was answered ended: %v", l.stats())
			}
			accepted, _ := l.orders()
			t.Logf("ended after %d admissions: %v", len(accepted), l.stats())
			e.checkBooks(t, voucher, len(accepted), l)
		})
	}
}

// TestAddStockOnce adds stock with one Idempotency-Key 20 times at once,
// half through each instance: it is added once, and every answer shows it.
// Then, in the middle of a sale of the first 100 units, 100 more are added
// with another key: exactly 250 are sold (100 + 50 + 100), and the books
// agree.
func TestAddStockOnce(t *testing.T) {
	for _, c := range controlModes {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			e := newControlEnv(t, c.mode, c.dbURL(t))
			const stock, add, more, crowd = 100, 50, 100, 600
			voucher := createVoucher(t, e.client, e.a.url, stock)

			var wg sync.WaitGroup
			answers := make([]map[string]any, 20)
			statuses := make([]int, 20)
			for i := range answers {
				wg.Go(func() {
					base := []string{e.a.url, e.b.url}[i%2]
					statuses[i], answers[i] = e.control(t, base, voucher, "stock", "restock-1", fmt.Sprintf(`{"add":%d}`, add))
				})
			}
			wg.Wait()
			for i, out := range answers {
				if statuses[i] != http.StatusOK || out["stock"] != float64(stock+add) || out["remaining"] != float64(stock+add) {
					t.Errorf("addition %d answered %d %v, want stock and remaining %d", i, statuses[i], out, stock+add)
				}
			}
			if left := apiRemaining(t, e.client, e.b.url, voucher); left != stock+add {
				t.Fatalf("remaining %d after 20 additions of %d with one key, want %d", left, add, stock+add)
			}
			if _, initial, err := e.db.stock(context.Background(), voucher); err != nil || initial != stock+add {
				t.Fatalf("database initial stock %d (%v), want %d", initial, err, stock+add)
			}

			first := buyers(crowd)
			l := newLoad(t, e.client, voucher, first)
			l.admitted = e.admitted()
			l.controlled = true
			l.setTargets(e.a.url, e.b.url)
			l.start(t, shuffledAttempts(first, 0), 64, 0, 2*time.Minute)
			l.waitCount(t, "200", (stock+add)/2, time.Minute)
			out := e.mustControl(t, e.b.url, voucher, "stock", "restock-2", fmt.Sprintf(`{"add":%d}`, more))
			if out["stock"] == nil || out["remaining"] == nil {
				t.Fatalf("addition answered %v", out)
			}
			again := e.mustControl(t, e.a.url, voucher, "stock", "restock-2", fmt.Sprintf(`{"add":%d}`, more))
			if status, out := e.control(t, e.a.url, voucher, "stock", "restock-2", `{"add":1}`); status != http.StatusBadRequest {
				t.Errorf("the same key with another add = %d %v, want 400", status, out)
			}
			l.wait()
			l.checkAnswers(t)
			// The first crowd may have been told sold_out before the units
			// came: a second crowd buys what is left.
			second := buyers(2 * crowd)[crowd:]
			l2 := newLoad(t, e.client, voucher, second)
			l2.admitted = e.admitted()
			l2.controlled = true
			l2.setTargets(e.a.url, e.b.url)
			l2.start(t, shuffledAttempts(second, 0), 64, 0, 2*time.Minute)
			l2.wait()
			l2.checkAnswers(t)
			t.Logf("added %d mid-sale: answered %v, again %v; %v then %v", more, out, again, l.stats(), l2.stats())
			e.checkBooks(t, voucher, stock+add+more, l, l2)
			if _, initial, err := e.db.stock(context.Background(), voucher); err != nil || initial != stock+add+more {
				t.Errorf("database initial stock %d (%v), want %d", initial, err, stock+add+more)
			}
		})
	}
}
