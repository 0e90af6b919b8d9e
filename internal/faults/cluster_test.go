package faults

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/seckill/seckill/internal/testenv"
)

// TestMain checks that no goroutine outlives the tests: the shared
// deployments run on after them, and must do so without one, since the
// packages that use them check for leaks too. A rueidis cluster client
// that saw a node leave closes its connection to it 5s later, from a
// goroutine that outlives Close: that one is rueidis', not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

func TestRedisProcKillPauseResumeRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := StartRedisProc(t, "--maxmemory", "10mb")
	if p.Port < 12000 || p.Port >= 22000 || p.Addr != "127.0.0.1:"+strconv.Itoa(p.Port) {
		t.Fatalf("Addr %s, Port %d: want 127.0.0.1 and a port in 12000-21999", p.Addr, p.Port)
	}
	if p.PID() <= 0 {
		t.Fatalf("PID() = %d", p.PID())
	}
	if v, err := p.Do(ctx, "CONFIG", "GET", "maxmemory"); err != nil || len(v.([]any)) != 2 || v.([]any)[1] != "10485760" {
		t.Fatalf("CONFIG GET maxmemory = %v, %v: the args did not reach the server", v, err)
	}
	if v, err := p.Do(ctx, "CONFIG", "GET", "save"); err != nil || v.([]any)[1] != "" {
		t.Fatalf("CONFIG GET save = %v, %v: want no snapshots", v, err)
	}
	if r := p.Role(); r != "master" {
		t.Fatalf("Role() = %q", r)
	}
	if _, err := p.Do(ctx, "NOSUCHCOMMAND"); !errors.As(err, new(ReplyError)) {
		t.Fatalf("an unknown command gave %v, want a ReplyError", err)
	}

	p.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := p.Do(short, "PING")
	cancel()
	if err == nil {
		t.Fatal("a paused server answered PING")
	}
	p.Resume()
	if v, err := p.Do(ctx, "PING"); v != "PONG" || err != nil {
		t.Fatalf("PING after Resume = %v, %v", v, err)
	}

	if _, err := p.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	p.Kill() // idempotent
	if p.PID() != 0 || p.Role() != "" {
		t.Fatalf("after Kill: PID() = %d, Role() = %q", p.PID(), p.Role())
	}
	if _, err := p.Do(ctx, "PING"); err == nil {
		t.Fatal("a killed server answered PING")
	}

	addr := p.Addr
	p.Restart(t)
	if p.Addr != addr {
		t.Fatalf("restarted on %s, not %s", p.Addr, addr)
	}
	if v, err := p.Do(ctx, "GET", "k"); v != nil || err != nil {
		t.Fatalf("GET k after a restart without persistence = %v, %v; want nil", v, err)
	}
	if v, err := p.Do(ctx, "CONFIG", "GET", "maxmemory"); err != nil || v.([]any)[1] != "10485760" {
		t.Fatalf("CONFIG GET maxmemory after Restart = %v, %v: the args were not kept", v, err)
	}
}

func TestLazyGivesEveryCallerTheFailure(t *testing.T) {
	t.Parallel()
	var l lazy[int]
	starts := 0
	start := func() (int, error) { starts++; return 0, errors.New("boom") }
	for range 2 {
		if _, err := l.get(start); err == nil || err.Error() != "boom" {
			t.Fatalf("get = %v, want boom", err)
		}
	}
	if starts != 1 {
		t.Fatalf("started %d times, want once", starts)
	}

	var p lazy[int]
	func() {
		defer func() { recover() }()
		p.get(func() (int, error) { panic("start") })
	}()
	if _, err := p.get(func() (int, error) { return 1, nil }); err == nil {
		t.Fatal("after a start that panicked, get gave no error")
	}
}

func TestSharedClusterForms(t *testing.T) {
	t.Parallel()
	c := SharedCluster(t)
	if again := SharedCluster(t); again != c {
		t.Fatal("SharedCluster started a second cluster")
	}
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	for _, n := range c.Nodes {
		info, err := n.Do(context.Background(), "CLUSTER", "INFO")
		text, _ := info.(string)
		if s := infoField(text, "cluster_state"); err != nil || s != "ok" {
			t.Errorf("%s: cluster_state:%s (%v)", n.Addr, s, err)
		}
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	seen := map[*RedisProc]bool{}
	for _, m := range masters {
		r := c.ReplicaOf(t, m)
		if seen[m] || seen[r] || m == r {
			t.Fatalf("master %s or its replica %s counted twice", m.Addr, r.Addr)
		}
		seen[m], seen[r] = true, true
		if m.Role() != "master" || r.Role() != "slave" {
			t.Errorf("%s is %s, its replica %s is %s", m.Addr, m.Role(), r.Addr, r.Role())
		}
		repl := r.Info("replication")
		if infoField(repl, "master_port") != strconv.Itoa(m.Port) || infoField(repl, "master_link_status") != "up" {
			t.Errorf("replica %s of %s: master_port:%s master_link_status:%s", r.Addr, m.Addr,
				infoField(repl, "master_port"), infoField(repl, "master_link_status"))
		}
	}

	opt, err := rueidis.ParseURL(c.URL)
	if err != nil {
		t.Fatalf("parse %s: %v", c.URL, err)
	}
	if len(opt.InitAddress) != 6 {
		t.Fatalf("%s names %d nodes, want 6", c.URL, len(opt.InitAddress))
	}
	client := testenv.RawRedis(t, c.URL)
	if m := client.Mode(); m != rueidis.ClientModeCluster {
		t.Fatalf("client mode %s, want cluster", m)
	}
	ctx := context.Background()
	prefix := "t" + testenv.Random()
	onMaster := map[*RedisProc]bool{}
	for i := range 12 {
		key := prefix + ":" + strconv.Itoa(i)
		if err := client.Do(ctx, client.B().Set().Key(key).Value("v").Ex(time.Minute).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m := c.MasterOf(t, key)
		onMaster[m] = true
		if v, err := m.Do(ctx, "GET", key); v != "v" || err != nil {
			t.Fatalf("GET %s on its master %s = %v, %v", key, m.Addr, v, err)
		}
	}
	if len(onMaster) < 2 {
		t.Fatalf("12 keys all on one master: MasterOf or KeySlot is wrong")
	}
}

func TestKeySlotIsClusterKeyslot(t *testing.T) {
	t.Parallel()
	// The check value of CRC16/XMODEM is 0x31C3.
	if got := KeySlot("123456789"); got != 0x31C3 {
		t.Fatalf("KeySlot(123456789) = %d, want %d", got, 0x31C3)
	}
	if KeySlot("seckill:{v12}:stock") != KeySlot("v12") {
		t.Fatal("a hash tag does not choose the slot")
	}
	c := SharedCluster(t)
	keys := []string{
		"", "a", "foo", "seckill:{v12}:stock", "seckill:{v12}:users", "{v12}",
		"{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"{", "}", "{}", "a}b{c", "{a", "\xff\x00\x80", "t0123456789ab:order:42",
	}
	ctx := context.Background()
	for _, key := range keys {
		v, err := c.Nodes[0].Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		if got, want := KeySlot(key), v.(int64); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

func TestClusterFailsOverAKilledMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("StartCluster took %v", time.Since(start))
	key := "t" + testenv.Random() + ":{failover}:k"
	m := c.MasterOf(t, key)
	r := c.ReplicaOf(t, m)
	// WAIT on the connection of the write: the replica has it.
	replies, err := m.DoMulti(ctx, []string{"SET", key, "v"}, []string{"WAIT", "1", "5000"})
	if err != nil || replies[1] != int64(1) {
		t.Fatalf("SET and WAIT 1 on %s = %v, %v", m.Addr, replies, err)
	}

	// A client of the cluster as it was, to follow it through the failover.
	client := testenv.RawRedis(t, c.URL)

	m.Kill()
	start = time.Now()
	c.WaitHealthy(t, 30*time.Second)
	t.Logf("failover took %v", time.Since(start))
	if now := c.MasterOf(t, key); now != r {
		t.Fatalf("master of %s is %s, want its old replica %s", key, now.Addr, r.Addr)
	}
	if role := r.Role(); role != "master" {
		t.Fatalf("promoted replica says role:%s", role)
	}
	if v, err := r.Do(ctx, "GET", key); v != "v" || err != nil {
		t.Fatalf("GET %s on the new master = %v, %v", key, v, err)
	}
	for _, old := range c.Masters(t) {
		if old == m {
			t.Fatalf("the killed node %s is still among the masters", m.Addr)
		}
	}

	start = time.Now()
	testenv.WaitFor(t, 10*time.Second, "the cluster client reads the key after the failover", func() bool {
		v, err := client.Do(ctx, client.B().Get().Key(key).Build()).ToString()
		return err == nil && v == "v"
	})
	t.Logf("the cluster client read the key %v after WaitHealthy", time.Since(start))

	// The killed node comes back as a replica of the one that took its
	// place.
	m.Restart(t)
	testenv.WaitFor(t, 20*time.Second, "the restarted master follows its successor", func() bool {
		repl := m.Info("replication")
		return infoField(repl, "role") == "slave" && infoField(repl, "master_port") == strconv.Itoa(r.Port) &&
			infoField(repl, "master_link_status") == "up"
	})
	c.WaitHealthy(t, 20*time.Second)
	if got := c.ReplicaOf(t, r); got != m {
		t.Fatalf("replica of %s is %s, want the restarted %s", r.Addr, got.Addr, m.Addr)
	}
}

func TestSentinelFailsOverAKilledMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("StartSentinel took %v", time.Since(start))
	old := s.CurrentMaster(t)
	if old != s.Master.Addr {
		t.Fatalf("sentinels name %s, want %s", old, s.Master.Addr)
	}
	if s.Master.Role() != "master" || s.Replica.Role() != "slave" {
		t.Fatalf("master says %s, replica says %s", s.Master.Role(), s.Replica.Role())
	}
	opt, err := rueidis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Sentinel.MasterSet != s.MasterSet || len(opt.InitAddress) != 3 {
		t.Fatalf("%s parses to master set %q and %d addresses", s.URL, opt.Sentinel.MasterSet, len(opt.InitAddress))
	}
	client := testenv.RawRedis(t, s.URL)
	if m := client.Mode(); m != rueidis.ClientModeSentinel {
		t.Fatalf("client mode %s, want sentinel", m)
	}
	prefix := "t" + testenv.Random()
	replies, err := s.Master.DoMulti(ctx, []string{"SET", prefix + ":before", "v"}, []string{"WAIT", "1", "5000"})
	if err != nil || replies[1] != int64(1) {
		t.Fatalf("SET and WAIT 1 on the master = %v, %v", replies, err)
	}
	if v, err := client.Do(ctx, client.B().Get().Key(prefix+":before").Build()).ToString(); v != "v" || err != nil {
		t.Fatalf("GET through the sentinel client = %q, %v", v, err)
	}

	s.Master.Kill()
	start = time.Now()
	now := s.WaitFailover(t, old, 30*time.Second)
	t.Logf("failover took %v", time.Since(start))
	if now != s.Replica.Addr {
		t.Fatalf("new master %s, want the replica %s", now, s.Replica.Addr)
	}
	if got := s.CurrentMaster(t); got != now {
		t.Fatalf("CurrentMaster = %s after WaitFailover returned %s", got, now)
	}
	start = time.Now()
	testenv.WaitFor(t, 15*time.Second, "the sentinel client writes to the new master", func() bool {
		return client.Do(ctx, client.B().Set().Key(prefix+":after").Value("w").Build()).Error() == nil
	})
	t.Logf("the sentinel client wrote %v after WaitFailover", time.Since(start))
	if v, err := s.Replica.Do(ctx, "GET", prefix+":after"); v != "w" || err != nil {
		t.Fatalf("the client's write is not on the new master: GET = %v, %v", v, err)
	}
	if v, err := client.Do(ctx, client.B().Get().Key(prefix+":before").Build()).ToString(); v != "v" || err != nil {
		t.Fatalf("GET of the key written before the failover = %q, %v", v, err)
	}
}

func TestSharedSentinel(t *testing.T) {
	t.Parallel()
	s := SharedSentinel(t)
	if again := SharedSentinel(t); again != s {
		t.Fatal("SharedSentinel started a second deployment")
	}
	if got := s.CurrentMaster(t); got != s.Master.Addr {
		t.Fatalf("sentinels name %s, want %s", got, s.Master.Addr)
	}
	if len(s.Sentinels) != 3 || s.Proc(s.Replica.Addr) != s.Replica || s.Proc("127.0.0.1:1") != nil {
		t.Fatalf("%d sentinels; Proc is wrong", len(s.Sentinels))
	}
	for _, sn := range s.Sentinels {
		if err := s.sees(sn); err != nil {
			t.Errorf("sentinel %s: %v", sn.Addr, err)
		}
	}
	client := testenv.RawRedis(t, s.URL)
	ctx := context.Background()
	key := "t" + testenv.Random() + ":k"
	if err := client.Do(ctx, client.B().Set().Key(key).Value("v").Ex(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Master.Do(ctx, "GET", key); v != "v" || err != nil {
		t.Fatalf("the client's write is not on the master: GET = %v, %v", v, err)
	}
}
