package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/cow"
)

// layout is where a voucher's shards live: the keys of each, by index.
// An unsharded voucher has one, the keys of {v<id>}.
type layout struct {
	gen    int64
	shards []*voucherKeys
}

// layouts keeps the layout of every voucher this client has seen. A
// voucher's layout never changes once created (its tags are in its row).
type layouts = cow.Map[int64, *layout]

// maxLayouts bounds layouts; past it, it starts over.
const maxLayouts = 4096

// Learn records v's layout: its shards' tags, from its row. Every method
// that takes a voucher id finds the voucher's shards so. LoadVoucher and
// Rebuild learn the voucher they are given; Config.Vouchers is asked for
// the others.
func (c *Client) Learn(v *seckill.Voucher) *layout {
	if l, ok := c.layouts.Load(v.ID); ok && l.gen == v.Generation && len(l.shards) == v.ShardCount() {
		return l
	}
	l := &layout{gen: v.Generation, shards: make([]*voucherKeys, v.ShardCount())}
	for i := range l.shards {
		k := c.keys.shard(v.ID, v.ShardTag(i))
		l.shards[i] = &k
	}
	c.layouts.Update(func(next map[int64]*layout) bool {
		if len(next) >= maxLayouts {
			clear(next)
		}
		next[v.ID] = l
		return true
	})
	return l
}

// layoutOf returns the voucher's layout: as learnt, else from its row
// (Config.Vouchers). A voucher whose row cannot be found, or a client
// without Config.Vouchers, is taken as unsharded: its keys are {v<id>}'s,
// where a sharded voucher keeps nothing, so nothing of it is touched.
func (c *Client) layoutOf(ctx context.Context, voucherID int64) (*layout, error) {
	if l, ok := c.layouts.Load(voucherID); ok {
		return l, nil
	}
	read := c.vouchers.Load()
	if read == nil {
		return c.Learn(&seckill.Voucher{ID: voucherID}), nil
	}
	v, err := (*read)(ctx, voucherID)
	if errors.Is(err, seckill.ErrVoucherNotFound) {
		k := c.keys.voucher(voucherID)
		return &layout{shards: []*voucherKeys{&k}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis: the shards of voucher %d: %w", voucherID, err)
	}
	return c.Learn(v), nil
}

// voucherReader reads a voucher's row (Config.Vouchers).
type voucherReader = func(ctx context.Context, id int64) (*seckill.Voucher, error)

// SetVouchers sets, or replaces, Config.Vouchers: how the client reads the
// row of a voucher it has not learnt. For the wiring, which gets the client
// opened and then builds the services over the database (internal/app);
// safe while the client is in use. Nil takes such vouchers as unsharded.
func (c *Client) SetVouchers(read func(ctx context.Context, id int64) (*seckill.Voucher, error)) {
	if read == nil {
		c.vouchers.Store(nil)
		return
	}
	c.vouchers.Store(&read)
}

// shardKeys returns the keys of shard s.
func (c *Client) shardKeys(ctx context.Context, s seckill.Shard) (*voucherKeys, error) {
	l, err := c.layoutOf(ctx, s.VoucherID)
	if err != nil {
		return nil, err
	}
	if s.Index < 0 || s.Index >= len(l.shards) {
		return nil, fmt.Errorf("redis: voucher %d has %d shards, not shard %d", s.VoucherID, len(l.shards), s.Index)
	}
	return l.shards[s.Index], nil
}

// shardOf returns the keys of shard i of the voucher, or nil if the
// voucher has no such shard (as far as this client knows).
func (c *Client) shardOf(ctx context.Context, voucherID int64, i int) (*voucherKeys, error) {
	shards, err := c.shardsOf(ctx, voucherID)
	if err != nil || i < 0 || i >= len(shards) {
		return nil, err
	}
	return shards[i], nil
}

// buyerKeys returns the keys of the user's home shard of the voucher
// (seckill.HomeShard): where their slot is, and only there.
func (c *Client) buyerKeys(ctx context.Context, voucherID, userID int64) (*voucherKeys, error) {
	shards, err := c.shardsOf(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	return shards[seckill.HomeShard(userID, len(shards))], nil
}

// shardsOf returns the keys of the voucher's shards, by index, as
// layoutOf finds them; a voucher already learnt costs one map read, and
// nothing allocated, on the buy's path.
func (c *Client) shardsOf(ctx context.Context, voucherID int64) ([]*voucherKeys, error) {
	l, err := c.layoutOf(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	return l.shards, nil
}
