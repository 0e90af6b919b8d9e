package faults

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Sentinel is a Redis master with one replica, watched by three Redis
// Sentinels that fail it over: for tests of what the code does when its
// master dies and a replica takes its place.
type Sentinel struct {
	// Master and Replica are the data nodes as started; after a failover
	// CurrentMaster says which one is master.
	Master, Replica *RedisProc
	// Sentinels are the three sentinel processes.
	Sentinels []*RedisProc
	// MasterSet is the name the sentinels know the master by.
	MasterSet string
	// URL names the sentinels and the master set, in the form from which
	// rueidis.ParseURL makes a sentinel client:
	// redis://127.0.0.1:s1?addr=127.0.0.1:s2&addr=127.0.0.1:s3&master_set=seckill
	URL string
}

// sentinelMasterSet is the master set of every deployment: each has
// sentinels of its own, so the name need not differ.
const sentinelMasterSet = "seckill"

// sentinelTimeout bounds the start of a deployment: the sentinels find
// each other through hello messages sent every two seconds.
const sentinelTimeout = 60 * time.Second

// StartSentinel starts a master, its replica and three sentinels of the
// test's own, and stops them when the test ends: for tests that kill or
// pause the master. It returns once the replica is in sync and every
// sentinel names the master and sees the replica and the other two
// sentinels, so that a failover can start at once.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := lookRedis(t, "redis-server")
	s, err := startSentinel(newSpawner(t), bin)
	if err != nil {
		t.Fatalf("start Redis Sentinel: %v", err)
	}
	return s
}

var sharedSentinel lazy[*Sentinel]

// SharedSentinel returns the sentinel deployment of the test process,
// started by its first user and never stopped: for tests that neither kill
// nor pause its nodes, each under a key prefix of its own. A failed start
// fails every test that asks for it.
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := lookRedis(t, "redis-server")
	s, err := sharedSentinel.get(func() (*Sentinel, error) {
		sp, err := newSharedSpawner()
		if err != nil {
			return nil, err
		}
		return startSentinel(sp, bin)
	})
	if err != nil {
		t.Fatalf("start the shared Redis Sentinel: %v", err)
	}
	return s
}

// dataArgs make a replica sync at once rather than after the
// diskless-sync delay.
var dataArgs = []string{"--repl-diskless-sync-delay", "0"}

func startSentinel(sp *spawner, bin string) (s *Sentinel, err error) {
	defer func() {
		if err != nil {
			sp.killAll()
		}
	}()
	s = &Sentinel{MasterSet: sentinelMasterSet}
	dir, err := sp.dir()
	if err != nil {
		return nil, err
	}
	if s.Master, err = sp.start(bin, dir, nil, readyLine, dataArgs); err != nil {
		return nil, err
	}
	if dir, err = sp.dir(); err != nil {
		return nil, err
	}
	replicaArgs := append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(s.Master.Port)}, dataArgs...)
	if s.Replica, err = sp.start(bin, dir, nil, readyLine, replicaArgs); err != nil {
		return nil, err
	}
	// A sentinel learns of replicas from its master's INFO, which it asks
	// at once and then every ten seconds: the replica must be there first.
	err = poll(sentinelTimeout, func() error {
		if s := infoField(s.Replica.Info("replication"), "master_link_status"); s != "up" {
			return fmt.Errorf("replica: master_link_status:%s", s)
		}
		if s := infoField(s.Master.Info("replication"), "slave0"); !strings.Contains(s, "state=online") {
			return fmt.Errorf("master: slave0:%s", s)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the replica syncs: %w", err)
	}

	// redis-sentinel is redis-server in sentinel mode; either will do.
	sbin, head := bin, []string{"--sentinel"}
	if b, err := exec.LookPath("redis-sentinel"); err == nil {
		sbin, head = b, nil
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", s.MasterSet, s.Master.Port)
	s.Sentinels, err = sp.startAll(3, sbin, "+monitor", func(_ int, dir string) ([]string, []string, error) {
		// A sentinel rewrites its config file with what it learns: a
		// writable one in its own directory.
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, nil, err
		}
		return append([]string{path}, head...), nil, nil
	})
	if err != nil {
		return nil, err
	}
	err = poll(sentinelTimeout, func() error {
		for _, sn := range s.Sentinels {
			if err := s.sees(sn); err != nil {
				return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the sentinels are ready: %w", err)
	}
	s.URL = "redis://" + s.Sentinels[0].Addr + "?addr=" + s.Sentinels[1].Addr +
		"&addr=" + s.Sentinels[2].Addr + "&master_set=" + url.QueryEscape(s.MasterSet)
	return s, nil
}

// sees reports why sentinel sn is not yet ready to fail the master over.
func (s *Sentinel) sees(sn *RedisProc) error {
	if addr, err := s.masterAddr(sn); err != nil {
		return err
	} else if addr != s.Master.Addr {
		return fmt.Errorf("names master %s, not %s", addr, s.Master.Addr)
	}
	others, err := sentinelList(sn, "SENTINELS", s.MasterSet)
	if err != nil {
		return err
	}
	if len(others) != len(s.Sentinels)-1 {
		return fmt.Errorf("sees %d other sentinels", len(others))
	}
	replicas, err := sentinelList(sn, "REPLICAS", s.MasterSet)
	if err != nil {
		return err
	}
	if len(replicas) != 1 {
		return fmt.Errorf("sees %d replicas", len(replicas))
	}
	r := replicas[0]
	if addr := net.JoinHostPort(r["ip"], r["port"]); addr != s.Replica.Addr || r["flags"] != "slave" || r["master-link-status"] != "ok" {
		return fmt.Errorf("sees replica %s, flags %s, master link %s", addr, r["flags"], r["master-link-status"])
	}
	return nil
}

// masterAddr asks sentinel sn which node is master.
func (s *Sentinel) masterAddr(sn *RedisProc) (string, error) {
	v, err := sn.doShort("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterSet)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v", v)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// sentinelList runs SENTINEL SENTINELS or REPLICAS, whose reply is a list
// of field-value lists.
func sentinelList(sn *RedisProc, sub, set string) ([]map[string]string, error) {
	v, err := sn.doShort("SENTINEL", sub, set)
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("SENTINEL %s: %v", sub, v)
	}
	var list []map[string]string
	for _, e := range a {
		fields, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			m[k] = v
		}
		list = append(list, m)
	}
	return list, nil
}

// CurrentMaster returns the address of the master as the first live
// sentinel names it now.
func (s *Sentinel) CurrentMaster(t testing.TB) string {
	t.Helper()
	var errs []error
	for _, sn := range s.Sentinels {
		if !sn.live() {
			continue
		}
		addr, err := s.masterAddr(sn)
		if err == nil {
			return addr
		}
		errs = append(errs, fmt.Errorf("%s: %w", sn.Addr, err))
	}
	t.Fatalf("no sentinel names the master: %v", errors.Join(errs...))
	return ""
}

// Proc returns the data node at addr (Master or Replica), nil if neither
// is there.
func (s *Sentinel) Proc(addr string) *RedisProc {
	for _, p := range []*RedisProc{s.Master, s.Replica} {
		if p.Addr == addr {
			return p
		}
	}
	return nil
}

// WaitFailover waits until every live sentinel names the same master,
// other than old, and that node says role:master, and returns its address:
// then a client that asks any sentinel finds a master that takes writes.
func (s *Sentinel) WaitFailover(t testing.TB, old string, timeout time.Duration) string {
	t.Helper()
	var now string
	err := poll(timeout, func() error {
		now = ""
		for _, sn := range s.Sentinels {
			if !sn.live() {
				continue
			}
			addr, err := s.masterAddr(sn)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
			}
			if addr == old {
				return fmt.Errorf("sentinel %s still names %s", sn.Addr, old)
			}
			if now != "" && addr != now {
				return fmt.Errorf("sentinels name %s and %s", now, addr)
			}
			now = addr
		}
		if now == "" {
			return errors.New("no sentinel runs")
		}
		p := s.Proc(now)
		if p == nil {
			return fmt.Errorf("the sentinels name %s, not a node of this deployment", now)
		}
		if role := p.Role(); role != "master" {
			return fmt.Errorf("%s says role:%s", now, role)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sentinel failover from %s: %v", old, err)
	}
	return now
}
