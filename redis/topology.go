package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// Deployment kinds that Topology reports.
const (
	KindEmbedded = "embedded" // the in-process server of OpenEmbedded
	KindSingle   = "single"   // one Redis server (perhaps with replicas no one promotes)
	KindSentinel = "sentinel" // a master that Sentinel fails over to a replica
	KindCluster  = "cluster"  // a Redis Cluster: slots spread over masters
)

// Topology is the shape of the Redis deployment: what kind it is and which
// masters serve it.
type Topology struct {
	Kind    string
	Masters []Shard
}

// Shard is one master and what it serves.
type Shard struct {
	Addr string // host:port
	// Slots are the Cluster slot ranges it serves, first and last
	// inclusive; nil outside a Cluster (it serves everything).
	Slots [][2]int
	// Replicas are the addresses of its replicas, as it or the Cluster
	// names them.
	Replicas []string
}

// String describes the topology in one line, for the banner and /readyz:
// "cluster: 3 masters (a, b, c), 3 replicas".
func (t Topology) String() string {
	addrs := make([]string, len(t.Masters))
	for i, m := range t.Masters {
		addrs[i] = m.Addr
	}
	masters, replicas := t.counts()
	return fmt.Sprintf("%s: %s (%s), %s", t.Kind, masters, strings.Join(addrs, ", "), replicas)
}

// counts says how many masters and replicas: "3 masters", "3 replicas".
func (t Topology) counts() (masters, replicas string) {
	n := 0
	for _, m := range t.Masters {
		n += len(m.Replicas)
	}
	noun := "masters"
	if len(t.Masters) == 1 {
		noun = "master"
	}
	return fmt.Sprintf("%d %s", len(t.Masters), noun), fmt.Sprintf("%d replicas", n)
}

// Summary is String without the addresses, for answers to anyone who asks
// (/readyz): "cluster: 3 masters, 3 replicas".
func (t Topology) Summary() string {
	masters, replicas := t.counts()
	return fmt.Sprintf("%s: %s, %s", t.Kind, masters, replicas)
}

// Describe is the Summary of the topology read at most TopologyFor ago,
// for /readyz: a load balancer's probes do not each ask Redis for it.
func (c *Client) Describe(ctx context.Context) (string, error) {
	t, err := c.cachedTopology(ctx)
	if err != nil {
		return "", err
	}
	return t.Summary(), nil
}

// Kind reports the kind of deployment the client was configured for,
// without asking Redis.
func (c *Client) Kind() string {
	if c.embedded {
		return KindEmbedded
	}
	switch c.rdb.Mode() {
	case rueidis.ClientModeCluster:
		return KindCluster
	case rueidis.ClientModeSentinel:
		return KindSentinel
	}
	return KindSingle
}

// Topology asks Redis for its masters: CLUSTER SLOTS on a Cluster, INFO
// replication on the one master otherwise. A Cluster shard whose master is
// down (failed, none promoted yet) is an error.
func (c *Client) Topology(ctx context.Context) (Topology, error) {
	return c.topology(ctx, false)
}

// topology is Topology; with partial, a Cluster shard whose master is
// down is left out instead (its slots have no master in it): the
// batches' routing (RefreshTopology) keeps batching on the masters that
// are up while one shard waits for a failover.
func (c *Client) topology(ctx context.Context, partial bool) (Topology, error) {
	t := Topology{Kind: c.Kind()}
	if t.Kind == KindCluster {
		shards, err := c.clusterShardsOf(ctx, partial)
		if err != nil {
			return Topology{}, err
		}
		t.Masters = shards
		return t, nil
	}
	var addr string
	for a := range c.rdb.Nodes() {
		addr = a // a single or sentinel client has one node: the master
	}
	m := Shard{Addr: addr}
	if !c.embedded {
		info, err := c.rdb.Do(ctx, c.rdb.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			return Topology{}, redisErr("read the replicas", err)
		}
		m.Replicas = infoReplicas(info)
	}
	t.Masters = []Shard{m}
	return t, nil
}

// infoReplicas returns the replicas that INFO replication lists
// ("slave0:ip=127.0.0.1,port=6380,state=online,...").
func infoReplicas(info string) []string {
	var out []string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "slave") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(k, "slave")); err != nil {
			continue
		}
		var ip, port string
		for _, f := range strings.Split(v, ",") {
			if name, val, ok := strings.Cut(f, "="); ok {
				switch name {
				case "ip":
					ip = val
				case "port":
					port = val
				}
			}
		}
		if ip != "" && port != "" {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	return out
}

// clusterShards reads the Cluster's masters, their slots and replicas,
// sorted by first slot, from any node that answers with a whole view (see
// clusterShardsOf): with CLUSTER SHARDS (Redis 7), which lists every
// replica that is not failed (CLUSTER SLOTS leaves out a replica that has
// had no write to copy yet), else CLUSTER SLOTS.
func (c *Client) clusterShards(ctx context.Context) ([]Shard, error) {
	return c.clusterShardsOf(ctx, false)
}

// How clusterShardsOf asks the nodes: each for at most shardsAnswer (a
// hung node must not use up the caller's deadline), and, while none has a
// whole view, every shardsStep for up to shardsSettle: the nodes learn of
// a promotion by gossip, one after another.
const (
	shardsAnswer = time.Second
	shardsStep   = 100 * time.Millisecond
	shardsSettle = 2 * time.Second
)

// clusterShardsOf is clusterShards. It asks the nodes the client knows,
// in random order, until one answers with a whole view: a master for
// every shard, none of them a node that refused this read. A node that is
// down (a seed whose master died: rueidis would send a keyless command to
// it as to any other) is passed over, and so is a node that has not yet
// heard of a failover (its view has the shard without a master, or the
// dead one). Without a whole view it asks again, up to shardsSettle, and
// then answers the error. With partial (the admissions' background read,
// see topology) it does not ask again: it takes the widest view it got,
// leaving out a shard whose master is down.
func (c *Client) clusterShardsOf(ctx context.Context, partial bool) ([]Shard, error) {
	start := time.Now()
	for {
		shards, err := c.shardsRound(ctx, c.rdb.Nodes())
		if err == nil {
			return shards, nil
		}
		if partial && shards != nil {
			shards = slices.DeleteFunc(shards, func(s Shard) bool { return s.Addr == "" })
			if len(shards) > 0 {
				return shards, nil
			}
		}
		if partial || time.Since(start)+shardsStep > shardsSettle || ctx.Err() != nil {
			return nil, err
		}
		t := time.NewTimer(shardsStep)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// shardsRound asks each of nodes once, and stops at the first whole view
// (every master it names that nodes holds asked too). When
// none has one, it returns the widest view it got (the most slots with a
// master that did not refuse; nil if no node answered) and why it is not
// whole.
func (c *Client) shardsRound(ctx context.Context, nodes map[string]rueidis.Client) ([]Shard, error) {
	addrs := slices.Collect(maps.Keys(nodes))
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	refused, asked := map[string]bool{}, map[string]bool{}
	var (
		errs       []error
		best       []Shard
		bestErr    error
		bestServed = -1
	)
	for _, addr := range addrs {
		nctx, cancel := context.WithTimeout(ctx, shardsAnswer)
		shards, err := readShards(nctx, nodes[addr], c.tls)
		cancel()
		asked[addr] = true
		if err != nil {
			if refusedBy(err) {
				refused[addr] = true
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		served, why := wholeView(shards, refused)
		if why == nil {
			// Whole as far as the nodes asked so far tell: its masters not
			// asked yet are asked now, so that a node that has not heard a
			// master died does not send admissions to it.
			askMasters(ctx, shards, nodes, asked, refused)
			if served, why = wholeView(shards, refused); why == nil {
				return shards, nil
			}
		}
		if served > bestServed {
			best, bestErr, bestServed = shards, fmt.Errorf("redis: as %s sees the Cluster, %w", addr, why), served
		}
	}
	if best != nil {
		return best, bestErr
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("redis: read the Cluster's shards: the client knows no node: %w", seckill.ErrUnavailable)
	}
	return nil, redisErr("read the Cluster's shards from any node", errors.Join(errs...))
}

// askMasters pings each master of shards that nodes has a client for and
// that was not asked yet, and marks those that refuse in refused.
func askMasters(ctx context.Context, shards []Shard, nodes map[string]rueidis.Client, asked, refused map[string]bool) {
	for _, s := range shards {
		rc := nodes[s.Addr]
		if rc == nil || asked[s.Addr] {
			continue
		}
		asked[s.Addr] = true
		nctx, cancel := context.WithTimeout(ctx, shardsAnswer)
		err := rc.Do(nctx, rc.B().Ping().Build()).Error()
		cancel()
		if err != nil && refusedBy(err) {
			refused[s.Addr] = true
		}
	}
}

// refusedBy reports an error that says a node is not there: its
// connection refused, reset or closed; not a slow answer (a loaded node
// may still serve its slots) nor a reply that cannot be read.
func refusedBy(err error) bool {
	var op *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &op) && !op.Timeout()
}

// wholeView counts the slots of shards that have a master not refused,
// and says why the view is not whole: a shard without a master (failed,
// none promoted yet, as the node that answered knows), or with one that
// refused this read (a node that has not heard it died).
func wholeView(shards []Shard, refused map[string]bool) (served int, why error) {
	for _, s := range shards {
		n := 0
		for _, r := range s.Slots {
			n += r[1] - r[0] + 1
		}
		switch {
		case s.Addr == "":
			why = cmp.Or(why, fmt.Errorf("the master of slots %s is down: %w", s.slotRanges(), seckill.ErrUnavailable))
		case refused[s.Addr]:
			why = cmp.Or(why, fmt.Errorf("the master of slots %s, %s, does not answer: %w", s.slotRanges(), s.Addr, seckill.ErrUnavailable))
		default:
			served += n
		}
	}
	return served, why
}

// readShards reads the shards as node sees them, a shard whose master is
// down with an empty Addr: CLUSTER SHARDS, or CLUSTER SLOTS where Redis
// is older than 7.
func readShards(ctx context.Context, node rueidis.Client, tls bool) ([]Shard, error) {
	shards, err := node.Do(ctx, node.B().ClusterShards().Build()).ToArray()
	if err == nil {
		return parseShards(shards, tls)
	}
	if isNetwork(err) {
		return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	ranges, err := node.Do(ctx, node.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	byAddr := map[string]*Shard{}
	var order []string
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: a range of %d fields", len(f))
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		master, err3 := nodeAddr(f[2])
		if err := firstErr(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: %w", err)
		}
		s, ok := byAddr[master]
		if !ok {
			s = &Shard{Addr: master}
			byAddr[master] = s
			order = append(order, master)
		}
		s.Slots = append(s.Slots, [2]int{int(first), int(last)})
		for _, rep := range f[3:] {
			addr, err := nodeAddr(rep)
			if err != nil {
				return nil, fmt.Errorf("redis: CLUSTER SLOTS: %w", err)
			}
			if !slices.Contains(s.Replicas, addr) {
				s.Replicas = append(s.Replicas, addr)
			}
		}
	}
	out := make([]Shard, 0, len(order))
	for _, a := range order {
		s := byAddr[a]
		slices.SortFunc(s.Slots, func(x, y [2]int) int { return x[0] - y[0] })
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y Shard) int { return x.Slots[0][0] - y.Slots[0][0] })
	return out, nil
}

// parseShards reads CLUSTER SHARDS: for each shard a map of "slots" (first
// and last of each range, flat) and "nodes" (maps of endpoint, ip, port,
// tls-port, role, health). A node's address is the one rueidis connects
// to and names it by in Nodes(): its preferred endpoint (the ip when the
// endpoint is empty or "?"), and its tls-port over TLS. A shard whose
// master failed, with no replica promoted yet, has an empty Addr.
func parseShards(shards []rueidis.RedisMessage, tls bool) ([]Shard, error) {
	var out []Shard
	for _, sh := range shards {
		m, err := sh.AsMap()
		if err != nil {
			return nil, fmt.Errorf("redis: CLUSTER SHARDS: %w", err)
		}
		sm := m["slots"]
		slots, err := sm.AsIntSlice()
		if err != nil || len(slots)%2 != 0 {
			return nil, fmt.Errorf("redis: CLUSTER SHARDS: slots %v: %v", slots, err)
		}
		if len(slots) == 0 {
			continue // a shard with no slots (an empty master) serves nothing
		}
		nm := m["nodes"]
		nodes, err := nm.ToArray()
		if err != nil {
			return nil, fmt.Errorf("redis: CLUSTER SHARDS: nodes: %w", err)
		}
		s := Shard{}
		for i := 0; i < len(slots); i += 2 {
			s.Slots = append(s.Slots, [2]int{int(slots[i]), int(slots[i+1])})
		}
		for _, n := range nodes {
			f, err := n.AsMap()
			if err != nil {
				return nil, fmt.Errorf("redis: CLUSTER SHARDS: node: %w", err)
			}
			endpointm, ipm, portm, rolem, healthm := f["endpoint"], f["ip"], f["port"], f["role"], f["health"]
			if tls {
				portm = f["tls-port"]
			}
			ip, _ := endpointm.ToString()
			if ip == "" || ip == "?" {
				ip, _ = ipm.ToString()
			}
			port, _ := portm.AsInt64()
			role, _ := rolem.ToString()
			health, _ := healthm.ToString()
			addr := net.JoinHostPort(ip, strconv.FormatInt(port, 10))
			switch {
			case health == "fail":
			case role == "master":
				s.Addr = addr
			case role == "replica":
				s.Replicas = append(s.Replicas, addr)
			}
		}
		slices.SortFunc(s.Slots, func(x, y [2]int) int { return x[0] - y[0] })
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redis: CLUSTER SHARDS: no shard serves a slot")
	}
	slices.SortFunc(out, func(x, y Shard) int { return x.Slots[0][0] - y.Slots[0][0] })
	return out, nil
}

// nodeAddr reads host:port from a CLUSTER SLOTS node entry [ip, port, id, ...].
func nodeAddr(m rueidis.RedisMessage) (string, error) {
	f, err := m.ToArray()
	if err != nil || len(f) < 2 {
		return "", fmt.Errorf("a node of %d fields", len(f))
	}
	host, err := f[0].ToString()
	if err != nil {
		return "", err
	}
	port, err := f[1].AsInt64()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// VoucherMaster returns the address of the master that holds the voucher's
// keys: on a Cluster the master of its slot (one voucher, one slot, one
// master: docs/scaling.md), else the one master.
func (t Topology) VoucherMaster(k keyspace, voucherID int64) string {
	return t.KeyMaster(k.voucher(voucherID).Stock)
}

// KeyMaster returns the address of the master that holds key: on a
// Cluster the master of its slot, else the one master; "" when unknown.
func (t Topology) KeyMaster(key string) string {
	if len(t.Masters) == 0 {
		return ""
	}
	if t.Kind != KindCluster {
		return t.Masters[0].Addr
	}
	slot := keySlot(key)
	for _, m := range t.Masters {
		for _, r := range m.Slots {
			if slot >= r[0] && slot <= r[1] {
				return m.Addr
			}
		}
	}
	return ""
}

// VoucherMasters returns, for each voucher, the address of the master that
// holds its keys (see Topology.VoucherMaster).
func (c *Client) VoucherMasters(ctx context.Context, voucherIDs ...int64) (map[int64]string, error) {
	t, err := c.Topology(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]string, len(voucherIDs))
	for _, id := range voucherIDs {
		out[id] = t.VoucherMaster(c.keys, id)
	}
	return out, nil
}

// TopologyFor is how long the topology read is trusted: keyNode reads it
// afresh after that, and the group commit has it read afresh.
const TopologyFor = 5 * time.Second

// cachedTopology returns the topology read at most TopologyFor ago,
// reading it afresh if it is older. The read is not made under topoMu:
// a node that hangs holds up only this caller (to its ctx), never the
// admissions that route by the topology they have (HeldTopology).
func (c *Client) cachedTopology(ctx context.Context) (*Topology, error) {
	c.topoMu.Lock()
	t, at, gen := c.topo, c.topoAt, c.topoGen
	c.topoMu.Unlock()
	if t != nil && time.Since(at) <= TopologyFor {
		return t, nil
	}
	fresh, err := c.Topology(ctx)
	if err != nil {
		return nil, err
	}
	c.setTopology(&fresh, gen)
	return &fresh, nil
}

// setTopology keeps t, read now, unless the topology was forgotten since
// the read began (gen is the generation it began at): a read from before
// a failover may name the master that failed.
func (c *Client) setTopology(t *Topology, gen uint64) {
	c.topoMu.Lock()
	if c.topoGen == gen {
		c.topo, c.topoAt = t, time.Now()
	}
	c.topoMu.Unlock()
}

// ForgetTopology drops the topology: the admissions run alone, routed
// by rueidis, until it is read afresh (RefreshTopology), and the next
// keyNode reads it. A read under way when it is forgotten is not kept.
func (c *Client) ForgetTopology() {
	c.topoMu.Lock()
	c.topo = nil
	c.topoGen++
	c.topoMu.Unlock()
}

// HeldTopology returns the topology at hand without asking Redis: nil
// when there is none (forgotten after a failover, or not read yet), when
// it was read, and the generation it was read in (see KeepTopology). The
// group commit batches by it (redisledger), and has it read afresh once
// it is older than TopologyFor.
func (c *Client) HeldTopology() (t *Topology, at time.Time, gen uint64) {
	c.topoMu.Lock()
	defer c.topoMu.Unlock()
	return c.topo, c.topoAt, c.topoGen
}

// RefreshTopology reads the topology once, leaving out a Cluster shard
// whose master is down so that the other masters keep batching, and
// keeps it unless it was forgotten since gen (KeepTopology).
func (c *Client) RefreshTopology(ctx context.Context, gen uint64) error {
	fresh, err := c.topology(ctx, true)
	if err != nil {
		return err
	}
	c.setTopology(&fresh, gen)
	return nil
}

// KeepTopology keeps t as the topology at hand, read now, unless it was
// forgotten since generation gen (HeldTopology).
func (c *Client) KeepTopology(t *Topology, gen uint64) { c.setTopology(t, gen) }

// keyNode returns the master that holds key (a voucher's, or a shard's),
// from a topology read at most TopologyFor ago; "" when it cannot be read
// (the snapshot it is part of does not fail for that).
func (c *Client) keyNode(ctx context.Context, key string) string {
	t, err := c.cachedTopology(ctx)
	if err != nil {
		return ""
	}
	return t.KeyMaster(key)
}

// keySlot is the Cluster slot of key, as rueidis computes it to route
// the key's commands: CRC16 of its hash tag (the part between the first
// '{' and the next '}', if not empty) or of the whole key, mod 16384.
func keySlot(key string) int {
	cmd := rueidis.Completed{}.SetSlot(key)
	return int(cmd.Slot())
}
