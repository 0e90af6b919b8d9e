package redis

import (
	"strconv"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/cow"
)

// keyspace builds every key this package touches. All keys of one voucher
// share the hash tag {v<id>}, all keys of one phone share {<phone>}, and the
// node leases live under {nodes}, so each script's keys live in one Cluster
// slot (docs/design/redis.md, Redis keys).
type keyspace struct {
	prefix string
}

// voucherKeys are the keys of one voucher.
type voucherKeys struct {
	Stock string // string: units left to admit; absent while not loaded
	// Meta is a hash: begin and end of the sale window (unix ms); gen, the
	// voucher's generation (seckill.Voucher.Generation; absent means 0);
	// epoch, bumped by each unload so that a rebuild in flight stops.
	// Once the voucher is dropped past its retention it is a tombstone
	// (dropped, gen, epoch) for a while (see DropVoucher).
	Meta   string
	Buyers string // hash: user id -> order id
	// Cancelled is a hash: user id -> the id of the buyer's order that was
	// cancelled and whose unit went back (return_unit.lua), of a voucher
	// whose buyers may not buy again: admission answers such a buyer with
	// that order. It lives and dies with Buyers.
	Cancelled string
	// Returned is a set: the ids of the orders of a voucher whose buyers
	// may buy again that were cancelled and whose unit went back
	// (return_unit.lua), or that a rebuild read cancelled from the
	// database. Admission never reads it; the rebuild (stage_buyers.lua,
	// stage_queued.lua) and count_persisted.lua do, so that such an order
	// never holds a unit again. One entry per cancelled order; it lives and
	// dies with Cancelled.
	Returned string
	Orders   string // stream: admitted orders, read by the workers' group
	DLQ      string // stream: order messages that could not be persisted
	// Changes is a list: "ver:user,…", the buyers whose slots each bump of
	// meta's ver changed, for the copies of the buyers (soldout.go).
	Changes string
	// Xout is a hash, of a shard of a sharded voucher: transfer id -> the
	// transfer of stock taken from this shard and not yet settled
	// (transfer.go).
	Xout string
	// Xin is a hash, of a shard of a sharded voucher: transfer id -> what
	// this shard did with it (received it, or refused it for good).
	Xin string
	// ID is the voucher id in decimal, as scripts take it.
	ID string
	// Tag is the hash tag, without its braces.
	Tag string
}

// voucher returns the keys of an unsharded voucher (or, which is the same,
// its shard 0): the hash tag {v<id>}.
func (k keyspace) voucher(id int64) voucherKeys {
	return k.shard(id, seckill.DefaultShardTag(id, 1, 0))
}

// shard returns the keys of one shard of a voucher: those of the
// voucher's hash tag tag (seckill.Voucher.ShardTag).
func (k keyspace) shard(id int64, tag string) voucherKeys {
	t := k.prefix + ":{" + tag + "}:"
	return voucherKeys{
		ID:        strconv.FormatInt(id, 10),
		Tag:       tag,
		Stock:     t + "stock",
		Meta:      t + "meta",
		Buyers:    t + "buyers",
		Cancelled: t + "cancelled",
		Returned:  t + "returned",
		Orders:    t + "orders",
		DLQ:       t + "dlq",
		Changes:   t + "changes",
		Xout:      t + "xout",
		Xin:       t + "xin",
	}
}

// challenge is the key that marks a solved challenge of a voucher as
// used (string, with the challenge's expiry as its TTL: SpendChallenge):
// under the hash tag tag of the voucher's shard (seckill.Voucher.ShardTag)
// that admits the buyer, so that it lives in the slot, and on the master,
// of the admission it guards. hash is the challenge's lowercase hex.
func (k keyspace) challenge(tag, hash string) string {
	return k.prefix + ":{" + tag + "}:challenge:" + hash
}

// control is the key of a voucher's control lock (string: the token of
// the instance holding it; LockControl): an operator's pause, resume, end
// or addition of stock holds it from its database write to its last write
// in Redis, so that two of them on two instances do not interleave. Under
// the voucher's own hash tag (shard 0's).
func (k keyspace) control(id int64) string {
	return k.prefix + ":{" + seckill.DefaultShardTag(id, 1, 0) + "}:control"
}

// hotKeys keeps the keys of the vouchers admitted to, so that each buy
// does not build (and allocate) them again. A sale has few vouchers; past
// maxHotKeys it starts over. Its zero value is empty and ready.
type hotKeys = cow.Map[int64, *voucherKeys]

// maxHotKeys bounds hotKeys.
const maxHotKeys = 1024

// hotVoucher returns the keys of the voucher, as keyspace.voucher does.
func (c *Client) hotVoucher(id int64) *voucherKeys {
	if k, ok := c.hot.Load(id); ok {
		return k
	}
	k := c.keys.voucher(id)
	c.hot.Update(func(next map[int64]*voucherKeys) bool {
		if len(next) >= maxHotKeys {
			clear(next)
		}
		next[id] = &k
		return true
	})
	return &k
}

// loginKeys are the keys of one phone's login code.
type loginKeys struct {
	Code     string
	Tries    string
	Cooldown string
}

func (k keyspace) login(phone string) loginKeys {
	tag := k.prefix + ":login:{" + phone + "}:"
	return loginKeys{
		Code:     tag + "code",
		Tries:    tag + "tries",
		Cooldown: tag + "cooldown",
	}
}

// guessKeys are the counts of login attempts that bound guessing codes
// (spend_guess.lua). They share the hash tag {login}, so that one script
// counts a client's and everyone's together; the login routes' rate limits
// keep that one slot's traffic small.
type guessKeys struct {
	Global string // string: attempts counted this window, all clients
	Client string // string: the same, of one client address
}

func (k keyspace) guesses(client string) guessKeys {
	tag := k.prefix + ":{login}:guesses"
	return guessKeys{Global: tag, Client: tag + ":" + client}
}

// fenceKeys are the keys that record which Redis server the data was last
// checked against (see fence.go).
type fenceKeys struct {
	Fence string // hash: identity -> the server identity the data was checked on
	Lock  string // string: the token of the instance checking it now
	// Rebuilds is a string: the token of the instance rebuilding the
	// vouchers a check unloaded.
	Rebuilds string
}

func (k keyspace) fence() fenceKeys {
	tag := k.prefix + ":{fence}:"
	return fenceKeys{Fence: tag + "identity", Lock: tag + "lock", Rebuilds: tag + "rebuilds"}
}

// nodes is the hash of node-id leases for order ids.
func (k keyspace) nodes() string { return k.prefix + ":{nodes}:leases" }
