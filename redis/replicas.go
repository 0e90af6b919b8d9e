package redis

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// replicaProbeTimeout bounds each question CheckReplicas asks a replica or
// a sentinel: one that does not answer is reported, not waited for.
const replicaProbeTimeout = 2 * time.Second

// CheckReplicas checks, when admissions wait for replicas (WaitReplicas >
// 0), the conditions under which an admission answered 200 survives a
// failover (docs/guarantees.md, Failover and --redis-wait-replicas), where
// they can be read, and logs a warning for each that does not hold. It
// returns the warnings. It refuses nothing: a deployment may choose to run
// without them, and they can change after the start.
//
// On each master: WaitReplicas against the replicas INFO lists (fewer: a
// failover may promote one that did not acknowledge; more: every admission
// times out); below them, on Sentinel or a single server, the replicas'
// priorities, which Sentinel ranks before their replication offsets (read
// from Sentinel, SENTINEL REPLICAS, or from each replica, CONFIG GET
// replica-priority); and min-replicas-to-write, without which a master cut
// off from its replicas keeps taking writes while another is promoted.
func (c *Client) CheckReplicas(ctx context.Context) []string {
	n := c.waitReplicas
	if n <= 0 || c.embedded {
		return nil
	}
	var warnings []string
	warn := func(msg string, args ...any) {
		warnings = append(warnings, msg)
		c.logger.Warn(msg, append([]any{"redis_wait_replicas", n}, args...)...)
	}
	masters, err := c.masterNodes(ctx)
	if err != nil {
		warn("cannot read the Redis masters to check the replicas that --redis-wait-replicas relies on", "err", err)
		return warnings
	}
	for _, addr := range slices.Sorted(maps.Keys(masters)) {
		node := masters[addr]
		info, err := node.Do(ctx, node.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			warn("cannot read the replicas of a Redis master (INFO replication)", "master", addr, "err", err)
			continue
		}
		replicas := infoReplicas(info)
		switch {
		case len(replicas) < n:
			warn(fmt.Sprintf("a Redis master has %d replica(s) connected, fewer than --redis-wait-replicas: "+
				"its admissions are answered 503 until more are attached", len(replicas)), "master", addr, "replicas", replicas)
		case len(replicas) > n:
			warn(fmt.Sprintf("--redis-wait-replicas is below the %d replica(s) of a Redis master: a failover may promote one "+
				"that did not acknowledge an admission answered 200, and lose it; set it to every replica", len(replicas)),
				"master", addr, "replicas", replicas)
			if c.Kind() != KindCluster {
				// A Cluster elects among replicas by replication offset
				// (as a delay only): no priority to compare.
				c.checkPriorities(ctx, addr, replicas, warn)
			}
		}
		c.checkMinReplicas(ctx, addr, node, warn)
	}
	return warnings
}

// checkPriorities warns when the replicas of the master at addr have
// unequal priorities: Sentinel promotes the replica of the lowest
// replica-priority, and only among equals the one with the greatest
// replication offset, which has every write a replica acknowledged.
func (c *Client) checkPriorities(ctx context.Context, addr string, replicas []string, warn func(string, ...any)) {
	var priorities map[string]string
	var err error
	if c.Kind() == KindSentinel {
		priorities, err = c.sentinelPriorities(ctx)
	} else {
		priorities, err = c.replicaPriorities(ctx, replicas)
	}
	if err != nil {
		warn("cannot read the replicas' replica-priority; keep them equal, or a failover may promote a lagging replica "+
			"over one that acknowledged", "master", addr, "err", err)
		return
	}
	seen := map[string]bool{}
	for _, p := range priorities {
		seen[p] = true
	}
	if len(seen) > 1 {
		warn("the replicas' replica-priority differ: Sentinel promotes by priority before replication offset, so a "+
			"replica that lags may be promoted over one that acknowledged an admission answered 200; keep them equal",
			"master", addr, "priorities", priorities)
	}
}

// sentinelPriorities asks the sentinels (the first that answers) for the
// master set's replicas and their priorities, by address.
func (c *Client) sentinelPriorities(ctx context.Context) (map[string]string, error) {
	var last error
	for _, addr := range c.opt.InitAddress {
		sc, err := c.probe(addr, true)
		if err != nil {
			last = err
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, replicaProbeTimeout)
		list, err := sc.Do(pctx, sc.B().SentinelReplicas().Master(c.opt.Sentinel.MasterSet).Build()).ToArray()
		cancel()
		sc.Close()
		if err != nil {
			last = fmt.Errorf("SENTINEL REPLICAS on %s: %w", addr, err)
			continue
		}
		out := make(map[string]string, len(list))
		for _, r := range list {
			m, err := r.AsStrMap()
			if err != nil {
				return nil, fmt.Errorf("SENTINEL REPLICAS on %s: %w", addr, err)
			}
			out[net.JoinHostPort(m["ip"], m["port"])] = m["slave-priority"]
		}
		return out, nil
	}
	return nil, last
}

// replicaPriorities asks each replica for its replica-priority.
func (c *Client) replicaPriorities(ctx context.Context, replicas []string) (map[string]string, error) {
	out := make(map[string]string, len(replicas))
	for _, addr := range replicas {
		rc, err := c.probe(addr, false)
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, replicaProbeTimeout)
		m, err := rc.Do(pctx, rc.B().ConfigGet().Parameter("replica-priority").Build()).AsStrMap()
		cancel()
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET replica-priority on %s: %w", addr, err)
		}
		out[addr] = m["replica-priority"]
	}
	return out, nil
}

// probe connects to one server at addr, with the credentials and TLS of
// the client's servers, or of its sentinels.
func (c *Client) probe(addr string, sentinel bool) (rueidis.Client, error) {
	o := rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, DisableRetry: true,
		Username: c.opt.Username, Password: c.opt.Password, TLSConfig: c.opt.TLSConfig, Dialer: c.opt.Dialer}
	if sentinel {
		s := c.opt.Sentinel
		o.Username, o.Password, o.TLSConfig, o.Dialer = s.Username, s.Password, s.TLSConfig, s.Dialer
	}
	if o.Dialer.Timeout == 0 || o.Dialer.Timeout > replicaProbeTimeout {
		o.Dialer.Timeout = replicaProbeTimeout
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return rc, nil
}

// checkMinReplicas warns when the master at addr takes writes with no
// replica connected: cut off from its replicas (a partition) while another
// is promoted, it goes on admitting (answered 503, since no replica
// acknowledges, but persisted by the workers that reach it) and renewing
// the order-id node leases of the instances that reach it.
func (c *Client) checkMinReplicas(ctx context.Context, addr string, node rueidis.Client, warn func(string, ...any)) {
	m, err := node.Do(ctx, node.B().ConfigGet().Parameter("min-replicas-to-write").Build()).AsStrMap()
	if err != nil {
		warn("cannot read min-replicas-to-write; set it to 1 or more, with min-replicas-max-lag, so that a master cut off "+
			"from its replicas stops taking writes", "master", addr, "err", err)
		return
	}
	if v, _ := strconv.Atoi(strings.TrimSpace(m["min-replicas-to-write"])); v == 0 {
		warn("min-replicas-to-write is 0: a master cut off from its replicas (a partition) keeps taking admissions and "+
			"renewing order-id leases while a replica is promoted; set it to 1 or more, with min-replicas-max-lag",
			"master", addr)
	}
}
