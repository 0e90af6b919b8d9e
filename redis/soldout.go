package redis

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/soldout"
)

// This file is the Redis I/O of the copies of sold-out vouchers' buyers
// (package soldout, which polls and trusts them): the fenced read of one
// buyer's slot, the read of a voucher's (or shard's) changes, the scan of
// its buyers, and the mark of a sharded voucher's shards drained.

var _ soldout.Reader = (*Client)(nil)

// Hold is how long units given back to a sold-out voucher (a dead letter, a
// released reservation; a transfer to a drained shard, see markDrained) or
// a rebuilt stock wait before they are admitted: an admission meanwhile is
// answered unavailable, to try again. It is what
// keeps the instances' copies of a sold-out voucher's buyers true (see
// soldout.Copies): longer than soldout.Trust.
const Hold = 250 * time.Millisecond

// Hold must exceed soldout.Trust: the constant below overflows, and the
// package does not build, if it does not.
const _ = uint64(Hold - soldout.Trust - 1)

var holdMillis = strconv.FormatInt(Hold.Milliseconds(), 10)

// ChangeLogLen is how many entries the log of a voucher's changes keeps,
// and how many changes (and admissions) one read of a copy's changes
// takes: more, and the copy's buyers are copied whole again.
const ChangeLogLen = 1024

var (
	// changeLogLen and changeLogTTL are ChangeLogLen as scripts take it,
	// and how long the log is kept after its last entry
	// (scripts/release.lua): a copy reads the changes within its poll, and
	// one that finds the log gone copies the buyers whole again.
	changeLogLen = strconv.Itoa(ChangeLogLen)
	changeLogTTL = strconv.FormatInt((10 * time.Minute).Milliseconds(), 10)
)

// admitProbe asks whether admission is armed on the server that holds the
// voucher (ArmAdmission, fence.go), sent with a read, on the same
// connection: where it is not, the server was not checked since it came
// up, and its data may be older than the database's. On one server (or
// Sentinel's master) it is SCRIPT EXISTS of the admission script; on a
// Cluster, whose client sends a command without keys to any node, it is
// the admission script itself, run so that it admits nobody (for a
// generation no voucher has it answers "not loaded" before it writes),
// which answers NOSCRIPT where it is not loaded. See probeErr.
func (c *Client) admitProbe(k *voucherKeys) rueidis.Completed {
	sha := c.admitLua.sha
	if c.Kind() != KindCluster {
		return c.rdb.B().ScriptExists().Sha1(sha).Build()
	}
	return c.rdb.B().Evalsha().Sha1(sha).Numkeys(5).Key(k.Stock, k.Meta, k.Buyers, k.Orders, k.Cancelled).
		Arg("0", "0", k.ID, "0", "-", "0").Build()
}

// probeErr returns what admitProbe's answer says of the server:
// ErrCacheUnverified where admission is not armed.
func probeErr(res rueidis.RedisResult) error {
	const op = "read a sold-out voucher's buyers"
	unverified := fmt.Errorf("redis: %s: the server is not checked: %w", op, seckill.ErrCacheUnverified)
	arr, err := res.ToArray()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		return unverified
	}
	if err != nil {
		return redisErr(op, err)
	}
	switch len(arr) {
	case 1: // SCRIPT EXISTS
		if n, err := arr[0].AsInt64(); err == nil {
			if n == 1 {
				return nil
			}
			return unverified
		}
	case 2: // the admission script
		if code, err := arr[0].AsInt64(); err == nil && code == admitNotLoaded {
			return nil
		}
	}
	return fmt.Errorf("redis: %s: the probe of admission answered %v", op, arr)
}

// SoldOutBuyerOrder is BuyerOrder for a voucher the caller found sold
// out, read on the user's home shard (of a sharded voucher; an unsharded
// one is its own), only where admission is armed (else ErrCacheUnverified)
// and while that shard is loaded: without its stock (unloaded, being
// rebuilt, or lost with Redis's data) its slots may lack buyers who hold an
// order, and it is ErrVoucherNotLoaded. It is what soldout.Copies answers
// when no copy may, and what a service without the copies answers.
//
// The order is the one admission answers the buyer with: the one the slot
// holds, else the cancelled order that keeps them from buying again (a
// voucher without RebuyAfterCancel), so that a cancelled buyer is told of
// it as before the sell-out, not sold_out.
func (c *Client) SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error) {
	k, err := c.buyerKeys(ctx, voucherID, userID)
	if err != nil {
		return 0, err
	}
	user := strconv.FormatInt(userID, 10)
	res := c.rdb.DoMulti(ctx, c.admitProbe(k), c.rdb.B().Exists().Key(k.Stock).Build(),
		c.rdb.B().Hget().Key(k.Buyers).Field(user).Build(),
		c.rdb.B().Hget().Key(k.Cancelled).Field(user).Build())
	if err := probeErr(res[0]); err != nil {
		return 0, err
	}
	switch n, err := res[1].AsInt64(); {
	case err != nil:
		return 0, redisErr("read buyer", err)
	case n == 0:
		return 0, fmt.Errorf("redis: read buyer: voucher %d: %w", voucherID, seckill.ErrVoucherNotLoaded)
	}
	for _, r := range res[2:] {
		id, err := r.AsInt64()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return 0, redisErr("read buyer", err)
		}
		return id, nil
	}
	return 0, nil
}

// Shards is how many shards the voucher has (1: unsharded), as layoutOf
// finds them: a voucher already learnt costs one map read.
func (c *Client) Shards(ctx context.Context, voucherID int64) (int, error) {
	shards, err := c.shardsOf(ctx, voucherID)
	return len(shards), err
}

// markDrained sets drained on the meta of each of a sharded voucher's
// shards, which Borrow has just found all at 0 with nothing in flight: from
// then on a transfer that gives one of them units (transfer_give.lua, or
// transfer_settle.lua giving a refused transfer's units back) holds them
// for Hold, as release.lua holds a unit given back, and so a copy of the
// shard's buyers that found it at 0 and drained may answer alone
// (soldout.Version.Drained). One HSET per shard, in one round trip per
// node; an error is only logged: a shard left without drained is never
// trusted, and its copy answers after a poll sent after the question.
func (c *Client) markDrained(ctx context.Context, shards []*voucherKeys) {
	cmds := make(rueidis.Commands, 0, len(shards))
	for _, k := range shards {
		cmds = append(cmds, c.rdb.B().Hset().Key(k.Meta).FieldValue().FieldValue("drained", "1").Build())
	}
	for _, r := range c.rdb.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			c.logger.Debug("a sold-out shard could not be marked drained; its copies will not answer alone", "err", err)
			return
		}
	}
}

// ReadChanges runs copy_changes.lua on the shard, after the probe of
// admission, for a copy true against the version since (nil: the version
// alone). A server where admission is not armed is ErrCacheUnverified.
func (c *Client) ReadChanges(ctx context.Context, shard seckill.Shard, since *soldout.Version) (soldout.Changes, error) {
	const op = "read a sold-out voucher's changes"
	k, err := c.shardKeys(ctx, shard)
	if err != nil {
		return soldout.Changes{}, err
	}
	ver, last := "", "0-0"
	if since != nil {
		ver, last = cmp.Or(since.Ver, "0"), cmp.Or(since.Last, "0-0")
	}
	script := copyChangesScript.on(c.embedded)
	keys, args := []string{k.Stock, k.Meta, k.Buyers, k.Orders, k.Changes, k.Cancelled}, []string{ver, last, changeLogLen}
	var out []rueidis.RedisMessage
	for loaded := false; ; loaded = true {
		res := c.rdb.DoMulti(ctx, c.admitProbe(k),
			c.rdb.B().Evalsha().Sha1(script.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if err := probeErr(res[0]); err != nil {
			return soldout.Changes{}, err
		}
		out, err = res[1].ToArray()
		if re, ok := rueidis.IsRedisErr(err); !ok || !re.IsNoScript() || loaded {
			break
		}
		// Not loaded on this server yet: running it loads it; that read,
		// not sent with the probe, is not used.
		if err := script.Exec(ctx, c.rdb, keys, args).Error(); err != nil {
			return soldout.Changes{}, redisErr(op, err)
		}
	}
	if err != nil {
		return soldout.Changes{}, redisErr(op, err)
	}
	if len(out) < 8 || (len(out)-8)%2 != 0 {
		return soldout.Changes{}, fmt.Errorf("redis: %s: %d values returned", op, len(out))
	}
	var ch soldout.Changes
	v := &ch.Version
	str := func(m rueidis.RedisMessage) (string, bool) {
		s, err := m.ToString()
		return s, err == nil
	}
	v.Stock, v.HasStock = str(out[0])
	v.Gen, _ = str(out[1])
	v.Epoch, _ = str(out[2])
	v.Ver, _ = str(out[3])
	v.Last, _ = str(out[5])
	if v.Buyers, err = out[4].AsInt64(); err != nil {
		return soldout.Changes{}, fmt.Errorf("redis: %s: buyers: %w", op, err)
	}
	complete, err := out[6].AsInt64()
	if err != nil {
		return soldout.Changes{}, fmt.Errorf("redis: %s: complete: %w", op, err)
	}
	ch.Complete = complete == 1
	_, v.Drained = str(out[7])
	ch.Slots = make(map[int64]int64, (len(out)-8)/2)
	for i := 8; i < len(out); i += 2 {
		u, _ := str(out[i])
		user, err := strconv.ParseInt(u, 10, 64)
		var order int64
		if err == nil && !out[i+1].IsNil() {
			o, _ := str(out[i+1])
			order, err = strconv.ParseInt(o, 10, 64)
		}
		if err != nil {
			// Not what admission writes: leave this voucher to the slot
			// reads, whose read of such a slot is an error, not "no order".
			return soldout.Changes{}, fmt.Errorf("redis: %s: slot of %q: not a user and order id", op, u)
		}
		ch.Slots[user] = order
	}
	return ch, nil
}

// ScanBuyers reads the shard's slots whole, with HSCAN so that Redis is
// not held for long by a large hash: its buyers' orders, and its cancelled
// buyers' cancelled orders (admission answers those buyers with them),
// a buyer's order first, as admission reads them.
func (c *Client) ScanBuyers(ctx context.Context, shard seckill.Shard, size int64) (map[int64]int64, error) {
	k, err := c.shardKeys(ctx, shard)
	if err != nil {
		return nil, err
	}
	buyers := make(map[int64]int64, size)
	// The cancelled first: a buyer's slot, scanned after, wins.
	for _, key := range []string{k.Cancelled, k.Buyers} {
		var cursor uint64
		for {
			e, err := c.rdb.Do(ctx, c.rdb.B().Hscan().Key(key).Cursor(cursor).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, redisErr("scan buyers", err)
			}
			for i := 0; i+1 < len(e.Elements); i += 2 {
				user, err1 := strconv.ParseInt(e.Elements[i], 10, 64)
				order, err2 := strconv.ParseInt(e.Elements[i+1], 10, 64)
				if err1 != nil || err2 != nil {
					// Not what admission writes: leave this voucher to BuyerOrder,
					// whose read of such a slot is an error, not "no order".
					return nil, fmt.Errorf("redis: slot %q of %s: not a user and order id", e.Elements[i], key)
				}
				buyers[user] = order
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return buyers, nil
}
