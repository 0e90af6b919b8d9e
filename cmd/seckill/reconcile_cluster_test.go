package main

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/sqlite"
)

// TestReconcileAfterSeedMasterDies: on a six-node Cluster the first
// seed's master is killed with SIGKILL and its replica promoted; `seckill
// reconcile`, given the original seed addresses, must succeed every time.
// It read the Cluster's shards from the one node rueidis picked for a
// keyless command, the dead seed among them, and exited 1 ("connection
// refused") about as often as not.
func TestReconcileAfterSeedMasterDies(t *testing.T) {
	t.Parallel()
	cl := faults.StartCluster(t)
	ctx := context.Background()
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "seckill.db")
	store, err := sqlite.Open(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := &seckill.Voucher{Title: "on sale", Stock: 5, InitialStock: 5, BeginTime: now.Add(-time.Hour), EndTime: now.Add(time.Hour), Generation: 1}
	err = store.CreateVoucher(ctx, v)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--redis-url", cl.URL, "--redis-prefix", "t" + testenv.Random(), "--db-url", dbURL, "--log-level", "error"}
	reconcile := func(extra ...string) (string, error) {
		var out bytes.Buffer
		err := runReconcile(ctx, append(slices.Clone(args), extra...), func(string) string { return "" }, &out, &out)
		return out.String(), err
	}
	// Loaded into Redis, and checked, while every node is up.
	if out, err := reconcile("--repair", "--voucher", strconv.FormatInt(v.ID, 10)); err != nil {
		t.Fatalf("seckill reconcile --repair before the failover: %v\n%s", err, out)
	}
	seed := cl.Nodes[0]
	if seed.Role() != "master" {
		t.Fatalf("the first seed %s is a %s, want a master", seed.Addr, seed.Role())
	}
	seed.Kill()
	cl.WaitHealthy(t, time.Minute)
	for try := range 6 {
		if out, err := reconcile(); err != nil {
			t.Errorf("try %d: seckill reconcile after the first seed's master died: %v\n%s", try+1, err, out)
		}
	}
}
