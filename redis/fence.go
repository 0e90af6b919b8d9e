package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

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
// changes it; StaleSince then says whose data may be older.
func (c *Client) Identity(ctx context.Context) (string, error) {
	if c.embedded {
		return embeddedIdentity, nil
	}
	if c.Kind() != KindCluster {
		return serverIdentity(ctx, c.rdb) // one command: no connection of its own needed
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
		id, err := serverIdentity(ctx, node)
		if err != nil {
			return "", err
		}
		parts = append(parts, s.slotRanges()+"="+id)
	}
	return strings.Join(parts, ","), nil
}

// slotRanges names the shard's slots as the Cluster identity does:
// "0-5460", or "0-10+20-30" for several ranges.
func (s Shard) slotRanges() string {
	ranges := make([]string, len(s.Slots))
	for i, r := range s.Slots {
		ranges[i] = fmt.Sprintf("%d-%d", r[0], r[1])
	}
	return strings.Join(ranges, "+")
}

// commander is a connection to one server: a node's client or a dedicated
// connection.
type commander interface {
	B() rueidis.Builder
	Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult
	DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult
}

// serverIdentity reads "run_id/master_replid" of the server rdb talks to.
func serverIdentity(ctx context.Context, rdb commander) (string, error) {
	info, err := rdb.Do(ctx, rdb.B().Info().Section("server", "replication").Build()).ToString()
	if err != nil {
		return "", redisErr("read the server's identity", err)
	}
	return parseIdentity(info)
}

// loadIdentity loads script on the server rdb talks to and reads its
// identity, in one transaction: the identity is the server's when the
// script went in.
func loadIdentity(ctx context.Context, rdb commander, scripts []string) (string, error) {
	cmds := rueidis.Commands{rdb.B().Multi().Build()}
	for _, s := range scripts {
		cmds = append(cmds, rdb.B().ScriptLoad().Script(s).Build())
	}
	cmds = append(cmds, rdb.B().Info().Section("server", "replication").Build(), rdb.B().Exec().Build())
	res := rdb.DoMulti(ctx, cmds...)
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return "", redisErr("load the admission script", err)
		}
	}
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		return "", redisErr("load the admission script", err)
	}
	if len(replies) != len(scripts)+1 {
		return "", fmt.Errorf("redis: load the admission script: %d replies to %d commands", len(replies), len(scripts)+1)
	}
	for _, r := range replies[:len(scripts)] {
		if err := r.Error(); err != nil {
			return "", redisErr("load the admission script", err)
		}
	}
	info, err := replies[len(scripts)].ToString()
	if err != nil {
		return "", redisErr("read the server's identity", err)
	}
	return parseIdentity(info)
}

// parseIdentity reads "run_id/master_replid" from INFO server and
// replication.
func parseIdentity(info string) (string, error) {
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

// StaleSince says, of the data checked against the server named fence,
// which vouchers' may be older now that the server is identity: nil when
// none can be, else a func that tells for each voucher.
//
// On one server (or Sentinel's master) any change may have brought older
// data: every voucher. On a Cluster a master's data is as checked while
// the master keeps its identity: run id and replication id never come
// back once changed (a restart makes a new run id, a promotion a new
// replication id), so a master that shows the identity it had at the check
// has had it throughout, never restarted nor failed over. A slot that
// moved from one such master to another (a reshard: MIGRATE carries the
// keys, data and all, and deletes them at the source) holds data as
// current as it was. What may be older: the slots of a master whose
// identity changed or that is gone (a restart, a failover, its data
// maybe from a replica that lagged), those of a master not checked (a new
// one; it may have restarted after slots came to it), and, whenever any
// master changed or came or went, every slot that moved (it may have
// moved through that master). A slot that came back to the master it was
// with, through a master that came and went between two checks, is not
// seen: the checks run every second on every instance.
//
// A sharded voucher's data may be older when any of its shards' may: it is
// then unloaded whole, and rebuilt whole.
func (c *Client) StaleSince(fence, identity string) func(v *seckill.Voucher) bool {
	if fence == identity {
		return nil
	}
	slots, all := staleSlots(fence, identity)
	if all {
		return func(*seckill.Voucher) bool { return true }
	}
	if slots == nil {
		return nil
	}
	return func(v *seckill.Voucher) bool {
		for _, k := range c.Learn(v).shards {
			if slots[keySlot(k.Stock)] {
				return true
			}
		}
		return false
	}
}

// clusterSlots is the master's identity for each slot, "" for a slot no
// master is named for.
type clusterSlots [16384]string

// parseClusterIdentity reads a Cluster's identity ("0-10+20-30=run/replid,
// …", see Identity); false if it is not one (a single server's).
func parseClusterIdentity(identity string) (*clusterSlots, bool) {
	var slots clusterSlots
	if !strings.Contains(identity, "=") {
		return nil, false
	}
	for _, part := range strings.Split(identity, ",") {
		ranges, id, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, false
		}
		for _, r := range strings.Split(ranges, "+") {
			lo, hi, ok := strings.Cut(r, "-")
			first, err1 := strconv.Atoi(lo)
			last, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil || first < 0 || last >= len(slots) || first > last {
				return nil, false
			}
			for s := first; s <= last; s++ {
				slots[s] = id
			}
		}
	}
	return &slots, true
}

// staleSlots returns the slots whose data may be older since the check of
// fence, the Cluster now being identity (see StaleSince): all when either
// is not a Cluster's, nil when none.
func staleSlots(fence, identity string) (slots *[16384]bool, all bool) {
	was, ok1 := parseClusterIdentity(fence)
	now, ok2 := parseClusterIdentity(identity)
	if !ok1 || !ok2 {
		return nil, true
	}
	checked, current := map[string]bool{}, map[string]bool{}
	for s := range was {
		checked[was[s]] = true
		current[now[s]] = true
	}
	delete(checked, "")
	delete(current, "")
	same := len(checked) == len(current)
	for id := range checked {
		same = same && current[id]
	}
	var stale [16384]bool
	found := false
	for s := range was {
		f, c := was[s], now[s]
		// With the same master, unchanged; or moved while every master
		// stayed as checked.
		if f != "" && (f == c || (c != "" && same)) {
			continue
		}
		stale[s], found = true, true
	}
	if !found {
		return nil, false
	}
	return &stale, false
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
	n, err := fenceRenewScript.runInt(ctx, c, "renew the check of the server", []string{c.keys.fence().Lock}, args{token, ms(ttl)})
	return n == 1, err
}

// LockRebuilds takes the rebuilding of the vouchers a check unloaded for
// the caller (token) for ttl, unless another instance holds it, and
// reports whether it did.
func (c *Client) LockRebuilds(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	err := c.rdb.Do(ctx, c.rdb.B().Set().Key(c.keys.fence().Rebuilds).Value(token).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, redisErr("lock the rebuilds", err)
	}
	return true, nil
}

// RenewRebuilds extends the caller's hold on the rebuilds by ttl, or ends
// it when ttl is 0, and reports false if it no longer held it.
func (c *Client) RenewRebuilds(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	n, err := fenceRenewScript.runInt(ctx, c, "renew the rebuilds", []string{c.keys.fence().Rebuilds}, args{token, ms(ttl)})
	return n == 1, err
}

// SetFence records identity as the server the data was checked against and
// ends the caller's check. It reports false if the caller no longer held
// the check (nothing recorded).
func (c *Client) SetFence(ctx context.Context, token, identity string) (bool, error) {
	k := c.keys.fence()
	n, err := fenceSetScript.runInt(ctx, c, "record the fence", []string{k.Fence, k.Lock}, args{token, identity})
	return n == 1, err
}

// ArmAdmission loads the admission script into every master's script
// cache: until then Admit answers ErrCacheUnverified. Only a caller that
// checked the server arms it, with the identity it checked, and only the
// servers checked are armed. On each master the identity is read first,
// and a master that is not one checked (a failover came in between, or the
// topology was read from a node that had not seen it yet), or whose
// identity cannot be read, gets nothing: the answer is ErrUnavailable.
// Then the script is loaded and the identity read again in one
// transaction; should the server have changed in between, its scripts are
// flushed again. Masters armed before it were checked, and stay armed.
// Replicas are left unarmed on purpose: one promoted by a failover must
// refuse admissions until its data (which may lack the last ones) is
// checked.
//
// On a Cluster a master is checked when its identity (run id and
// replication id) is among those checked, whatever slots it serves now:
// slots that move between masters that did not change keep their data
// (see StaleSince).
func (c *Client) ArmAdmission(ctx context.Context, identity string) error {
	script := c.armed()
	if c.embedded {
		for _, s := range script {
			if err := c.rdb.Do(ctx, c.rdb.B().ScriptLoad().Script(s).Build()).Error(); err != nil {
				return redisErr("load the admission script", err)
			}
		}
		return nil
	}
	if c.Kind() != KindCluster {
		// One connection: a Sentinel client may move to a new master
		// between two commands of its own.
		return c.rdb.Dedicated(func(dc rueidis.DedicatedClient) error {
			return c.armNode(ctx, dc, script, func(id string) bool { return id == identity })
		})
	}
	checked := map[string]bool{} // the masters' identities checked
	for _, part := range strings.Split(identity, ",") {
		if _, id, ok := strings.Cut(part, "="); ok {
			checked[id] = true
		}
	}
	shards, err := c.clusterShards(ctx)
	if err != nil {
		return err
	}
	nodes := c.rdb.Nodes()
	for _, s := range shards {
		node, ok := nodes[s.Addr]
		if !ok {
			return fmt.Errorf("redis: arm admission: master %s: not connected yet: %w", s.Addr, seckill.ErrUnavailable)
		}
		if err := c.armNode(ctx, node, script, func(id string) bool { return checked[id] }); err != nil {
			return fmt.Errorf("redis: arm admission: master %s of slots %s: %w", s.Addr, s.slotRanges(), err)
		}
	}
	return nil
}

// armNode loads script on node if its identity is one checked, reading the
// identity before and, in one transaction, with the load; if the second
// is not one checked, it flushes the node's scripts again.
func (c *Client) armNode(ctx context.Context, node commander, script []string, checked func(id string) bool) error {
	id, err := serverIdentity(ctx, node)
	if err != nil {
		return err
	}
	if !checked(id) {
		return fmt.Errorf("redis: arm admission: the server is %s, not one checked: %w", id, seckill.ErrUnavailable)
	}
	id, err = loadIdentity(ctx, node, script)
	if err == nil && checked(id) {
		return nil
	}
	if ferr := node.Do(ctx, node.B().ScriptFlush().Build()).Error(); ferr != nil {
		c.logger.Warn("could not take back the admission script loaded on a server that changed as it was armed; the next check will", "err", ferr)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("redis: arm admission: the server became %s as it was armed, not one checked: %w", id, seckill.ErrUnavailable)
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
	// Every node is asked, whatever the others answer: one that cannot be
	// reached must not leave the rest armed.
	var errs []error
	for addr, node := range c.rdb.Nodes() {
		if err := node.Do(ctx, node.B().ScriptFlush().Build()).Error(); err != nil {
			if _, master := masters[addr]; masters != nil && !master {
				c.logger.Debug("a node that is not a master did not flush its scripts", "node", addr, "err", err)
				continue
			}
			errs = append(errs, redisErr("flush the scripts on "+addr, err))
		}
	}
	return errors.Join(errs...)
}
