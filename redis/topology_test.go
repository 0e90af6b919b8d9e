package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestKeySlot checks keySlot against slots Redis Cluster documents
// (CLUSTER KEYSLOT) and the hash-tag rule every voucher's keys rely on.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{
		"foo":                    12182,
		"bar":                    5061,
		"hello":                  866,
		"{user1000}.following":   3443,
		"{user1000}.followers":   3443,
		"foo{}{bar}":             8363, // an empty tag: the whole key
		"foo{{bar}}zap":          4015, // the tag is "{bar"
		"seckill:{v1}:stock":     keySlot("v1"),
		"another:{v1}:buyers:xx": keySlot("v1"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestTopologyCluster: on a Cluster, Topology names its three masters with
// every slot, VoucherMaster agrees with the Cluster on the master of each
// voucher's keys, and Identity names every master.
func TestTopologyCluster(t *testing.T) {
	t.Parallel()
	cl := faults.SharedCluster(t)
	ctx := context.Background()
	c := openCluster(t, cl)
	if c.Kind() != KindCluster {
		t.Fatalf("Kind() = %q, want %q", c.Kind(), KindCluster)
	}
	topo, err := c.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Masters) != 3 {
		t.Fatalf("Topology: %d masters, want 3: %v", len(topo.Masters), topo)
	}
	covered := 0
	for _, m := range topo.Masters {
		if len(m.Replicas) != 1 {
			t.Errorf("master %s: replicas %v, want 1", m.Addr, m.Replicas)
		}
		for _, r := range m.Slots {
			covered += r[1] - r[0] + 1
		}
	}
	if covered != 16384 {
		t.Errorf("the masters serve %d slots, want 16384", covered)
	}
	if got := topo.Summary(); got != "cluster: 3 masters, 3 replicas" {
		t.Errorf("Summary() = %q", got)
	}
	seen := map[string]bool{}
	for id := int64(1); id <= 30; id++ {
		got := topo.VoucherMaster(c.keys, id)
		want := cl.MasterOf(t, c.keys.voucher(id).Stock).Addr
		if got != want {
			t.Errorf("VoucherMaster(%d) = %s, the Cluster says %s", id, got, want)
		}
		seen[got] = true
	}
	if len(seen) != 3 {
		t.Errorf("30 vouchers on %d masters, want all 3", len(seen))
	}
	id, err := c.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(id, ","); n != 2 {
		t.Errorf("Identity() = %q: want one part per master", id)
	}
}

// TestTopologySingle: one server is KindSingle with one master and the
// replicas it lists; arming admission arms the master only, so a replica
// promoted later refuses admissions until its data is checked.
func TestTopologySingle(t *testing.T) {
	t.Parallel()
	master := faults.StartRedisProc(t)
	replica := faults.StartRedisProc(t, "--replicaof", "127.0.0.1", itoa(master.Port))
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + master.Addr}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.WaitFor(t, defaultWait, "the replica to connect", func() bool {
		topo, err := c.Topology(ctx)
		return err == nil && len(topo.Masters) == 1 && len(topo.Masters[0].Replicas) == 1
	})
	topo, _ := c.Topology(ctx)
	if topo.Kind != KindSingle || topo.Masters[0].Addr != master.Addr {
		t.Errorf("Topology() = %+v, want single with master %s", topo, master.Addr)
	}
	arm(t, c)
	sha := c.admitLua.sha
	for _, node := range []*faults.RedisProc{master, replica} {
		got, err := node.Do(ctx, "SCRIPT", "EXISTS", sha)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		if node == master {
			want = 1
		}
		if fmt.Sprint(got) != fmt.Sprint([]any{want}) {
			t.Errorf("SCRIPT EXISTS admit on %s (%s) = %v, want [%d]", node.Addr, node.Role(), got, want)
		}
	}
}

// TestArmAdmissionChecksIdentity: a failover between the check and the
// arming leaves nothing armed. The identity is read, a master is killed
// and its replica promoted, then ArmAdmission with the identity checked
// before must refuse, and no master may hold the admission script.
func TestArmAdmissionChecksIdentity(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	c := openCluster(t, cl)
	checked, err := c.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ArmAdmission(ctx, "someone/else"); !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("ArmAdmission(an identity not the Cluster's) = %v, want ErrUnavailable", err)
	}
	cl.Masters(t)[0].Kill()
	cl.WaitHealthy(t, defaultWait)
	var armErr error
	testenv.WaitFor(t, defaultWait, "the client to see the new master", func() bool {
		armErr = c.ArmAdmission(ctx, checked)
		_, err := c.Identity(ctx)
		return err == nil && armErr != nil
	})
	if !errors.Is(armErr, seckill.ErrUnavailable) {
		t.Errorf("ArmAdmission(the identity before the failover) = %v, want ErrUnavailable", armErr)
	}
	sha := c.admitLua.sha
	for _, m := range cl.Masters(t) {
		got, err := m.Do(ctx, "SCRIPT", "EXISTS", sha)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[0]" {
			t.Errorf("master %s holds the admission script after an arming that failed: SCRIPT EXISTS = %v", m.Addr, got)
		}
	}
	// Checked again, it arms: once the client stops asking the dead
	// master (it may pick it for a keyless command until it refreshes).
	testenv.WaitFor(t, defaultWait, "arming with the identity after the failover", func() bool {
		now, err := c.Identity(ctx)
		return err == nil && now != checked && c.ArmAdmission(ctx, now) == nil
	})
}
