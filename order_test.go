package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
)

// lostReply is the real cache, except that Admit's answer can be lost on
// the way back (the script ran) or its request lost on the way there (it
// did not), as a network failure does either.
type lostReply struct {
	*redis.Client
	mode string // "reply": ran, answer lost; "request": never ran; "both": and the look-up fails too
}

func (l *lostReply) Admit(ctx context.Context, voucherID, userID, orderID int64) error {
	if l.mode == "reply" {
		if err := l.Client.Admit(ctx, voucherID, userID, orderID); err != nil {
			return err
		}
	}
	return fmt.Errorf("redis: admit: %w: EOF", seckill.ErrUnavailable)
}

func (l *lostReply) BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error) {
	if l.mode == "both" {
		return nil, fmt.Errorf("redis: read buyer: %w: EOF", seckill.ErrUnavailable)
	}
	return l.Client.BuyerOrders(ctx, userID, voucherIDs...)
}

type counter struct{ n int64 }

func (c *counter) Next() (int64, error) { c.n++; return c.n, nil }

// TestBuyUnknownOutcome: when admission's answer is lost, the buyer's entry
// in Redis decides: found, the order stands (200); not found, or not
// readable, the outcome is unknown (503 with Retry-After), never a guess.
func TestBuyUnknownOutcome(t *testing.T) {
	vs, store, _ := services(t, "")
	ctx := context.Background()
	v, err := vs.Create(ctx, onSale("lost replies", 10))
	if err != nil {
		t.Fatal(err)
	}
	real := vs.Cache.(*redis.Client)
	for _, tc := range []struct {
		mode string
		ok   bool
	}{{"reply", true}, {"request", false}, {"both", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			s := &seckill.OrderService{Cache: &lostReply{Client: real, mode: tc.mode}, Store: store, Vouchers: vs,
				IDs: &counter{n: map[string]int64{"reply": 100, "request": 200, "both": 300}[tc.mode]}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
			user := map[string]int64{"reply": 1, "request": 2, "both": 3}[tc.mode]
			o, err := s.Buy(ctx, user, v.ID)
			if tc.ok {
				if err != nil || o.Status != seckill.OrderPending {
					t.Fatalf("Buy with the reply lost = %+v, %v; want the pending order", o, err)
				}
				found, _ := real.BuyerOrders(ctx, user, v.ID)
				if found[v.ID] != o.ID {
					t.Errorf("Redis holds order %d for the buyer, Buy answered %d", found[v.ID], o.ID)
				}
				return
			}
			var e *seckill.Error
			if !errors.As(err, &e) || !errors.Is(err, seckill.ErrUnavailable) || e.RetryAfter <= 0 {
				t.Fatalf("Buy with the outcome unknown = %+v, %v; want ErrUnavailable with RetryAfter", o, err)
			}
			// The buyer asks again once Redis answers: one order, theirs.
			again := &seckill.OrderService{Cache: real, Store: store, Vouchers: vs, IDs: &counter{n: 900 + user}, Logger: vs.Logger, OrderTime: func(int64) time.Time { return time.Now() }}
			o, err = again.Buy(ctx, user, v.ID)
			if err != nil {
				t.Fatalf("Buy again = %v", err)
			}
			if o.ID != 901+user {
				t.Errorf("Buy again = order %d, want the new order %d", o.ID, 901+user)
			}
		})
	}
}
