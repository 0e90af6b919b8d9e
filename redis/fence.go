package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

var _ seckill.CacheGuard = (*Client)(nil)

// embeddedIdentity is the identity of the embedded server: it lives and
// dies with the process that runs it, so it never comes back with old data.
const embeddedIdentity = "embedded"

// Identity names the Redis server process and the history of its data:
// "run_id/master_replid" from INFO. A restart changes the run id (and an
// AOF or RDB file may bring back older data); a failover to a replica
// changes both; a server that resynchronised from another master keeps its
// run id but changes its replication id.
//
// On a Cluster it names every master, with its slots: "first-last=run/
// replid" for each, in slot order. A failover of any master, or a reshard,
// changes it: the data of every voucher is then checked again.
func (c *Client) Identity(ctx context.Context) (string, error) {
	return c.identity(ctx, "")
}

// identity reads Identity; with script not "", it loads script on each
// master first, on the same server it then reads: the identity returned is
// that of the servers the script was loaded on, as they were when it was.
func (c *Client) identity(ctx context.Context, script string) (string, error) {
	if c.embedded {
		if script != "" {
			if err := c.rdb.Do(ctx, c.rdb.B().ScriptLoad().Script(script).Build()).Error(); err != nil {
				return "", redisErr("load the admission script", err)
			}
		}
		return embeddedIdentity, nil
	}
	if c.Kind() != KindCluster {
		// One connection: a Sentinel client may move to a new master
		// between two commands of its own.
		var id string
		err := c.rdb.Dedicated(func(dc rueidis.DedicatedClient) error {
			var err error
			id, err = serverIdentity(ctx, dc, script)
			return err
		})
		return id, err
	}
	shards, err := c.clusterShards(ctx)
	if err != nil {
		return "", err
	}
	nodes := c.rdb.Nodes()
	parts := make([]string, 0, len(shards))
	for _, s := range shards {
		node, ok := nodes[s.Addr]
		if !ok {
			// The client has not yet learnt of a master the Cluster names.
			return "", fmt.Errorf("redis: read the identity of master %s: not connected yet: %w", s.Addr, seckill.ErrUnavailable)
		}
		id, err := serverIdentity(ctx, node, script)
		if err != nil {
			return "", err
		}
		ranges := make([]string, len(s.Slots))
		for i, r := range s.Slots {
			ranges[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
		parts = append(parts, strings.Join(ranges, "+")+"="+id)
	}
	return strings.Join(parts, ","), nil
}

// commander is a connection to one server: a node's client or a dedicated
// connection.
type commander interface {
	B() rueidis.Builder
	Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult
}

// serverIdentity reads "run_id/master_replid" of the server rdb talks to,
// after loading script there if it is not "".
func serverIdentity(ctx context.Context, rdb commander, script string) (string, error) {
	if script != "" {
		if err := rdb.Do(ctx, rdb.B().ScriptLoad().Script(script).Build()).Error(); err != nil {
			return "", redisErr("load the admission script", err)
		}
	}
	info, err := rdb.Do(ctx, rdb.B().Info().Section("server", "replication").Build()).ToString()
	if err != nil {
		return "", redisErr("read the server's identity", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	run, repl := fields["run_id"], fields["master_replid"]
	if run == "" || repl == "" {
		return "", fmt.Errorf("redis: read the server's identity: INFO has no run_id or master_replid")
	}
	if fields["role"] != "" && fields["role"] != "master" {
		// A replica answering for a master (a failover under way): not the
		// server admissions write to; check again later.
		return "", fmt.Errorf("redis: read the server's identity: it is a %s: %w", fields["role"], seckill.ErrUnavailable)
	}
	return run + "/" + repl, nil
}

// Fence returns the identity of the server that the data was last checked
// against, as recorded with the data; "" if none is (a new deployment, or
// Redis lost everything).
func (c *Client) Fence(ctx context.Context) (string, error) {
	id, err := c.rdb.Do(ctx, c.rdb.B().Hget().Key(c.keys.fence().Fence).Field("identity").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	if err != nil {
		return "", redisErr("read the fence", err)
	}
	return id, nil
}

// LockCheck takes the check of the server for the caller (token) for ttl,
// unless another instance holds it, and reports whether it did.
func (c *Client) LockCheck(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	err := c.rdb.Do(ctx, c.rdb.B().Set().Key(c.keys.fence().Lock).Value(token).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, redisErr("lock the check of the server", err)
	}
	return true, nil
}

// RenewCheck extends the caller's hold on the check, and reports false if
// it no longer held it.
func (c *Client) RenewCheck(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	n, err := c.scripts.get("fence_renew").Exec(ctx, c.rdb, []string{c.keys.fence().Lock},
		[]string{token, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
	if err != nil {
		return false, redisErr("renew the check of the server", err)
	}
	return n == 1, nil
}

// SetFence records identity as the server the data was checked against and
// ends the caller's check. It reports false if the caller no longer held
// the check (nothing recorded).
func (c *Client) SetFence(ctx context.Context, token, identity string) (bool, error) {
	k := c.keys.fence()
	n, err := c.scripts.get("fence_set").Exec(ctx, c.rdb, []string{k.Fence, k.Lock}, []string{token, identity}).AsInt64()
	if err != nil {
		return false, redisErr("record the fence", err)
	}
	return n == 1, nil
}

// ArmAdmission loads the admission script into every master's script
// cache: until then Admit answers ErrCacheUnverified. Only a caller that
// checked the server arms it, with the identity it checked: the script is
// loaded on each master, then that master's identity read, and unless the
// masters loaded are the ones checked (a failover came in between, or the
// topology was read from a node that had not seen it yet) every node is
// disarmed again and the answer is ErrUnavailable. Replicas are left
// unarmed on purpose: one promoted by a failover must refuse admissions
// until its data (which may lack the last ones) is checked.
func (c *Client) ArmAdmission(ctx context.Context, identity string) error {
	got, err := c.identity(ctx, c.scripts.get("admit").src)
	if err == nil && got == identity {
		return nil
	}
	if derr := c.DisarmAdmission(ctx); derr != nil {
		c.logger.Warn("could not take back the admission script loaded on servers that were not checked; the next check will", "err", derr)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("redis: arm admission: the servers are %s, not %s as checked: %w", got, identity, seckill.ErrUnavailable)
}

// masterNodes returns a client for each master: the Cluster's masters, or
// the one server.
func (c *Client) masterNodes(ctx context.Context) (map[string]rueidis.Client, error) {
	if c.Kind() != KindCluster {
		return c.rdb.Nodes(), nil
	}
	shards, err := c.clusterShards(ctx)
	if err != nil {
		return nil, err
	}
	nodes := c.rdb.Nodes()
	out := make(map[string]rueidis.Client, len(shards))
	for _, s := range shards {
		node, ok := nodes[s.Addr]
		if !ok {
			return nil, fmt.Errorf("redis: master %s: not connected yet: %w", s.Addr, seckill.ErrUnavailable)
		}
		out[s.Addr] = node
	}
	return out, nil
}

// DisarmAdmission empties every Redis node's script cache, so that every
// instance's next admission answers ErrCacheUnverified and waits for the
// check. Other scripts load themselves again on their next run. A node that
// fails to answer is an error only if it is a master now: the client may
// still list a master that died (and cannot admit) until it refreshes its
// view of the Cluster.
func (c *Client) DisarmAdmission(ctx context.Context) error {
	var masters map[string]rueidis.Client
	if c.Kind() == KindCluster {
		masters, _ = c.masterNodes(ctx) // nil: every node must answer
	}
	for addr, node := range c.rdb.Nodes() {
		if err := node.Do(ctx, node.B().ScriptFlush().Build()).Error(); err != nil {
			if _, master := masters[addr]; masters != nil && !master {
				c.logger.Debug("a node that is not a master did not flush its scripts", "node", addr, "err", err)
				continue
			}
			return redisErr("flush the scripts on "+addr, err)
		}
	}
	return nil
}
