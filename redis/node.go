package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The node leases of order ids (package orderid keeps one leased: see
// orderid.Lease). These methods implement orderid.LeaseStore, one per
// script; they are the Redis I/O of the lease, its loop is orderid's.

// AcquireNode leases a free node id (node_acquire.lua): see
// orderid.LeaseStore. The leases record the server they are written on, so
// that leases found on another server are new (docs/design/orderids.md, Order ids).
func (c *Client) AcquireNode(ctx context.Context, token string, ttl time.Duration, first, count int) (node int, lastUnixMs int64, age time.Duration, err error) {
	res, err := nodeAcquireScript.run(ctx, c, []string{c.keys.nodes()},
		nodeAcquireArgs{Token: token, TTL: ttl, First: first, Count: count, Server: c.nodeServer()}).ToArray()
	if err != nil {
		return 0, 0, 0, redisErr("take a node id", err)
	}
	n, _ := res[0].AsInt64()
	if n < 0 {
		return 0, 0, 0, errors.New("redis: every node id is leased: too many instances")
	}
	nums := make([]int64, 3)
	for i := range nums {
		s, _ := res[i+1].ToString()
		if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("redis: take a node id: value %q: %w", s, err)
		}
	}
	last, epoch, now := nums[0], nums[1], nums[2]
	return int(n), last, time.Duration(now-epoch) * time.Millisecond, nil
}

// RenewNode extends a node lease (node_renew.lua): see orderid.LeaseStore.
func (c *Client) RenewNode(ctx context.Context, node int, token string, ttl time.Duration, lastUnixMs int64, recent bool) (bool, error) {
	n, err := nodeRenewScript.runInt(ctx, c, "renew node lease", []string{c.keys.nodes()},
		nodeRenewArgs{Node: node, Token: token, TTL: ttl, LastUnixMs: lastUnixMs, Recent: recent})
	return n == 1, err
}

// ReleaseNode gives a node id back (node_release.lua): see
// orderid.LeaseStore.
func (c *Client) ReleaseNode(ctx context.Context, node int, token string, lastUnixMs int64) error {
	err := nodeReleaseScript.run(ctx, c, []string{c.keys.nodes()},
		args{strconv.Itoa(node), token, strconv.FormatInt(lastUnixMs, 10)}).Error()
	if err != nil {
		return redisErr("give a node id back", err)
	}
	return nil
}

// nodeServer is the server identity node_acquire is given: "" (it reads it
// from INFO), or the embedded server's, which lives and dies with this
// process and whose INFO does not name it.
func (c *Client) nodeServer() string {
	if c.embedded {
		return embeddedIdentity
	}
	return ""
}
