package seckill_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
)

// otherAskFirst is the Redis of one instance whose first borrow lets the
// buyer's other ask, on another instance (other), run to its end first:
// the interleaving of a buyer pressing twice at the last units, where the
// other ask borrows the last unit and is admitted with it between this
// ask's admission (home shard sold out) and its borrow. With moving, that
// borrow then answers that nothing can move now, as a borrow does while
// others' transfers are in flight; else it runs.
type otherAskFirst struct {
	*redis.Client
	once   sync.Once
	other  func()
	moving bool
}

func (c *otherAskFirst) Borrow(ctx context.Context, voucherID int64, home int) (seckill.Borrowed, error) {
	c.once.Do(c.other)
	if c.moving {
		return seckill.Borrowed{}, nil
	}
	return c.Client.Borrow(ctx, voucherID, home)
}

// TestShardedBuyersOtherAskTookTheLastUnit: a buyer asks twice at once,
// through two instances, for the last unit of a voucher in 6 shards, held
// on another shard than theirs. Both asks find the home shard sold out;
// one borrows the unit and is admitted with it; the other's borrow then
// finds the voucher sold out (every shard at 0, nothing in flight), or
// that nothing can move now. That ask must answer the buyer's order
// (duplicate), not sold out nor "try again": the buyer holds a unit (G5).
func TestShardedBuyersOtherAskTookTheLastUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		moving bool
	}{
		{"borrow finds the voucher sold out", false},
		{"borrow finds nothing can move now", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newShardRig(t)
			v := r.voucher(6, 6) // a unit on each shard: ShardStock
			ctx := context.Background()
			second := admitter(r.vs, r.cache)
			// Buyers at home on shards 1 to 5 take their units: shard 0
			// holds the last one.
			user, order := int64(1000), int64(1)
			for home := 1; home < 6; home++ {
				for seckill.HomeShard(user, 6) != home {
					user++
				}
				if err := second.Readmit(ctx, &seckill.Order{VoucherID: v.ID, UserID: user, ID: order}); err != nil {
					t.Fatalf("buyer %d at home on shard %d: %v", user, home, err)
				}
				order++
			}
			user = 1
			for seckill.HomeShard(user, 6) == 0 {
				user++
			}
			var otherErr error
			first := admitter(r.vs, &otherAskFirst{Client: r.cache, moving: tc.moving, other: func() {
				otherErr = second.Readmit(ctx, &seckill.Order{VoucherID: v.ID, UserID: user, ID: 101})
			}})

			err := first.Readmit(ctx, &seckill.Order{VoucherID: v.ID, UserID: user, ID: 102})
			if otherErr != nil {
				t.Fatalf("the other ask, alone with the last unit: %v; want admitted", otherErr)
			}
			var e *seckill.Error
			if !errors.As(err, &e) || e.Kind != seckill.ErrDuplicateOrder || e.OrderID != 101 {
				t.Errorf("the ask whose other ask took the last unit = %v; want ErrDuplicateOrder with order 101", err)
			}
			stock, buyers, _, _ := r.shards(v)
			var left, held int64
			for i := range stock {
				left += stock[i]
				held += buyers[i]
			}
			if left != 0 || held != 6 {
				t.Errorf("after both asks: %d units left, %d buyers hold one; want 0 and 6 (stock %v, buyers %v)", left, held, stock, buyers)
			}
		})
	}
}
