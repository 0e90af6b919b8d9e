package faults

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of six redis-server processes: three masters
// with a replica each, for tests of what the code does when a master fails
// over.
type Cluster struct {
	// Nodes are the cluster's processes. At the start Nodes[0:3] are the
	// masters, of slots 0-5460, 5461-10922 and 10923-16383, and Nodes[i+3]
	// replicates Nodes[i]; a failover changes that, which MasterOf,
	// ReplicaOf and Masters follow.
	Nodes []*RedisProc
	// URL names every node, in the form rueidis.ParseURL reads as a
	// cluster: redis://127.0.0.1:p1?addr=127.0.0.1:p2&addr=...
	URL string
}

// clusterArgs are what make failovers quick and sure in tests: a node is
// failed after one second; a replica that was paused is still promoted;
// a replica syncs at once rather than after the diskless-sync delay.
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf", // in --dir
	"--cluster-node-timeout", "1000",
	"--cluster-replica-validity-factor", "0",
	"--cluster-require-full-coverage", "yes",
	"--repl-diskless-sync-delay", "0",
	"--appendonly", "no", "--save", "",
}

// clusterTimeout bounds the formation of a cluster: it takes a second or
// two.
const clusterTimeout = 60 * time.Second

// StartCluster starts a cluster of the test's own and stops it when the
// test ends: for tests that kill or pause its nodes. args are extra
// configuration for every node ("--min-replicas-to-write", "1"). It
// returns once every node says cluster_state:ok, each replica is in sync
// with its master and the nodes agree on who serves what.
func StartCluster(t testing.TB, args ...string) *Cluster {
	t.Helper()
	bin := lookRedis(t, "redis-server")
	c, err := startCluster(newSpawner(t), bin, args)
	if err != nil {
		t.Fatalf("start Redis Cluster: %v", err)
	}
	return c
}

var sharedCluster lazy[*Cluster]

// SharedCluster returns the cluster of the test process, started by its
// first user and never stopped (its nodes die with the test binary): for
// tests that neither kill nor pause nodes, each under a key prefix of its
// own. A failed start fails every test that asks for it.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := lookRedis(t, "redis-server")
	c, err := sharedCluster.get(func() (*Cluster, error) {
		sp, err := newSharedSpawner()
		if err != nil {
			return nil, err
		}
		return startCluster(sp, bin, nil)
	})
	if err != nil {
		t.Fatalf("start the shared Redis Cluster: %v", err)
	}
	return c
}

func startCluster(sp *spawner, bin string, extra []string) (c *Cluster, err error) {
	defer func() {
		if err != nil {
			sp.killAll()
		}
	}()
	nodes, err := sp.startAll(6, bin, readyLine, func(int, string) ([]string, []string, error) {
		return nil, append(slices.Clip(clusterArgs), extra...), nil
	})
	if err != nil {
		return nil, err
	}
	c = &Cluster{Nodes: nodes}
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		if ids[i], err = n.str("CLUSTER", "MYID"); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER MYID: %w", n.Addr, err)
		}
		// Distinct epochs from the start, as redis-cli --cluster create
		// sets them, so that the nodes need not settle a collision.
		if _, err := n.str("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr, err)
		}
	}
	for i, r := range clusterRanges {
		if _, err := nodes[i].str("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", nodes[i].Addr, err)
		}
	}
	for _, n := range nodes[1:] {
		if _, err := nodes[0].str("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER MEET %s: %w", nodes[0].Addr, n.Addr, err)
		}
	}
	// A replica can follow only a master it knows.
	err = poll(clusterTimeout, func() error {
		for _, n := range nodes {
			view, err := n.clusterNodes()
			if err != nil {
				return err
			}
			if len(view) != len(nodes) {
				return fmt.Errorf("%s knows %d nodes", n.Addr, len(view))
			}
			for _, v := range view {
				if v.has("handshake") || v.has("noaddr") {
					return fmt.Errorf("%s: %s is %s", n.Addr, v.addr, strings.Join(v.flags, ","))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the nodes meet: %w", err)
	}
	for i, r := range nodes[3:] {
		if _, err := r.str("CLUSTER", "REPLICATE", ids[i]); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", r.Addr, nodes[i].Addr, err)
		}
	}
	if err := poll(clusterTimeout, func() error { return c.formed(ids) }); err != nil {
		return nil, fmt.Errorf("the cluster forms: %w", err)
	}
	c.URL = "redis://" + nodes[0].Addr + "?addr=" + nodes[1].Addr
	for _, n := range nodes[2:] {
		c.URL += "&addr=" + n.Addr
	}
	return c, nil
}

// clusterRanges are the masters' slots, as redis-cli would split them.
var clusterRanges = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// formed reports why the cluster is not yet as StartCluster promises.
func (c *Cluster) formed(ids []string) error {
	var want []string
	for i := range c.Nodes {
		if i < 3 {
			r := clusterRanges[i]
			want = append(want, fmt.Sprintf("%s master - %d-%d", ids[i], r[0], r[1]))
		} else {
			want = append(want, fmt.Sprintf("%s slave %s", ids[i], ids[i-3]))
		}
	}
	slices.Sort(want)
	for i, n := range c.Nodes {
		info, err := n.str("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		if s := infoField(info, "cluster_state"); s != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", n.Addr, s)
		}
		view, err := n.clusterNodes()
		if err != nil {
			return err
		}
		var got []string
		for _, v := range view {
			if v.has("fail") || v.has("fail?") || (v.link != "connected" && !v.has("myself")) {
				return fmt.Errorf("%s: %s is %s, %s", n.Addr, v.addr, strings.Join(v.flags, ","), v.link)
			}
			got = append(got, v.summary())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s sees\n%s\nnot\n%s", n.Addr, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		repl := n.Info("replication")
		if i >= 3 {
			if s := infoField(repl, "master_link_status"); s != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", n.Addr, s)
			}
			if s := infoField(repl, "master_sync_in_progress"); s != "0" {
				return fmt.Errorf("replica %s: master_sync_in_progress:%s", n.Addr, s)
			}
		} else if s := infoField(repl, "slave0"); !strings.Contains(s, "state=online") {
			return fmt.Errorf("master %s: slave0:%s", n.Addr, s)
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string // addr is ip:port, without the bus port
	flags    []string
	master   string // the master's ID of a replica, "-" for a master
	link     string
	slots    []string // "0-5460", "5461"
}

func (v clusterNode) has(flag string) bool { return slices.Contains(v.flags, flag) }

func (v clusterNode) isMaster() bool { return v.has("master") && !v.has("fail") }

// summary is what the nodes must agree on: who is who, who follows whom,
// who serves which slots.
func (v clusterNode) summary() string {
	role := "slave"
	if v.has("master") {
		role = "master"
	}
	return strings.TrimSpace(strings.Join(append([]string{v.id, role, v.master}, v.slots...), " "))
}

// serves reports whether the node serves slot.
func (v clusterNode) serves(slot int) bool {
	for _, r := range v.slots {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && l <= slot && slot <= h {
			return true
		}
	}
	return false
}

// clusterNodes returns the node's view of the cluster.
func (p *RedisProc) clusterNodes() ([]clusterNode, error) {
	s, err := p.str("CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", p.Addr, err)
	}
	var view []clusterNode
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		v := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3], link: f[7]}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") { // a slot being migrated
				v.slots = append(v.slots, s)
			}
		}
		view = append(view, v)
	}
	return view, nil
}

// view returns the cluster as the first live node sees it.
func (c *Cluster) view(t testing.TB) []clusterNode {
	t.Helper()
	var errs []error
	for _, n := range c.Nodes {
		if !n.live() {
			continue
		}
		view, err := n.clusterNodes()
		if err == nil {
			return view
		}
		errs = append(errs, err)
	}
	t.Fatalf("no node of the cluster answers: %v", errors.Join(errs...))
	return nil
}

// proc returns the process at addr, nil if none is.
func (c *Cluster) proc(addr string) *RedisProc {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// MasterOf returns the node that serves key's slot now, as a live node
// sees it: after a failover, call WaitHealthy first, so that they agree.
func (c *Cluster) MasterOf(t testing.TB, key string) *RedisProc {
	t.Helper()
	slot := KeySlot(key)
	for _, v := range c.view(t) {
		if v.isMaster() && v.serves(slot) {
			if p := c.proc(v.addr); p != nil {
				return p
			}
		}
	}
	t.Fatalf("no master serves slot %d (key %q)", slot, key)
	return nil
}

// ReplicaOf returns a replica of master that is not failed.
func (c *Cluster) ReplicaOf(t testing.TB, master *RedisProc) *RedisProc {
	t.Helper()
	view := c.view(t)
	var id string
	for _, v := range view {
		if v.addr == master.Addr {
			id = v.id
		}
	}
	for _, v := range view {
		if id != "" && v.master == id && v.has("slave") && !v.has("fail") {
			if p := c.proc(v.addr); p != nil {
				return p
			}
		}
	}
	t.Fatalf("%s has no replica", master.Addr)
	return nil
}

// Masters returns the masters that serve slots now, in slot order.
func (c *Cluster) Masters(t testing.TB) []*RedisProc {
	t.Helper()
	var ms []clusterNode
	for _, v := range c.view(t) {
		if v.isMaster() && len(v.slots) > 0 {
			ms = append(ms, v)
		}
	}
	first := func(v clusterNode) int {
		lo, _, _ := strings.Cut(v.slots[0], "-")
		n, _ := strconv.Atoi(lo)
		return n
	}
	slices.SortFunc(ms, func(a, b clusterNode) int { return first(a) - first(b) })
	var procs []*RedisProc
	for _, v := range ms {
		if p := c.proc(v.addr); p != nil {
			procs = append(procs, p)
		}
	}
	return procs
}

// MoveSlot moves slot, with its keys, from the master that serves it to
// the master to, as redis-cli --cluster reshard does: the target imports
// it, the source migrates it, MIGRATE carries its keys across (data and
// all), and every master is told the new owner. It returns once every
// live node agrees.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to *RedisProc) {
	t.Helper()
	var from *RedisProc
	for _, v := range c.view(t) {
		if v.isMaster() && v.serves(slot) {
			from = c.proc(v.addr)
		}
	}
	if from == nil || from == to {
		t.Fatalf("move slot %d: it is with %v, to go to %s", slot, from, to.Addr)
	}
	must := func(p *RedisProc, args ...string) any {
		t.Helper()
		v, err := p.doShort(args...)
		if err != nil {
			t.Fatalf("move slot %d: %s: %v: %v", slot, p.Addr, args, err)
		}
		return v
	}
	fromID, _ := must(from, "CLUSTER", "MYID").(string)
	toID, _ := must(to, "CLUSTER", "MYID").(string)
	n := strconv.Itoa(slot)
	must(to, "CLUSTER", "SETSLOT", n, "IMPORTING", fromID)
	must(from, "CLUSTER", "SETSLOT", n, "MIGRATING", toID)
	for {
		keys, _ := must(from, "CLUSTER", "GETKEYSINSLOT", n, "100").([]any)
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS"}
		for _, k := range keys {
			args = append(args, k.(string))
		}
		must(from, args...)
	}
	for _, m := range c.Masters(t) {
		must(m, "CLUSTER", "SETSLOT", n, "NODE", toID)
	}
	err := poll(clusterTimeout, func() error {
		for _, p := range c.Nodes {
			if !p.live() {
				continue
			}
			view, err := p.clusterNodes()
			if err != nil {
				return err
			}
			for _, v := range view {
				if v.serves(slot) && v.has("master") && v.id != toID {
					return fmt.Errorf("%s sees slot %d with %s", p.Addr, slot, v.addr)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("move slot %d: %v", slot, err)
	}
}

// WaitHealthy waits until every live node says cluster_state:ok with all
// slots served, each slot by a master that runs, and the live nodes agree
// on those masters: what a failover must come to.
func (c *Cluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	err := poll(timeout, func() error {
		var agreed []string
		for _, n := range c.Nodes {
			if !n.live() {
				continue
			}
			info, err := n.str("CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
			}
			if s := infoField(info, "cluster_state"); s != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", n.Addr, s)
			}
			if s := infoField(info, "cluster_slots_ok"); s != "16384" {
				return fmt.Errorf("%s: cluster_slots_ok:%s", n.Addr, s)
			}
			view, err := n.clusterNodes()
			if err != nil {
				return err
			}
			var owners []string
			for _, v := range view {
				if !v.has("master") || len(v.slots) == 0 {
					continue
				}
				if p := c.proc(v.addr); v.has("fail") || p == nil || !p.live() {
					return fmt.Errorf("%s: slots %v are with %s, which is down", n.Addr, v.slots, v.addr)
				}
				owners = append(owners, v.addr+" "+strings.Join(v.slots, " "))
			}
			slices.Sort(owners)
			if agreed == nil {
				agreed = owners
			} else if !slices.Equal(owners, agreed) {
				return fmt.Errorf("%s sees masters %q, another node %q", n.Addr, owners, agreed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Redis Cluster healthy: %v", err)
	}
}

// KeySlot returns the cluster slot of key, as Redis computes it: the
// CRC16 (XMODEM) of the key, or of its hash tag (the text between its
// first "{" and the next "}", if not empty), modulo 16384. Tests use it to
// know which node a key lives on.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
