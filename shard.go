package seckill

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxShards bounds Voucher.Shards.
const MaxShards = 64

// A Shard names one of a voucher's shards in the cache: Index in
// [0, Voucher.ShardCount()). Each shard holds, under its own hash tag
// (Voucher.ShardTag), a part of the stock, the buyers whose home it is
// (HomeShard), their order stream and its dead letters; so one hot
// voucher's admissions spread over as many Redis masters as it has shards
// (docs/design/shards.md, Shards). An unsharded voucher is its own shard 0.
type Shard struct {
	VoucherID int64
	Index     int
}

func (s Shard) String() string {
	return fmt.Sprintf("%d/%d", s.VoucherID, s.Index)
}

// ShardCount is how many shards the voucher has: Shards, or 1 for a voucher
// made before shards (Shards 0).
func (v *Voucher) ShardCount() int {
	return max(1, v.Shards)
}

// ShardTag returns the hash tag of shard i: the one placement chose at
// creation (ShardTags), else DefaultShardTag.
func (v *Voucher) ShardTag(i int) string {
	if i < len(v.ShardTags) && v.ShardTags[i] != "" {
		return v.ShardTags[i]
	}
	return DefaultShardTag(v.ID, v.ShardCount(), i)
}

// DefaultShardTag is the hash tag of shard i of a voucher with shards
// shards when placement chose none: "v<id>" for an unsharded voucher, the
// tag it always had; "v<id>.<i>" for a sharded one.
func DefaultShardTag(voucherID int64, shards, i int) string {
	id := strconv.FormatInt(voucherID, 10)
	if shards <= 1 {
		return "v" + id
	}
	return "v" + id + "." + strconv.Itoa(i)
}

// HomeShard is the shard of a voucher with shards shards on which the
// buyer is admitted, and only there: the buyer check and the stock taken
// stay one script on one slot. It is a fixed hash of the buyer (never
// change it: the cache's buyers and the rebuild depend on it), mixed so
// that sequential user ids spread evenly.
func HomeShard(userID int64, shards int) int {
	if shards <= 1 {
		return 0
	}
	// splitmix64's finaliser.
	z := uint64(userID) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(shards))
}

// ShardStock is shard i's part of stock split evenly over shards shards:
// the first stock%shards shards take one unit more.
func ShardStock(stock int64, shards, i int) int64 {
	if shards <= 1 {
		return stock
	}
	n := stock / int64(shards)
	if int64(i) < stock%int64(shards) {
		n++
	}
	return n
}

// JoinShardTags returns a voucher's shard tags as a store keeps them, in
// one column: joined by ',', which no tag may hold.
func JoinShardTags(tags []string) (string, error) {
	for _, t := range tags {
		if strings.Contains(t, ",") {
			return "", Errorf(ErrInvalidArgument, "shard tag %q holds a ','", t)
		}
	}
	return strings.Join(tags, ","), nil
}

// SplitShardTags returns the shard tags a store keeps as JoinShardTags
// made them; nil when there are none (placement chose none, or a voucher
// made before shards).
func SplitShardTags(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Borrowed is what a borrow of stock for a home shard found or did
// (redisledger.Cache.Borrow).
type Borrowed struct {
	// Moved is how many units the home shard has gained: moved there by
	// the borrow, or found there already (another borrower's).
	Moved int64
	// SoldOut says that every shard of the voucher is at 0 and no stock is
	// in flight between them: the voucher is sold out.
	SoldOut bool
}
