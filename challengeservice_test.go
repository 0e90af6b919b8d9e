package seckill_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlledger"
)

// challenges returns a ChallengeService over the vouchers and orders of a
// store and Redis of the test's own (the test Redis, or spender if set),
// with a clock the test moves.
func challenges(t *testing.T, spender seckill.ChallengeSpender) (*seckill.ChallengeService, *seckill.VoucherService, *seckill.OrderService, *clock) {
	t.Helper()
	vs, store, _ := services(t, "")
	cache := cacheOf(vs)
	if spender == nil {
		spender = cache
	}
	clk := &clock{t: time.Now()}
	orders := orderService(vs, store, 9000)
	cs := &seckill.ChallengeService{Key: seckill.ChallengeKey([]byte("a token secret of thirty-two bytes or more")),
		Vouchers: vs, Answers: redisLedger(orders), Spent: spender, Logger: vs.Logger, Clock: clk.Now,
		Config: seckill.ChallengeConfig{MinNumber: 1000}}
	return cs, vs, orders, clk
}

// clock is a time the test sets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// challengeVoucher creates a voucher on sale now that takes a challenge.
func challengeVoucher(t *testing.T, vs *seckill.VoucherService, title string, stock int64) *seckill.Voucher {
	t.Helper()
	v := onSale(title, stock)
	v.Challenge, v.ChallengeLead = true, time.Minute
	if _, err := vs.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	return v
}

// solve issues a challenge of the voucher to the user and solves it.
func solve(t *testing.T, cs *seckill.ChallengeService, user, voucher int64) seckill.Solution {
	t.Helper()
	ch, err := cs.Issue(t.Context(), user, voucher)
	if err != nil {
		t.Fatalf("Issue(%d, %d): %v", user, voucher, err)
	}
	sol, err := seckill.SolveChallenge(t.Context(), ch)
	if err != nil {
		t.Fatal(err)
	}
	return sol
}

// TestChallengeCheck: a solution passes once, for its buyer and its
// voucher, and for no one else; the cheap answers need none.
func TestChallengeCheck(t *testing.T) {
	t.Parallel()
	cs, vs, orders, clk := challenges(t, nil)
	ctx := t.Context()
	a := challengeVoucher(t, vs, "a", 10)
	b := challengeVoucher(t, vs, "b", 10)
	plain := onSale("plain", 10)
	if _, err := vs.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	const buyer, other = 1001, 1002
	check := func(what string, user, voucher int64, header string, want error) {
		t.Helper()
		if err := cs.Check(ctx, user, voucher, header); (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%s: Check = %v, want %v", what, err, want)
		}
	}
	check("no solution", buyer, a.ID, "", seckill.ErrChallengeRequired)
	theirs := solve(t, cs, other, a.ID)
	check("another buyer's", buyer, a.ID, theirs.Header(), seckill.ErrChallengeInvalid)
	onB := solve(t, cs, buyer, b.ID)
	check("another voucher's", buyer, a.ID, onB.Header(), seckill.ErrChallengeInvalid)
	mine := solve(t, cs, buyer, a.ID)
	check("fresh", buyer, a.ID, mine.Header(), nil)
	check("used", buyer, a.ID, mine.Header(), seckill.ErrChallengeInvalid)
	upper := mine
	upper.Challenge = strings.ToUpper(upper.Challenge)
	check("used, its challenge in capitals", buyer, a.ID, upper.Header(), seckill.ErrChallengeInvalid)
	check("used, on another voucher", buyer, b.ID, mine.Header(), seckill.ErrChallengeInvalid)
	check("another buyer's, unspent by the tries of others", other, a.ID, theirs.Header(), nil)
	check("a voucher without a challenge, no header", buyer, plain.ID, "", nil)
	check("a voucher without a challenge, garbage", buyer, plain.ID, "garbage", nil)
	check("no voucher", buyer, 999_999_999, "", seckill.ErrVoucherNotFound)

	// Known sold out: answered so without a solution.
	small := challengeVoucher(t, vs, "small", 1)
	check("the last unit", buyer, small.ID, solve(t, cs, buyer, small.ID).Header(), nil)
	if _, err := orders.Buy(ctx, buyer, small.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Buy(ctx, other, small.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("buy of a sold-out voucher: %v, want sold out", err)
	}
	check("known sold out, no solution", 1003, small.ID, "", seckill.ErrSoldOut)
	check("known sold out, the buyer with its order", buyer, small.ID, "", seckill.ErrDuplicateOrder)
	st := cs.Stats()
	if st.Passed != 3 || st.Required != 1 || st.Invalid != 5 || st.Issued != 4 {
		t.Errorf("Stats = %+v; want 4 issued, 3 passed, 1 required, 5 invalid", st)
	}

	// Two seconds on: the memory of the sell-out lapsed, and no buy has
	// reached an admission since to renew it. A buy without a solution,
	// and a request for a challenge, renew it from the stock and are told
	// sold out all the same, not to solve a challenge.
	redisLedger(orders).Clock = func() time.Time { return time.Now().Add(2 * time.Second) }
	clk.Set(clk.Now().Add(2 * time.Second)) // the stock's last read is as old
	check("sold out, the memory lapsed, no solution", 1004, small.ID, "", seckill.ErrSoldOut)
	redisLedger(orders).Clock = func() time.Time { return time.Now().Add(4 * time.Second) }
	clk.Set(clk.Now().Add(2 * time.Second))
	if _, err := cs.Issue(ctx, 1005, small.ID); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("a challenge for a sold-out voucher, the memory lapsed: %v, want sold out", err)
	}
	if _, err := cs.Issue(ctx, 1005, a.ID); err != nil {
		t.Errorf("a challenge for a voucher with stock: %v", err)
	}
}

// TestChallengeWindow: challenges are issued from the lead before the
// start to the end, and expire TTL after the later of now and the start;
// a buy outside the window is answered without a solution.
func TestChallengeWindow(t *testing.T) {
	t.Parallel()
	cs, vs, _, clk := challenges(t, nil)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	v := &seckill.Voucher{Title: "later", Stock: 5, BeginTime: now.Add(time.Hour), EndTime: now.Add(2 * time.Hour), Challenge: true, ChallengeLead: time.Minute}
	if _, err := vs.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	plain := onSale("plain", 5)
	if _, err := vs.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	clk.Set(now)
	_, err := cs.Issue(ctx, 1001, v.ID)
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrNotStarted || e.RetryAfter != time.Hour-time.Minute {
		t.Errorf("Issue an hour before = %v, want ErrNotStarted with RetryAfter 59m", err)
	}
	if err := cs.Check(ctx, 1001, v.ID, ""); !errors.Is(err, seckill.ErrNotStarted) {
		t.Errorf("Check before the start = %v, want ErrNotStarted", err)
	}
	if _, err := cs.Issue(ctx, 1001, plain.ID); !errors.Is(err, seckill.ErrChallengeNotNeeded) {
		t.Errorf("Issue of a voucher without a challenge = %v, want ErrChallengeNotNeeded", err)
	}

	// Within the lead: issued, expiring TTL after the start.
	clk.Set(v.BeginTime.Add(-30 * time.Second))
	sol := solve(t, cs, 1001, v.ID)
	claims, err := seckill.VerifySolution(cs.Key, sol, clk.Now())
	if err != nil || !claims.Expires.Equal(v.BeginTime.Add(seckill.DefaultChallengeTTL)) {
		t.Errorf("claims %+v, %v; want expiry at the start + %v", claims, err, seckill.DefaultChallengeTTL)
	}
	// After the start it passes, until its expiry.
	clk.Set(v.BeginTime.Add(seckill.DefaultChallengeTTL))
	if err := cs.Check(ctx, 1001, v.ID, sol.Header()); !errors.Is(err, seckill.ErrChallengeInvalid) {
		t.Errorf("Check at its expiry = %v, want ErrChallengeInvalid", err)
	}
	clk.Set(v.BeginTime.Add(time.Second))
	if err := cs.Check(ctx, 1001, v.ID, sol.Header()); err != nil {
		t.Errorf("Check after the start = %v, want nil", err)
	}
	// During the sale: expiring TTL after now.
	sol = solve(t, cs, 1002, v.ID)
	claims, _ = seckill.VerifySolution(cs.Key, sol, clk.Now())
	if !claims.Expires.Equal(clk.Now().Add(seckill.DefaultChallengeTTL).Truncate(time.Second)) {
		t.Errorf("expiry %v, want now + %v", claims.Expires, seckill.DefaultChallengeTTL)
	}
	clk.Set(v.EndTime)
	if _, err := cs.Issue(ctx, 1001, v.ID); !errors.Is(err, seckill.ErrEnded) {
		t.Errorf("Issue at the end = %v, want ErrEnded", err)
	}
	if err := cs.Check(ctx, 1002, v.ID, sol.Header()); !errors.Is(err, seckill.ErrEnded) {
		t.Errorf("Check at the end = %v, want ErrEnded", err)
	}
}

// TestChallengeReuseRace: 20 buys carrying one solution at once, one
// passes, on the test Redis and on the embedded server alike.
func TestChallengeReuseRace(t *testing.T) {
	t.Parallel()
	embedded, err := redis.OpenEmbedded("seckill", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(embedded.Close)
	for name, spender := range map[string]seckill.ChallengeSpender{"redis": nil, "embedded": embedded} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cs, vs, _, _ := challenges(t, spender)
			v := challengeVoucher(t, vs, "raced", 10)
			header := solve(t, cs, 1001, v.ID).Header()
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				passed int
				start  = make(chan struct{})
			)
			for range 20 {
				wg.Go(func() {
					<-start
					err := cs.Check(context.Background(), 1001, v.ID, header)
					switch {
					case err == nil:
						mu.Lock()
						passed++
						mu.Unlock()
					case !errors.Is(err, seckill.ErrChallengeInvalid):
						t.Errorf("Check = %v, want nil or ErrChallengeInvalid", err)
					}
				})
			}
			close(start)
			wg.Wait()
			if passed != 1 {
				t.Errorf("%d of 20 presentations of one solution passed, want 1", passed)
			}
		})
	}
}

// TestChallengeSpendUnavailable: a cache that cannot spend the solution
// is ErrUnavailable, not a pass and not a 500.
func TestChallengeSpendUnavailable(t *testing.T) {
	t.Parallel()
	cs, vs, _, _ := challenges(t, failingSpender{})
	v := challengeVoucher(t, vs, "no cache", 10)
	if err := cs.Check(t.Context(), 1001, v.ID, solve(t, cs, 1001, v.ID).Header()); !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("Check = %v, want ErrUnavailable", err)
	}
}

type failingSpender struct{}

func (failingSpender) SpendChallenge(context.Context, *seckill.Voucher, int64, string, time.Duration) (bool, error) {
	return false, errors.New("connection refused")
}

// TestChallengeHolderAfterTheEnd: after the end, a buyer who holds an
// order of a challenge voucher is answered it (duplicate_order with its
// id), as on a voucher without a challenge, and without a solution; a
// buyer without one is told the sale ended. In the stream mode, and in
// the sync mode, whose service keeps no sold-out memory (no Answers) and
// whose transaction reads the window on the service's clock.
func TestChallengeHolderAfterTheEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []seckill.Mode{seckill.ModeStream, seckill.ModeSync} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			cs, vs, orders, clk := challenges(t, nil)
			if mode == seckill.ModeSync {
				// As the service wires the sync mode: no sold-out memory.
				cs.Answers = nil
				orders = &seckill.OrderService{Ledger: &sqlledger.Ledger{Store: orders.Store.(seckill.Store), Clock: clk.Now}, Store: orders.Store, Vouchers: vs, IDs: &counter{n: 9000}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return clk.Now() }}
			}
			holderAfterTheEnd(t, mode, cs, vs, orders, clk)
		})
	}
}

func holderAfterTheEnd(t *testing.T, mode seckill.Mode, cs *seckill.ChallengeService, vs *seckill.VoucherService, orders *seckill.OrderService, clk *clock) {
	t.Helper()
	ctx := t.Context()
	withChallenge := challengeVoucher(t, vs, "with a challenge", 10)
	plain := onSale("without", 10)
	if _, err := vs.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	const holder, late = 1001, 1002
	// buy is the buy route: the check, then the order service.
	buy := func(user, voucher int64, header string) (*seckill.Order, error) {
		if err := cs.Check(ctx, user, voucher, header); err != nil {
			return nil, err
		}
		return orders.Buy(ctx, user, voucher)
	}
	held := map[int64]int64{}
	for _, v := range []*seckill.Voucher{withChallenge, plain} {
		header := ""
		if v.Challenge {
			header = solve(t, cs, holder, v.ID).Header()
		}
		o, err := buy(holder, v.ID, header)
		if err != nil {
			t.Fatalf("buy of %q: %v", v.Title, err)
		}
		held[v.ID] = o.ID
	}

	// This instance's clock passes the end. In the stream mode the
	// admission reads the cache's clock, which has not; it looks up the
	// buyer's slot before the clock, so a holder is answered the same
	// either way.
	clk.Set(withChallenge.EndTime)
	for _, v := range []*seckill.Voucher{withChallenge, plain} {
		_, err := buy(holder, v.ID, "")
		var e *seckill.Error
		if !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != held[v.ID] {
			t.Errorf("%q: the holder's buy after the end = %v, want duplicate_order with order %d", v.Title, err, held[v.ID])
		}
	}
	if _, err := buy(late, withChallenge.ID, ""); !errors.Is(err, seckill.ErrEnded) {
		t.Errorf("a buy after the end without an order = %v, want ErrEnded", err)
	}

	// Asking for a challenge: the holder is told their order where the
	// cache is read (not in the sync mode, which has none to read).
	_, err := cs.Issue(ctx, holder, withChallenge.ID)
	var e *seckill.Error
	if mode == seckill.ModeSync {
		if !errors.Is(err, seckill.ErrEnded) {
			t.Errorf("the holder's challenge after the end, sync mode = %v, want ErrEnded", err)
		}
	} else if !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != held[withChallenge.ID] {
		t.Errorf("the holder's challenge after the end = %v, want duplicate_order with order %d", err, held[withChallenge.ID])
	}
	if _, err := cs.Issue(ctx, late, withChallenge.ID); !errors.Is(err, seckill.ErrEnded) {
		t.Errorf("a challenge after the end without an order = %v, want ErrEnded", err)
	}
}

// TestChallengeHolderCancelledAfterTheEndNotAdmittedAgain: after this
// instance's clock passes the end, a holder's buy without a solution must
// not reach an admission: their order may be cancelled first (the unit
// and, with rebuyAfterCancel, the slot given back), and the admission,
// reading Redis's clock, which is not past the end yet, would then sell
// them a second unit with nothing solved.
func TestChallengeHolderCancelledAfterTheEndNotAdmittedAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs, vs, orders, clk := challenges(t, nil)
	v := onSale("with a challenge, rebuy after cancel", 10)
	v.Challenge, v.ChallengeLead = true, time.Minute
	v.PayWithin, v.RebuyAfterCancel = time.Minute, true
	if _, err := vs.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	const holder = 1001
	if err := cs.Check(ctx, holder, v.ID, solve(t, cs, holder, v.ID).Header()); err != nil {
		t.Fatal(err)
	}
	first, err := orders.Buy(ctx, holder, v.ID)
	if err != nil {
		t.Fatal(err)
	}

	clk.Set(v.EndTime) // this instance's clock; Redis's is an hour before
	err = cs.Check(ctx, holder, v.ID, "")
	// The buyer cancels between the check and the admission.
	if _, rerr := cacheOf(vs).ReturnUnit(ctx, v, holder, first.ID); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		if o, berr := orders.Buy(ctx, holder, v.ID); berr == nil {
			t.Fatalf("a second order %d admitted after the end with no challenge solved (first %d)", o.ID, first.ID)
		}
	}
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != first.ID {
		t.Errorf("the holder's buy after the end = %v, want duplicate_order with order %d", err, first.ID)
	}
}
