package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// The transfer scripts: stock moves between two shards of a sharded
// voucher in three steps, each one single-slot script keyed by the
// transfer's id, each safe to run again (docs/design/shards.md, Shards).
var (
	transferTakeScript   = newScript[transferTakeArgs]("transfer_take")
	transferGiveScript   = newScript[transferGiveArgs]("transfer_give")
	transferSettleScript = newScript[args]("transfer_settle")
)

// transferScripts are a deployment's transfer scripts. Like the admission
// script they run by SHA alone and are loaded only by ArmAdmission, where
// the server was checked: a transfer on a master that failed over to a
// replica without the last admissions, or restarted older, would move
// stock those admissions took, and it would be sold twice; on such a
// master it answers ErrCacheUnverified, as admission does, until the
// check (TestTransfersWaitForTheFence).
type transferScripts struct{ take, give, settle loaded }

// armed are the scripts ArmAdmission loads: admission's, then the
// transfers'.
func (c *Client) armed() []string {
	return []string{c.admitLua.src, c.transferLua.take.src, c.transferLua.give.src, c.transferLua.settle.src}
}

// runArmed runs one of the armed scripts by SHA alone; NOSCRIPT is
// ErrCacheUnverified: the server was not checked since it lost its
// scripts.
func (c *Client) runArmed(ctx context.Context, l loaded, op string, keys []string, a argv) (int64, error) {
	cmd := c.rdb.B().Evalsha().Sha1(l.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(a.argv()...).Build()
	n, err := c.rdb.Do(ctx, cmd).AsInt64()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		return 0, fmt.Errorf("redis: %s: %w", op, seckill.ErrCacheUnverified)
	}
	if err != nil {
		return 0, redisErr(op, err)
	}
	return n, nil
}

// The transfer scripts' answers below zero.
const (
	// xRefused: the receiver refused the transfer for good (give); the
	// donor is not loaded for the generation (take).
	xRefused = -1
	// xFrozen: a rebuild is counting the shards; nothing was done.
	xFrozen = -2
	// xStale: the shard's transfer generation is not the transfer's
	// (take), or the receiver cannot take it and it must be cancelled
	// (give).
	xStale = -3
)

// StaleTransfer is how old a transfer not yet settled must be for anyone
// who finds it to finish it (FinishTransfers, Borrow): younger, its
// borrower is most likely still at it.
const StaleTransfer = time.Second

// borrowRounds bounds how many times Borrow reads the shards again after
// a transfer that moved nothing (its donor emptied meanwhile) or after it
// finished the transfers in flight.
const borrowRounds = 4

// transferTakeArgs are transfer_take.lua's ARGV.
type transferTakeArgs struct {
	ID string
	// To is the receiver's shard index.
	To int
	// N is how many units to take at most.
	N int64
	// Generation is the voucher's, XGen the transfer generation the caller
	// read on both shards, both in decimal as meta holds them.
	Generation, XGen string
}

func (a transferTakeArgs) argv() []string {
	return []string{
		a.ID,                       // ARGV[1]
		strconv.Itoa(a.To),         // ARGV[2]
		strconv.FormatInt(a.N, 10), // ARGV[3]
		a.Generation,               // ARGV[4]
		a.XGen,                     // ARGV[5]
	}
}

// transferGiveArgs are transfer_give.lua's ARGV.
type transferGiveArgs struct {
	ID string
	// N is how many units the donor took.
	N int64
	// Generation is the voucher's, XGen the transfer's transfer
	// generation.
	Generation, XGen string
	// Cancel refuses the transfer for good instead of receiving it.
	Cancel bool
}

func (a transferGiveArgs) argv() []string {
	mode := "give"
	if a.Cancel {
		mode = "cancel"
	}
	return []string{
		a.ID,                       // ARGV[1]
		strconv.FormatInt(a.N, 10), // ARGV[2]
		a.Generation,               // ARGV[3]
		a.XGen,                     // ARGV[4]
		mode,                       // ARGV[5]
		holdMillis,                 // ARGV[6]: units given to a drained shard are held
	}
}

// shardState is what Borrow reads of one shard.
type shardState struct {
	loaded bool
	stock  int64
	// gen and xgen are the voucher's generation and the transfer
	// generation as meta holds them ("0" when absent).
	gen, xgen string
	// frozenUntil is meta's xfrozen, unix ms (0: none).
	frozenUntil int64
	// heldUntil is meta's held, unix ms (0: none): units given back to it
	// are admitted to no one before then (release.lua).
	heldUntil int64
	// xout and xin are how many transfers the shard holds out (not
	// settled) and has answered in.
	xout, xin int64
	// buyers is how many buyers the shard holds: its admissions so far,
	// the demand borrowBatch sizes a batch to.
	buyers int64
}

// frozen reports whether a rebuild counts the shard at now (unix ms).
func (s shardState) frozen(now int64) bool { return now < s.frozenUntil }

// readShards reads every shard's state in one round trip per node.
func (c *Client) readShards(ctx context.Context, shards []*voucherKeys) ([]shardState, error) {
	const per = 5
	cmds := make(rueidis.Commands, 0, per*len(shards))
	for _, k := range shards {
		cmds = append(cmds,
			c.rdb.B().Get().Key(k.Stock).Build(),
			c.rdb.B().Hmget().Key(k.Meta).Field("begin", "end", "gen", "xgen", "xfrozen", "held").Build(),
			c.rdb.B().Hlen().Key(k.Xout).Build(),
			c.rdb.B().Hlen().Key(k.Xin).Build(),
			c.rdb.B().Hlen().Key(k.Buyers).Build())
	}
	res := c.rdb.DoMulti(ctx, cmds...)
	out := make([]shardState, len(shards))
	for i := range shards {
		r := res[per*i : per*i+per]
		s := &out[i]
		stock, err := r[0].AsInt64()
		switch {
		case rueidis.IsRedisNil(err):
		case err != nil:
			return nil, redisErr("read the shards", err)
		default:
			s.stock, s.loaded = stock, true
		}
		meta, err := r[1].ToArray()
		if err != nil || len(meta) != 6 {
			return nil, redisErr("read the shards", fmt.Errorf("meta: %v %w", meta, err))
		}
		field := func(j int) (string, bool) {
			v, err := meta[j].ToString()
			return v, err == nil
		}
		_, begin := field(0)
		_, end := field(1)
		s.loaded = s.loaded && begin && end
		s.gen, _ = field(2)
		s.xgen, _ = field(3)
		if s.gen == "" {
			s.gen = "0"
		}
		if s.xgen == "" {
			s.xgen = "0"
		}
		if f, ok := field(4); ok {
			s.frozenUntil, _ = strconv.ParseInt(f, 10, 64)
		}
		if f, ok := field(5); ok {
			s.heldUntil, _ = strconv.ParseInt(f, 10, 64)
		}
		if s.xout, err = r[2].AsInt64(); err != nil {
			return nil, redisErr("read the shards", err)
		}
		if s.xin, err = r[3].AsInt64(); err != nil {
			return nil, redisErr("read the shards", err)
		}
		if s.buyers, err = r[4].AsInt64(); err != nil {
			return nil, redisErr("read the shards", err)
		}
	}
	return out, nil
}

// A transfer is one xout entry: n units taken from shard from for shard
// to, at (unix ms), under the transfer generation xgen.
type transfer struct {
	id       string
	from, to int
	n        int64
	at       int64
	xgen     string
}

// parseTransfer reads the xout entry id -> v of shard from.
func parseTransfer(from int, id, v string) (transfer, error) {
	f := strings.SplitN(v, ":", 4)
	if len(f) != 4 {
		return transfer{}, fmt.Errorf("redis: transfer %s: %q is not to:n:at:xgen", id, v)
	}
	t := transfer{id: id, from: from, xgen: f[3]}
	var err1, err2, err3 error
	t.to, err1 = strconv.Atoi(f[0])
	t.n, err2 = strconv.ParseInt(f[1], 10, 64)
	t.at, err3 = strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return transfer{}, fmt.Errorf("redis: transfer %s: %q is not to:n:at:xgen", id, v)
	}
	return t, nil
}

// readTransfers reads the transfers out of the shards at the indexes of
// which, and the voucher generation each donor holds, in one round trip per
// node.
func (c *Client) readTransfers(ctx context.Context, shards []*voucherKeys, which []int) ([]transfer, map[int]string, error) {
	cmds := make(rueidis.Commands, 0, 2*len(which))
	for _, i := range which {
		cmds = append(cmds, c.rdb.B().Hgetall().Key(shards[i].Xout).Build(),
			c.rdb.B().Hget().Key(shards[i].Meta).Field("gen").Build())
	}
	res := c.rdb.DoMulti(ctx, cmds...)
	var out []transfer
	gens := make(map[int]string, len(which))
	for j, i := range which {
		m, err := res[2*j].AsStrMap()
		if err != nil {
			return nil, nil, redisErr("read the transfers", err)
		}
		gen, err := res[2*j+1].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, nil, redisErr("read the transfers", err)
		}
		gens[i] = cmp.Or(gen, "0")
		for id, v := range m {
			t, err := parseTransfer(i, id, v)
			if err != nil {
				c.logger.Error("a transfer record cannot be read; left as it is", "err", err)
				continue
			}
			out = append(out, t)
		}
	}
	return out, gens, nil
}

// finish finishes transfer t of a voucher of generation gen: the receiver
// receives it, or refuses it (it cannot take it: it was lost, or a rebuild
// reset the transfers), then the donor settles it. It reports whether t
// is settled and whether the receiver received it; a frozen shard leaves
// it for later (done false, no error).
func (c *Client) finish(ctx context.Context, shards []*voucherKeys, t transfer, gen string) (done, received bool, err error) {
	if t.to < 0 || t.to >= len(shards) || t.to == t.from {
		// Not a shard of this layout: nothing can receive it.
		t.to = -1
	}
	answer := int64(xStale)
	if t.to >= 0 {
		// The take must be on the donor's replicas before the receiver
		// adds the units: a failover to a replica without it would give
		// the units back to the donor while the receiver sells them too.
		// A take the donor's master no longer holds is refused instead:
		// lost with a failover (the donor has the units again), or
		// settled by another finisher (the receiver's answer stands).
		gone := false
		if err := c.takeReplicated(ctx, shards[t.from], t.id); errors.Is(err, errTakeGone) {
			gone = true
		} else if err != nil {
			return false, false, err
		}
		r := shards[t.to]
		give := transferGiveArgs{ID: t.id, N: t.n, Generation: gen, XGen: t.xgen, Cancel: gone}
		answer, err = c.runArmed(ctx, c.transferLua.give, "give transfer "+t.id, []string{r.Stock, r.Meta, r.Xin}, give)
		if err != nil {
			return false, false, err
		}
		if answer == xStale && !gone {
			give.Cancel = true
			answer, err = c.runArmed(ctx, c.transferLua.give, "cancel transfer "+t.id, []string{r.Stock, r.Meta, r.Xin}, give)
			if err != nil {
				return false, false, err
			}
		}
		if answer == xFrozen {
			return false, false, nil
		}
	}
	received = answer > 0
	d := shards[t.from]
	n, err := c.runArmed(ctx, c.transferLua.settle, "settle transfer "+t.id, []string{d.Stock, d.Meta, d.Xout}, args{t.id, flag(received), holdMillis})
	if err != nil {
		return false, false, err
	}
	return n != xFrozen, received, nil
}

// FinishTransfers finishes the voucher's transfers begun more than
// olderThan ago and not settled (a borrower stopped half-way: a crash, a
// lost connection, a failover): each is received, or refused and its units
// given back to its donor, then settled. It returns how many it finished;
// one it must leave (a rebuild is counting the shards) stays for the next
// call. An unsharded voucher has none.
func (c *Client) FinishTransfers(ctx context.Context, voucherID int64, olderThan time.Duration) (int, error) {
	shards, err := c.shardsOf(ctx, voucherID)
	if err != nil || len(shards) <= 1 {
		return 0, err
	}
	n, _, err := c.finishTransfers(ctx, shards, allShards(len(shards)), olderThan, false)
	return n, err
}

func allShards(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// finishTransfers finishes the transfers out of the shards at the indexes
// of which that are older than olderThan. One that fails (its take not yet
// on the donor's replicas, a node that does not answer) is left for later
// and the others are finished all the same: one lagging donor must not
// stall the voucher's every borrow. With skipLagging (a borrow's) it does
// not try those of a donor that lags (isLagging): each would wait
// WaitTimeout for replicas that just did not answer. It returns how many
// it finished, the donors of those that failed or were skipped, and the
// first failure.
func (c *Client) finishTransfers(ctx context.Context, shards []*voucherKeys, which []int, olderThan time.Duration, skipLagging bool) (int, map[int]bool, error) {
	ts, gens, err := c.readTransfers(ctx, shards, which)
	if err != nil {
		return 0, nil, err
	}
	now := time.Now()
	before := now.Add(-olderThan).UnixMilli()
	finished := 0
	var failed map[int]bool
	var first error
	for _, t := range ts {
		if olderThan > 0 && t.at > before {
			continue
		}
		var done bool
		if skipLagging && c.isLagging(shards[t.from], now.UnixMilli()) {
			err = fmt.Errorf("redis: transfer %s: its donor's replicas did not acknowledge a take of late: %w", t.id, &seckill.Error{Kind: seckill.ErrUnavailable,
				Message: "stock is on its way to your shard; try again", RetryAfter: time.Second})
		} else {
			done, _, err = c.finish(ctx, shards, t, gens[t.from])
		}
		if err != nil {
			if failed == nil {
				failed, first = map[int]bool{}, err
			}
			failed[t.from] = true
			continue
		}
		if done {
			finished++
		}
	}
	return finished, failed, first
}

// Borrow moves stock to the home shard of a sharded voucher, which an
// admission found sold out, from the shard that has the most: one
// transfer (take, give, settle), sized to the demand (borrowBatch). It
// first finishes the transfers it finds in flight that are stale, or all of
// them when no shard has stock to give.
//
// It answers Moved > 0 when the home shard has stock now (moved there, or
// found there); SoldOut when every shard's stock is 0 and no transfer is
// in flight, as two reads in a row saw with no transfer received in
// between (a unit on its way between two shards is not missed); else
// neither, for the caller to answer "try again": a rebuild is counting the
// shards, or the shards' transfer generations differ (a rebuild is not
// done), or the stock moved away meanwhile. A shard not loaded, none
// other having stock, is ErrVoucherNotLoaded: it must be rebuilt.
func (c *Client) Borrow(ctx context.Context, voucherID int64, home int) (seckill.Borrowed, error) {
	shards, err := c.shardsOf(ctx, voucherID)
	if err != nil {
		return seckill.Borrowed{}, err
	}
	if len(shards) <= 1 || home < 0 || home >= len(shards) {
		return seckill.Borrowed{}, fmt.Errorf("redis: voucher %d has no shard %d here: %w", voucherID, home, seckill.ErrVoucherNotLoaded)
	}
	var seen []shardState // the read before, all shards empty
	for round := 0; round < borrowRounds; round++ {
		st, err := c.readShards(ctx, shards)
		if err != nil {
			return seckill.Borrowed{}, err
		}
		h := st[home]
		if !h.loaded {
			return seckill.Borrowed{}, fmt.Errorf("redis: voucher %d shard %d: %w", voucherID, home, seckill.ErrVoucherNotLoaded)
		}
		if h.stock > 0 {
			return seckill.Borrowed{Moved: h.stock}, nil
		}
		now := time.Now().UnixMilli()
		total, busy, lost := int64(0), false, false
		var out, donors []int
		for i, s := range st {
			if s.xout > 0 {
				out = append(out, i)
			}
			if !s.loaded {
				lost = true
				continue
			}
			total += max(s.stock, 0)
			if i == home || s.stock <= 0 {
				continue
			}
			// Units on hold (given back after a sell-out) stay where they
			// are until it ends: moved, they would be held again on a
			// drained receiver, and under demand hop from shard to shard.
			if s.gen != h.gen || s.xgen != h.xgen || s.frozen(now) || h.frozen(now) || s.heldUntil > now || c.isLagging(shards[i], now) {
				busy = true
				continue
			}
			donors = append(donors, i)
		}
		if len(out) > 0 {
			// Stale transfers always; all of them when nothing else is
			// there to take. A donor whose transfer could not be finished
			// (its take not on its replicas yet) gives nothing more now:
			// another batch would only wait beside the first.
			olderThan := StaleTransfer
			if len(donors) == 0 {
				olderThan = 0
			}
			_, failed, err := c.finishTransfers(ctx, shards, out, olderThan, true)
			donors = slices.DeleteFunc(donors, func(i int) bool { return failed[i] })
			if err != nil && len(donors) == 0 {
				return seckill.Borrowed{}, err
			}
			if len(donors) == 0 {
				seen = nil
				continue
			}
		}
		if len(donors) == 0 {
			switch {
			case lost:
				return seckill.Borrowed{}, fmt.Errorf("redis: voucher %d: a shard is not loaded: %w", voucherID, seckill.ErrVoucherNotLoaded)
			case busy || total > 0:
				return seckill.Borrowed{}, nil
			case seen != nil && sameIn(seen, st):
				c.markDrained(ctx, shards)
				return seckill.Borrowed{SoldOut: true}, nil
			}
			seen = st
			continue
		}
		seen = nil
		donor := slices.MaxFunc(donors, func(a, b int) int { return cmp.Compare(st[a].stock, st[b].stock) })
		m, err := c.move(ctx, shards, donor, home, borrowBatch(st, home, donor, total), h.gen, h.xgen)
		if err != nil || m > 0 {
			return seckill.Borrowed{Moved: m}, err
		}
	}
	return seckill.Borrowed{}, nil
}

// sameIn reports whether no shard received or refused a transfer between
// two reads: each holds as many answers in (xin) as before.
func sameIn(a, b []shardState) bool {
	for i := range a {
		if a[i].xin != b[i].xin {
			return false
		}
	}
	return true
}

// borrowBatch is how many units the home shard borrows from the donor,
// of total left on all the shards st: sized to the demand, the home
// shard's share of the voucher's admissions so far (its buyers among all
// the shards' buyers) of what is left, so that it runs dry about when the
// others do; smoothed by one buyer a shard, so that with no admissions
// yet, or the buyers spread evenly, it is a fair share, ceil(total/K).
// Near the end (total <= 2K) it is all the donor has, so that the last
// units gather where buyers are asking rather than trickle one per
// transfer. Never more than the donor has, never less than one.
func borrowBatch(st []shardState, home, donor int, total int64) int64 {
	k := int64(len(st))
	if total <= 2*k {
		return max(st[donor].stock, 1)
	}
	var all int64
	for _, s := range st {
		all += max(s.buyers, 0)
	}
	share := max(st[home].buyers, 0) + 1
	n := (total*share + all + k - 1) / (all + k) // ceil(total·share/(all+K))
	return max(min(n, st[donor].stock), 1)
}

// isLagging reports whether a borrow at now (unix ms) should take nothing
// from the shard d: a take from it could not be confirmed on its replicas
// less than StaleTransfer ago.
func (c *Client) isLagging(d *voucherKeys, now int64) bool {
	until, ok := c.lagging.Load(d.Meta)
	if !ok {
		return false
	}
	if until.(int64) > now {
		return true
	}
	c.lagging.CompareAndDelete(d.Meta, until)
	return false
}

// move runs one transfer of up to n units from shard from to shard to,
// under a new random id, and returns how many units to received.
func (c *Client) move(ctx context.Context, shards []*voucherKeys, from, to int, n int64, gen, xgen string) (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("redis: transfer id: %w", err)
	}
	t := transfer{id: hex.EncodeToString(b[:]), from: from, to: to, xgen: xgen}
	d := shards[from]
	m, err := c.runArmed(ctx, c.transferLua.take, "take transfer "+t.id, []string{d.Stock, d.Meta, d.Xout},
		transferTakeArgs{ID: t.id, To: to, N: n, Generation: gen, XGen: xgen})
	if err != nil || m <= 0 {
		// An error: the take may have run; the transfer, if recorded, is
		// finished by whoever finds it stale.
		return 0, err
	}
	t.n = m
	// Received but not settled (the donor frozen meanwhile): the units are
	// the home shard's all the same; the settle is left to a finisher.
	_, received, err := c.finish(ctx, shards, t, gen)
	if err != nil || !received {
		return 0, err
	}
	return m, nil
}

// takeReplicated makes sure, when admissions wait for replicas
// (Config.WaitReplicas), that the donor's replicas have the take of
// transfer id before it is given: WAIT covers the writes of its own
// connection only, so it writes on the donor's slot first (meta xwait, a
// count nothing reads) on a connection of its own, checks there that the
// master holds the take (errTakeGone if not: a failover lost it, or it was
// settled), then waits; the replication stream is in order, so the take,
// made before, is covered too. Too few acknowledgements: the transfer is
// left in the donor's xout for a finisher to give once they come
// (FinishTransfers), the borrower answers unavailable, and for
// StaleTransfer no borrow takes from that donor (lagging). Without
// WaitReplicas it does nothing: admissions themselves are not waited for
// then (docs/guarantees.md).
func (c *Client) takeReplicated(ctx context.Context, d *voucherKeys, id string) error {
	if c.waitReplicas <= 0 {
		return nil
	}
	var held bool
	var waited error
	err := c.confirm.Dedicated(func(dc rueidis.DedicatedClient) error {
		res := dc.DoMulti(ctx,
			dc.B().Hincrby().Key(d.Meta).Field("xwait").Increment(1).Build(),
			dc.B().Hexists().Key(d.Xout).Field(id).Build())
		if err := res[0].Error(); err != nil {
			return err
		}
		var err error
		if held, err = res[1].AsBool(); err != nil || !held {
			return err
		}
		waited = c.waitOn(ctx, dc)
		return nil
	})
	if err == nil && !held {
		return fmt.Errorf("redis: transfer %s: %w", id, errTakeGone)
	}
	if err == nil {
		err = waited
	}
	if err != nil {
		c.lagging.Store(d.Meta, time.Now().Add(StaleTransfer).UnixMilli())
		return fmt.Errorf("redis: transfer %s: the take is not on enough replicas yet: %w (%w)", id, &seckill.Error{Kind: seckill.ErrUnavailable,
			Message: "stock is on its way to your shard; try again", RetryAfter: time.Second}, err)
	}
	return nil
}

// errTakeGone: the donor's master holds no record of the transfer's take
// (takeReplicated): settled by another finisher, or lost with a failover
// to a replica that never had it, whose donor holds the units again.
// Either way the receiver must not add them: the finisher cancels it, and
// a receiver that received it already answers so.
var errTakeGone = errors.New("the take is no longer on the donor")
