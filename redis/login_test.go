package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

func TestIssueCodeCooldown(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		if err := c.IssueCode(ctx, "13800000001", "111111"); err != nil {
			t.Fatalf("first IssueCode: %v", err)
		}
		err := c.IssueCode(ctx, "13800000001", "222222")
		var e *seckill.Error
		if !errors.As(err, &e) || !errors.Is(err, seckill.ErrRateLimited) {
			t.Fatalf("second IssueCode within a minute: got %v, want ErrRateLimited", err)
		}
		if e.RetryAfter <= 0 || e.RetryAfter > CodeCooldown {
			t.Errorf("RetryAfter = %v, want within (0, %v]", e.RetryAfter, CodeCooldown)
		}
		// The first code still stands; the refused one was not stored.
		if err := c.RedeemCode(ctx, "13800000001", "222222"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Errorf("redeeming the refused code: got %v, want ErrUnauthorized", err)
		}
		if err := c.RedeemCode(ctx, "13800000001", "111111"); err != nil {
			t.Errorf("redeeming the issued code: %v", err)
		}
		// Another phone is not held back.
		if err := c.IssueCode(ctx, "13800000002", "333333"); err != nil {
			t.Errorf("IssueCode for another phone: %v", err)
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
		if err := c.IssueCode(ctx, "13800000003", "123456"); err != nil {
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
		if err := c.IssueCode(ctx, "13800000004", "654321"); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= CodeTries; i++ {
			err := c.RedeemCode(ctx, "13800000004", "000000")
			if !errors.Is(err, seckill.ErrUnauthorized) {
				t.Fatalf("wrong try %d: got %v, want ErrUnauthorized", i, err)
			}
			if left := CodeTries - i; left > 0 {
				if want := fmt.Sprintf("%d tries left", left); !strings.Contains(err.Error(), want) {
					t.Errorf("wrong try %d: message %q, want it to say %q", i, err, want)
				}
			}
		}
		// The fifth wrong try voided the code: the right one no longer works.
		if err := c.RedeemCode(ctx, "13800000004", "654321"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Fatalf("right code after %d wrong tries: got %v, want ErrUnauthorized", CodeTries, err)
		}
	})
}

func TestCodeExpires(t *testing.T) {
	t.Parallel()
	c, err := OpenEmbedded("", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.IssueCode(ctx, "13800000005", "111111"); err != nil {
		t.Fatal(err)
	}
	c.server.FastForward(CodeCooldown + time.Millisecond)
	if err := c.IssueCode(ctx, "13800000005", "222222"); err != nil {
		t.Fatalf("IssueCode after the cooldown: %v", err)
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
		if err := c.IssueCode(ctx, phone, "111111"); err != nil {
			t.Fatal(err)
		}
		// Another code than the phone's withdraws nothing.
		if err := c.WithdrawCode(ctx, phone, "222222"); err != nil {
			t.Fatalf("WithdrawCode of another code: %v", err)
		}
		if err := c.IssueCode(ctx, phone, "333333"); !errors.Is(err, seckill.ErrRateLimited) {
			t.Fatalf("IssueCode after withdrawing another code: got %v, want the cooldown's ErrRateLimited", err)
		}
		if err := c.WithdrawCode(ctx, phone, "111111"); err != nil {
			t.Fatalf("WithdrawCode: %v", err)
		}
		if err := c.RedeemCode(ctx, phone, "111111"); !errors.Is(err, seckill.ErrUnauthorized) {
			t.Fatalf("redeem a withdrawn code: got %v, want ErrUnauthorized", err)
		}
		// The cooldown went with the code: the phone may ask again at once.
		if err := c.IssueCode(ctx, phone, "444444"); err != nil {
			t.Fatalf("IssueCode after a withdrawal: %v", err)
		}
		if err := c.RedeemCode(ctx, phone, "444444"); err != nil {
			t.Fatalf("redeem the new code: %v", err)
		}
	})
}
