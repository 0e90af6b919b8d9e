package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxPlacementTries bounds the search for a tag whose slot a master
// serves: a master serving a third of the slots is found in a few tries,
// one serving a single slot in about 16,384.
const maxPlacementTries = 1 << 20

// PlaceShards chooses the hash tags of the shards of a voucher about to be
// created with generation generation, so that they land on distinct
// masters of a Cluster (evenly when there are more shards than masters):
// shard i goes to the i-th master by address, round-robin, under the tag
// "g<generation in base 36>.<i>.<n>" with the smallest n whose slot that
// master serves. The tags cannot hold the voucher's id, which the database
// gives only when the row is inserted, with them. Off a Cluster there is
// one master: nil, nil (the shards keep their default tags).
//
// The tags are where the shards live for good; a slot moved since (a
// reshard) takes its shard along, and the shard works there the same.
func (c *Client) PlaceShards(ctx context.Context, generation int64, shards int) ([]string, error) {
	if shards <= 1 || c.Kind() != KindCluster {
		return nil, nil
	}
	topo, err := c.Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: place %d shards: %w", shards, err)
	}
	masters := slices.Clone(topo.Masters)
	masters = slices.DeleteFunc(masters, func(m Shard) bool { return len(m.Slots) == 0 })
	if len(masters) == 0 {
		return nil, fmt.Errorf("redis: place %d shards: the Cluster has no master serving slots", shards)
	}
	slices.SortFunc(masters, func(a, b Shard) int { return strings.Compare(a.Addr, b.Addr) })
	gen := "g" + strconv.FormatInt(generation, 36) + "."
	tags := make([]string, shards)
	for i := range tags {
		m := masters[i%len(masters)]
		prefix := gen + strconv.Itoa(i) + "."
		for n := 0; ; n++ {
			if n == maxPlacementTries {
				return nil, fmt.Errorf("redis: place shard %d on %s: no tag found in %d tries", i, m.Addr, n)
			}
			tag := prefix + strconv.Itoa(n)
			if serves(m, keySlot("{"+tag+"}")) {
				tags[i] = tag
				break
			}
		}
	}
	return tags, nil
}

// serves reports whether master m serves slot.
func serves(m Shard, slot int) bool {
	for _, r := range m.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}
