package redis

import (
	"context"
	"errors"
	"github.com/seckill/seckill/internal/testenv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

func TestIssueCodeCooldown(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		if issued, err := c.IssueCode(ctx, "13800000001", "111111"); err != nil || !issued {
			t.Fatalf("first IssueCode = %v, %v; want issued", issued, err)
		}
		// Within the minute: nothing changes, and no error says so (the
		// caller answers as if it had sent one).
		if issued, err := c.IssueCode(ctx, "13800000001", "222222"); err != nil || issued {
			t.Fatalf("second IssueCode within a minute = %v, %v; want not issued, no error", issued, err)
		}
		// The first code still stands; the refused one was not stored.
		if err := c.RedeemCode(ctx, "13800000001", "222222"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Errorf("redeeming the refused code: got %v, want ErrUnauthorized", err)
		}
		if err := c.RedeemCode(ctx, "13800000001", "111111"); err != nil {
			t.Errorf("redeeming the issued code: %v", err)
		}
		// Another phone is not held back.
		if issued, err := c.IssueCode(ctx, "13800000002", "333333"); err != nil || !issued {
			t.Errorf("IssueCode for another phone = %v, %v; want issued", issued, err)
		}
	})
}

func TestRedeemCodeOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		if err := c.RedeemCode(ctx, "13800000003", "123456"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Fatalf("redeem with no code issued: got %v, want ErrUnauthorized", err)
		}
		if _, err := c.IssueCode(ctx, "13800000003", "123456"); err != nil {
			t.Fatal(err)
		}
		if err := c.RedeemCode(ctx, "13800000003", "123456"); err != nil {
			t.Fatalf("redeem the right code: %v", err)
		}
		if err := c.RedeemCode(ctx, "13800000003", "123456"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Fatalf("redeem the same code twice: got %v, want ErrUnauthorized", err)
		}
	})
}

func TestRedeemCodeWrongTries(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		// The answer to a phone that never had a code.
		none := c.RedeemCode(ctx, "13800000014", "000000")
		if !errors.Is(none, seckill.ErrUnauthorized) {
			t.Fatalf("redeem without a code: got %v, want ErrUnauthorized", none)
		}
		if _, err := c.IssueCode(ctx, "13800000004", "654321"); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= CodeTries; i++ {
			err := c.RedeemCode(ctx, "13800000004", "000000")
			if !errors.Is(err, seckill.ErrUnauthorized) {
				t.Fatalf("wrong try %d: got %v, want ErrUnauthorized", i, err)
			}
			// One message whatever the state: another would tell that
			// the phone has a code, and how many tries are left.
			if err.Error() != none.Error() {
				t.Errorf("wrong try %d: message %q, for a phone without a code %q", i, err, none)
			}
		}
		// The fifth wrong try voided the code: the right one no longer works.
		if err := c.RedeemCode(ctx, "13800000004", "654321"); !errors.Is(err, seckill.ErrUnauthorized) || err.Error() != none.Error() {
			t.Fatalf("right code after %d wrong tries: got %v, want ErrUnauthorized %q", CodeTries, err, none)
		}
	})
}

func TestCodeExpires(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.IssueCode(ctx, "13800000005", "111111"); err != nil {
		t.Fatal(err)
	}
	c.server.FastForward(CodeCooldown + time.Millisecond)
	if issued, err := c.IssueCode(ctx, "13800000005", "222222"); err != nil || !issued {
		t.Fatalf("IssueCode after the cooldown = %v, %v; want issued", issued, err)
	}
	c.server.FastForward(CodeTTL + time.Millisecond)
	if err := c.RedeemCode(ctx, "13800000005", "222222"); !errors.Is(err, seckill.ErrUnauthorized) {
		t.Fatalf("redeem an expired code: got %v, want ErrUnauthorized", err)
	}
}

func TestWithdrawCode(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const phone = "+8613800000006"
		if _, err := c.IssueCode(ctx, phone, "111111"); err != nil {
			t.Fatal(err)
		}
		// Another code than the phone's withdraws nothing.
		if err := c.WithdrawCode(ctx, phone, "222222"); err != nil {
			t.Fatalf("WithdrawCode of another code: %v", err)
		}
		if issued, err := c.IssueCode(ctx, phone, "333333"); err != nil || issued {
			t.Fatalf("IssueCode after withdrawing another code = %v, %v; want the cooldown to hold", issued, err)
		}
		if err := c.WithdrawCode(ctx, phone, "111111"); err != nil {
			t.Fatalf("WithdrawCode: %v", err)
		}
		if err := c.RedeemCode(ctx, phone, "111111"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Fatalf("redeem a withdrawn code: got %v, want ErrUnauthorized", err)
		}
		// The cooldown went with the code: the phone may ask again at once.
		if issued, err := c.IssueCode(ctx, phone, "444444"); err != nil || !issued {
			t.Fatalf("IssueCode after a withdrawal = %v, %v; want issued", issued, err)
		}
		if err := c.RedeemCode(ctx, phone, "444444"); err != nil {
			t.Fatalf("redeem the new code: %v", err)
		}
	})
}

// TestSpendGuess: the allowances of wrong codes hold per client and for
// every instance together (two clients on one Redis are two instances), a
// refused attempt counts nothing, and a refunded one frees its place.
func TestSpendGuess(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		other := sibling(t, c)
		lim := seckill.GuessLimits{PerClient: 3, Global: 5, Window: time.Hour}
		spend := func(c *Client, client string) error { return c.SpendGuess(ctx, client, lim) }
		wantRefused := func(err error, who string) {
			t.Helper()
			var e *seckill.Error
			if !errors.As(err, &e) || !errors.Is(err, seckill.ErrRateLimited) {
				t.Fatalf("got %v, want ErrRateLimited", err)
			}
			if e.RetryAfter <= 0 || e.RetryAfter > lim.Window {
				t.Errorf("RetryAfter = %v, want within (0, %v]", e.RetryAfter, lim.Window)
			}
			if !strings.Contains(e.Message, who) {
				t.Errorf("refusal %q does not name %q", e.Message, who)
			}
		}
		for i := range 3 {
			if err := spend(c, "192.0.2.1"); err != nil {
				t.Fatalf("attempt %d of a client within its allowance: %v", i+1, err)
			}
		}
		// The client's allowance holds on the other instance too.
		wantRefused(spend(other, "192.0.2.1"), "address")
		// A right code gives its attempt back.
		if err := c.RefundGuess(ctx, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
		if err := spend(other, "192.0.2.1"); err != nil {
			t.Fatalf("an attempt after a refund: %v", err)
		}
		// Two more clients, one on each instance, fill the global five.
		if err := spend(other, "192.0.2.2"); err != nil {
			t.Fatal(err)
		}
		if err := spend(c, "192.0.2.3"); err != nil {
			t.Fatal(err)
		}
		wantRefused(spend(c, "192.0.2.3"), "service")
		wantRefused(spend(other, ""), "service")
		// Past it a client that counted nothing this window is heard, once:
		// an honest buyer's right code is not refused for an attacker's.
		if err := spend(c, "192.0.2.4"); err != nil {
			t.Fatalf("a fresh client past the global allowance: %v", err)
		}
		wantRefused(spend(other, "192.0.2.4"), "service")
		// Refused attempts counted nothing: two refunds free exactly one.
		for _, client := range []string{"192.0.2.3", "192.0.2.4"} {
			if err := other.RefundGuess(ctx, client); err != nil {
				t.Fatal(err)
			}
		}
		if err := spend(c, "192.0.2.2"); err != nil {
			t.Fatalf("an attempt after refunds of the global count: %v", err)
		}
		wantRefused(spend(other, "192.0.2.2"), "service")
		// Without limits nothing is counted or refused.
		if err := c.SpendGuess(ctx, "192.0.2.4", seckill.GuessLimits{}); err != nil {
			t.Errorf("SpendGuess without limits: %v", err)
		}
	})
}

// TestSpendGuessWindow: the allowances renew after their window.
func TestSpendGuessWindow(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	lim := seckill.GuessLimits{PerClient: 1, Global: 10, Window: time.Hour}
	if err := c.SpendGuess(ctx, "192.0.2.1", lim); err != nil {
		t.Fatal(err)
	}
	if err := c.SpendGuess(ctx, "192.0.2.1", lim); !errors.Is(err, seckill.ErrRateLimited) {
		t.Fatalf("second attempt: %v, want ErrRateLimited", err)
	}
	c.server.FastForward(time.Hour + time.Millisecond)
	if err := c.SpendGuess(ctx, "192.0.2.1", lim); err != nil {
		t.Fatalf("an attempt after the window: %v", err)
	}
}
