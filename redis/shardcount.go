package redis

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// The scripts that count a sharded voucher's shards at one instant, and
// those that rebuild its lost shards (shardrebuild.go).
var (
	shardFreezeScript = newScript[args]("shard_freeze")
	shardThawScript   = newScript[args]("shard_thaw")
	shardResetScript  = newScript[shardResetArgs]("shard_reset")
)

// shardResetArgs are shard_reset.lua's ARGV.
type shardResetArgs struct {
	// Generation is the voucher's, Epoch the rebuild's (from
	// rebuild_begin), both in decimal.
	Generation, Epoch string
	// XGen is the rebuild's transfer generation (newXGen).
	XGen string
	// Shards is how many the voucher has, Index this one's.
	Shards, Index int
}

func (a shardResetArgs) argv() []string {
	return []string{
		a.Generation,           // ARGV[1]
		a.Epoch,                // ARGV[2]
		a.XGen,                 // ARGV[3]
		strconv.Itoa(a.Shards), // ARGV[4]
		strconv.Itoa(a.Index),  // ARGV[5]
	}
}

// countFreeze is how long CountShards holds the shards frozen at most: it
// thaws them as soon as it has read them.
const countFreeze = 5 * time.Second

// newXGen returns a new transfer generation, or a freeze's holder name:
// twenty digits, the clock's microseconds then four random ones, so that
// one made later compares larger (shard_freeze.lua) and two never match.
func newXGen() string {
	var b [8]byte
	rand.Read(b[:])
	return fmt.Sprintf("%016d%04d", time.Now().UnixMicro(), binary.BigEndian.Uint64(b[:])%10000)
}

// laterXGen reports whether transfer generation a is later than b, as
// shard_freeze.lua compares them (absent is "0").
func laterXGen(a, b string) bool {
	return len(a) > len(b) || (len(a) == len(b) && a > b)
}

// frozenShard is what shard_freeze read of one shard.
type frozenShard struct {
	// Kept says the shard holds this generation of the voucher (else it
	// holds another, or the voucher's tombstone, and was left as it is).
	Kept   bool
	Loaded bool
	Stock  int64
	Buyers int64
	XGen   string
	// Out are its transfers out not yet settled, by transfer id.
	Out map[string]transferOut
}

// transferOut is one entry of a donor's xout: n units taken for shard To.
type transferOut struct {
	To   int
	N    int64
	XGen string
}

// parseTransferOut reads an xout value: "<to index>:<n>:<unix ms>:<xgen>".
func parseTransferOut(s string) (transferOut, error) {
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return transferOut{}, fmt.Errorf("transfer %q: want to:n:ms:xgen", s)
	}
	to, err1 := strconv.Atoi(f[0])
	n, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return transferOut{}, fmt.Errorf("transfer %q: want to:n:ms:xgen", s)
	}
	return transferOut{To: to, N: n, XGen: f[3]}, nil
}

// freeze runs shard_freeze on each of the shards (holding them as holder,
// for d, and setting xgen unless it is "") and returns what it read of
// each. Shards it froze stay frozen on an error: thaw them.
func (c *Client) freeze(ctx context.Context, v *seckill.Voucher, shards []*voucherKeys, holder, xgen string, d time.Duration) ([]frozenShard, error) {
	gen := strconv.FormatInt(v.Generation, 10)
	out := make([]frozenShard, len(shards))
	for i, k := range shards {
		op := fmt.Sprintf("freeze shard %d of voucher %d", i, v.ID)
		res, err := shardFreezeScript.run(ctx, c, []string{k.Stock, k.Meta, k.Buyers, k.Xout}, args{gen, holder, xgen, ms(d)}).ToArray()
		if err != nil {
			return nil, redisErr(op, err)
		}
		if kept, _ := res[0].AsInt64(); kept == -1 {
			continue
		}
		if len(res) < 4 || len(res)%2 != 0 {
			return nil, fmt.Errorf("redis: %s: %d values returned", op, len(res))
		}
		loaded, _ := res[0].AsInt64()
		s := frozenShard{Kept: true, Loaded: loaded == 1, Out: map[string]transferOut{}}
		s.Stock, _ = res[1].AsInt64()
		s.Buyers, _ = res[2].AsInt64()
		s.XGen, _ = res[3].ToString()
		for j := 4; j < len(res); j += 2 {
			id, _ := res[j].ToString()
			val, _ := res[j+1].ToString()
			t, err := parseTransferOut(val)
			if err != nil {
				return nil, fmt.Errorf("redis: %s: %w", op, err)
			}
			s.Out[id] = t
		}
		out[i] = s
	}
	return out, nil
}

// thaw ends holder's hold on each shard (shard_thaw).
func (c *Client) thaw(ctx context.Context, voucherID int64, shards []*voucherKeys, holder string) error {
	for i, k := range shards {
		if err := shardThawScript.run(ctx, c, []string{k.Meta}, args{holder}).Error(); err != nil {
			return redisErr(fmt.Sprintf("thaw shard %d of voucher %d", i, voucherID), err)
		}
	}
	return nil
}

// inFlight returns, for each loaded shard of frozen, the units its transfers out
// took that their receivers have not received: those whose receiver
// recorded no number in its xin (none, or "x": refused, not yet given
// back), or is not loaded (lost: what it received is gone). It reads the
// receivers' xin once every shard is frozen: a receiver frozen takes no
// more, so a number there was counted in its stock.
func (c *Client) inFlight(ctx context.Context, voucherID int64, shards []*voucherKeys, frozen []frozenShard) ([]int64, error) {
	ask := make([][]string, len(shards)) // receiver -> transfer ids
	for _, s := range frozen {
		if !s.Loaded {
			continue
		}
		for id, t := range s.Out {
			if t.To >= 0 && t.To < len(shards) && frozen[t.To].Loaded {
				ask[t.To] = append(ask[t.To], id)
			}
		}
	}
	received := map[string]bool{}
	for r, ids := range ask {
		if len(ids) == 0 {
			continue
		}
		vals, err := c.rdb.Do(ctx, c.rdb.B().Hmget().Key(shards[r].Xin).Field(ids...).Build()).ToArray()
		if err != nil {
			return nil, redisErr(fmt.Sprintf("read the transfers received by shard %d of voucher %d", r, voucherID), err)
		}
		for j, m := range vals {
			s, err := m.ToString()
			if err != nil {
				continue // nil: not received
			}
			if _, err := strconv.ParseInt(s, 10, 64); err == nil {
				received[strconv.Itoa(r)+"/"+ids[j]] = true
			}
		}
	}
	out := make([]int64, len(frozen))
	for i, s := range frozen {
		if !s.Loaded {
			continue // what it gave is counted in its rebuild
		}
		for id, t := range s.Out {
			if !received[strconv.Itoa(t.To)+"/"+id] {
				out[i] += t.N
			}
		}
	}
	return out, nil
}

// CountShards counts v's shards at one instant: it freezes each (the
// transfers between them wait, admissions go on), reads its stock, buyers
// and transfers in flight, and thaws them. For a voucher of one shard it
// reads its stock and buyers, and writes nothing. The invariant reconcile
// checks is Total == v.InitialStock (docs/design/shards.md, Shards).
func (c *Client) CountShards(ctx context.Context, v *seckill.Voucher) (*seckill.ShardCounts, error) {
	shards := c.Learn(v).shards
	if len(shards) == 1 {
		return c.countUnsharded(ctx, v.ID, shards[0])
	}
	holder := newXGen()
	frozen, err := c.freeze(ctx, v, shards, holder, "", countFreeze)
	if err == nil {
		var flight []int64
		if flight, err = c.inFlight(ctx, v.ID, shards, frozen); err == nil {
			err = c.thaw(ctx, v.ID, shards, holder)
			return shardCounts(frozen, flight), err
		}
	}
	// Thawed apart from ctx, which may be what failed: else the shards
	// wait out countFreeze.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if terr := c.thaw(tctx, v.ID, shards, holder); terr != nil {
		c.logger.Warn("could not thaw a sharded voucher's shards after counting them failed; they thaw by themselves", "voucher", v.ID, "after", countFreeze.String(), "err", terr)
	}
	return nil, err
}

// shardCounts sums what freeze and inFlight read.
func shardCounts(frozen []frozenShard, flight []int64) *seckill.ShardCounts {
	out := &seckill.ShardCounts{Shards: make([]seckill.ShardCount, len(frozen)), Loaded: true}
	for i, s := range frozen {
		out.Shards[i] = seckill.ShardCount{Index: i, Loaded: s.Loaded, Stock: s.Stock, Buyers: s.Buyers, InFlight: flight[i], XGen: s.XGen}
		out.Loaded = out.Loaded && s.Loaded
		out.InFlight += flight[i]
		out.Total += s.Stock + s.Buyers + flight[i]
	}
	return out
}

// countUnsharded is CountShards of an unsharded voucher: its stock and
// buyers, read together.
func (c *Client) countUnsharded(ctx context.Context, voucherID int64, k *voucherKeys) (*seckill.ShardCounts, error) {
	res := c.rdb.DoMulti(ctx, c.rdb.B().Get().Key(k.Stock).Build(), c.rdb.B().Hlen().Key(k.Buyers).Build())
	op := fmt.Sprintf("count voucher %d", voucherID)
	s := seckill.ShardCount{Loaded: true}
	var err error
	if s.Stock, err = res[0].AsInt64(); rueidis.IsRedisNil(err) {
		s.Loaded, s.Stock = false, 0
	} else if err != nil {
		return nil, redisErr(op, err)
	}
	if s.Buyers, err = res[1].AsInt64(); err != nil {
		return nil, redisErr(op, err)
	}
	return &seckill.ShardCounts{Shards: []seckill.ShardCount{s}, Loaded: s.Loaded, Total: s.Stock + s.Buyers}, nil
}
