package redis

import "strconv"

// keyspace builds every key this package touches. All keys of one voucher
// share the hash tag {v<id>}, all keys of one phone share {<phone>}, and the
// node leases live under {nodes}, so each script's keys live in one Cluster
// slot (docs/design.md, Redis keys).
type keyspace struct {
	prefix string
}

// voucherKeys are the keys of one voucher.
type voucherKeys struct {
	Stock string // string: units left to admit; absent while not loaded
	// Meta is a hash: begin and end of the sale window (unix ms); gen, the
	// voucher's generation (seckill.Voucher.Generation; absent means 0);
	// epoch, bumped by each unload so that a rebuild in flight stops.
	Meta   string
	Buyers string // hash: user id -> order id
	Orders string // stream: admitted orders, read by the workers' group
	DLQ    string // stream: order messages that could not be persisted
}

func (k keyspace) voucher(id int64) voucherKeys {
	tag := k.prefix + ":{v" + strconv.FormatInt(id, 10) + "}:"
	return voucherKeys{
		Stock:  tag + "stock",
		Meta:   tag + "meta",
		Buyers: tag + "buyers",
		Orders: tag + "orders",
		DLQ:    tag + "dlq",
	}
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

// fenceKeys are the keys that record which Redis server the data was last
// checked against (see fence.go).
type fenceKeys struct {
	Fence string // hash: identity -> the server identity the data was checked on
	Lock  string // string: the token of the instance checking it now
}

func (k keyspace) fence() fenceKeys {
	tag := k.prefix + ":{fence}:"
	return fenceKeys{Fence: tag + "identity", Lock: tag + "lock"}
}

// nodes is the hash of node-id leases for order ids.
func (k keyspace) nodes() string { return k.prefix + ":{nodes}:leases" }
