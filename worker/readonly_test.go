package worker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/postgres"
)

// unclassified hides what the database's errors are from the worker, as a
// database error the store does not know would: a save fails with an error
// of no known kind.
type unclassified struct{ Store }

func (s unclassified) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	out, err := s.Store.SaveOrders(ctx, orders)
	if err != nil {
		return nil, errors.New(err.Error())
	}
	return out, nil
}

// TestDatabaseRefusesWrites: the database refuses writes for longer than
// six leases while buyers buy, then takes them again: read-only, as after a
// failover (the service's connections reach a standby, or a writer demoted
// under them), or with its disk full. The refusal is the database's state,
// not the orders': no delivery may count, so every order must be created in
// the end, none dead-lettered or failed; and connections that were
// read-only must be closed, or they go on refusing writes after the
// database takes them again. The unclassified cases hide the error's kind
// from the worker: it must find out that the database refuses writes, not
// blame the orders. (A disk full is known to every store: a database that
// takes a write that changes nothing and some orders but not others, for
// no reason it gives, cannot be told from orders that fail.)
func TestDatabaseRefusesWrites(t *testing.T) {
	t.Parallel()
	readOnly := func(mode faults.ReadOnlyMode) func(t *testing.T, b *rig) (Store, func(bool)) {
		return func(t *testing.T, b *rig) (Store, func(bool)) {
			ctx := context.Background()
			if strings.HasPrefix(b.dbURL, "mysql:") {
				ro := faults.MySQLReadOnly(t, b.dbURL, mode)
				s, err := mysql.Open(ctx, ro.URL, 8)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s, ro.Set
			}
			ro := faults.PostgresReadOnly(t, b.dbURL)
			s, err := postgres.Open(ctx, ro.URL, 8)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, ro.Set
		}
	}
	// The disk fills up: on PostgreSQL the orders' tablespace, on SQLite
	// the database file's.
	full := func(disk **faults.Disk) func(t *testing.T, b *rig) (Store, func(bool)) {
		return func(t *testing.T, b *rig) (Store, func(bool)) {
			if strings.HasPrefix(b.dbURL, "postgres:") {
				*disk = faults.MountDisk(t, 4<<20, "postgres")
				faults.PostgresTablespace(t, b.dbURL, *disk, "orders")
			}
			return b.store, (*disk).Set
		}
	}
	// Every commit is refused, with an error of no kind the store knows,
	// as a replication group out of quorum refuses them: a probe that
	// rolled its write back would take the database for well, and blame
	// orders read alone.
	commitRefused := func(t *testing.T, b *rig) (Store, func(bool)) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, b.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		exec := func(q string) {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
		exec(`CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'commit refused' USING ERRCODE = 'XX000'; END $$`)
		return b.store, func(on bool) {
			for _, table := range []string{"orders", "write_probe"} {
				if on {
					exec("CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT OR UPDATE ON " + table +
						" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()")
				} else {
					exec("DROP TRIGGER refuse_commit ON " + table)
				}
			}
		}
	}
	type setup func(t *testing.T, b *rig) (Store, func(on bool))
	cases := []struct {
		name, backend string
		setup         setup
		unclassified  bool
		// sqliteDisk: the SQLite file lives on a disk of the test's own.
		sqliteDisk bool
		// trickle: a buyer at a time, so that orders are read alone.
		trickle bool
		// burst: buyers admitted every 50 ms of the outage (default 5).
		// PostgreSQL extends a table by many pages at once while writers
		// wait on it, and writes them out at checkpoints: the orders of a
		// few seconds can fit in pages taken before the disk filled, and
		// the database then never refused one (seen in CI: all 820
		// created). Forty a step outgrow what it took.
		burst int
	}{
		{name: "mysql/read-only", backend: "mysql", setup: readOnly(faults.ServerReadOnly)},
		{name: "mysql/read-only-sessions", backend: "mysql", setup: readOnly(faults.SessionsReadOnly)},
		{name: "mysql/read-only-sessions/unclassified", backend: "mysql", setup: readOnly(faults.SessionsReadOnly), unclassified: true},
		{name: "postgres/read-only", backend: "postgres", setup: readOnly(0)},
		{name: "postgres/read-only/unclassified", backend: "postgres", setup: readOnly(0), unclassified: true},
		{name: "postgres/disk-full", backend: "postgres", burst: 40},
		{name: "postgres/commit-refused", backend: "postgres", setup: commitRefused, trickle: true},
		{name: "sqlite/disk-full", backend: "sqlite", sqliteDisk: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const lease = time.Second
			var (
				dbURL string
				disk  *faults.Disk
			)
			if c.sqliteDisk {
				disk = faults.MountDisk(t, 4<<20, "")
				dbURL = "sqlite://" + filepath.Join(disk.Dir, "seckill.db")
			}
			b := newRigOn(t, c.backend, dbURL, 10_000)
			ctx := context.Background()
			setup := c.setup
			if setup == nil {
				setup = full(&disk)
			}
			store, refuse := setup(t, b)
			if c.unclassified {
				store = unclassified{store}
			}
			var admitted int64
			admit := func(n int) {
				for range n {
					b.admit(100_000 + admitted)
					admitted++
				}
			}
			b.poolWith(Config{
				Consumer: "w", Workers: 2, BatchSize: 50,
				Lease: lease, ReclaimEvery: 50 * time.Millisecond,
				Block: 50 * time.Millisecond, WatchEvery: 100 * time.Millisecond,
				BreakerMin: 10 * time.Millisecond, BreakerMax: 100 * time.Millisecond,
				BackoffMax: 100 * time.Millisecond,
			}, nil, store, prometheus.NewRegistry(), true).Watch(b.voucher)
			admit(100)
			testenv.WaitFor(t, 20*time.Second, "the first orders created", func() bool {
				n, _ := b.store.CountOrders(ctx, b.voucher.ID)
				return n == admitted
			})

			refuse(true)
			outage := time.After(8 * lease)
			pace, n := 50*time.Millisecond, 5
			if c.burst > 0 {
				n = c.burst
			}
			if c.trickle {
				pace, n = 300*time.Millisecond, 1
			}
			for down := true; down; {
				select {
				case <-outage:
					down = false
				case <-time.After(pace):
					admit(n)
				}
			}
			// A full disk may still take orders into the pages it has.
			if created, _ := b.store.CountOrders(ctx, b.voucher.ID); created == admitted {
				t.Errorf("all %d orders created while the database refused writes: the test did not make it refuse them", created)
			}
			if id, n := b.mostDelivered(); n > 2 {
				t.Errorf("order message %s delivered %d times while the database refused writes, want at most 2", id, n)
			}
			if dl := b.dlqLen(); dl != 0 {
				t.Errorf("%d dead letters while the database refused writes, want none", dl)
			}
			refuse(false)

			testenv.WaitFor(t, 60*time.Second, "every order settled", func() bool {
				created, _ := b.store.CountOrders(ctx, b.voucher.ID)
				return created+b.dlqLen() == admitted && b.pending() == 0
			})
			created, _ := b.store.CountOrders(ctx, b.voucher.ID)
			failed, _ := b.store.CountFailedOrders(ctx, b.voucher.ID)
			if dl := b.dlqLen(); created != admitted || dl != 0 || failed != 0 {
				t.Errorf("%d orders created, %d dead-lettered, %d failed; want all %d created", created, dl, failed, admitted)
			}
			if v := b.dbVoucher(); v.Stock != v.InitialStock-admitted {
				t.Errorf("database stock %d, want %d", v.Stock, v.InitialStock-admitted)
			}
			t.Logf("%d orders admitted, %d while the database refused writes for %v", admitted, admitted-100, 8*lease)
		})
	}
}

// refusedOrders refuses every order, while on, with an error of no kind a
// store knows; the database itself takes writes (the probe's). It counts
// the saves.
type refusedOrders struct {
	Store
	on    atomic.Bool
	saves atomic.Int64
}

func (s *refusedOrders) SaveOrders(ctx context.Context, orders []*seckill.Order) ([]seckill.SaveOutcome, error) {
	s.saves.Add(1)
	if s.on.Load() {
		return nil, errors.New("injected refusal of no known kind")
	}
	return s.Store.SaveOrders(ctx, orders)
}

// TestStuckBatchBacksOff: a database that commits the probe's write but
// refuses every order for no reason it gives cannot be told from orders
// that fail; a batch read together whose orders all fail is taken for the
// database's state and saved again in place. It must wait behind the
// circuit breaker between tries, not save each order again and again (700
// saves a second from one slot before), and count no delivery; once the
// database takes orders, all are created.
func TestStuckBatchBacksOff(t *testing.T) {
	t.Parallel()
	b := newRig(t, "mysql", 100)
	ctx := context.Background()
	store := &refusedOrders{Store: b.store}
	store.on.Store(true)
	// Admitted before the pool reads: one batch.
	for u := range int64(20) {
		b.admit(u + 1)
	}
	b.poolWith(Config{
		Consumer: "w", Lease: time.Second, ReclaimEvery: 100 * time.Millisecond,
		Block: 50 * time.Millisecond, WatchEvery: 100 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
	}, nil, store, prometheus.NewRegistry(), true).Watch(b.voucher)
	time.Sleep(5 * time.Second) // a window to count the saves in, not a wait for an event
	if n := store.saves.Load(); n > 150 {
		t.Errorf("%d saves of 20 stuck orders in 5s, want a few dozen: the batch is not held back", n)
	}
	if id, n := b.mostDelivered(); n > 1 {
		t.Errorf("order message %s delivered %d times, want once: the database's state counted a delivery", id, n)
	}
	store.on.Store(false)
	testenv.WaitFor(t, 60*time.Second, "the orders created", func() bool {
		n, _ := b.store.CountOrders(ctx, b.voucher.ID)
		return n == 20
	})
	if dl := b.dlqLen(); dl != 0 {
		t.Errorf("%d dead letters, want none", dl)
	}
}
