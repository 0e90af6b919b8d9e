package storetest

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

// versions returns the migration versions the store's database recorded.
func versions(tb testing.TB, st seckill.Store) []int {
	tb.Helper()
	v, ok := st.(Versioner)
	if !ok {
		tb.Fatalf("%T does not implement storetest.Versioner", st)
	}
	vs, err := v.Versions(tb.Context())
	if err != nil {
		tb.Fatalf("Versions: %v", err)
	}
	return vs
}

// wantVersions are the migrations every backend has: 0001_init,
// 0002_failed_orders, 0003_voucher_generation, 0004_write_probe,
// 0005_voucher_shards, 0006_voucher_payment, 0007_order_lifecycle,
// 0008_voucher_challenge, 0009_voucher_controls, 0010_payment_started,
// 0011_refund_requests, 0012_voucher_sale and
// 0013_order_amount. A migration added to the backends is added here too.
var wantVersions = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

// checkVersions fails tb unless vs is wantVersions: each migration
// recorded once, none skipped, none missing.
func checkVersions(tb testing.TB, vs []int) {
	tb.Helper()
	if diff := cmp.Diff(wantVersions, vs); diff != "" {
		tb.Errorf("recorded migration versions (-want +got):\n%s", diff)
	}
}

func (s suite) testMigrateTwice(t *testing.T) {
	st := s.store(t)
	first := versions(t, st)
	checkVersions(t, first)
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if diff := cmp.Diff(first, versions(t, st)); diff != "" {
		t.Errorf("versions after a second Migrate (-first +second):\n%s", diff)
	}
	// The schema is whole: every table is usable.
	v := newVoucher(t, st, 1)
	if _, _, err := st.EnsureUser(t.Context(), "13800000000"); err != nil {
		t.Errorf("EnsureUser after two migrations: %v", err)
	}
	save(t, st, order(1, v.ID))
	fail(t, st, order(2, v.ID), "failed")
}

func (s suite) testMigrateConcurrent(t *testing.T) {
	open := s.newDB(t)
	const n = 4
	stores := make([]seckill.Store, n)
	for i := range stores {
		stores[i] = open(t)
	}
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			<-start
			errs[i] = st.Migrate(t.Context())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate by store %d of %d at once: %v", i, n, err)
		}
	}
	vs := versions(t, stores[0])
	checkVersions(t, vs)
	for i, st := range stores[1:] {
		if diff := cmp.Diff(vs, versions(t, st)); diff != "" {
			t.Errorf("versions seen by store %d (-store 0 +store %d):\n%s", i+1, i+1, diff)
		}
	}
	v := newVoucher(t, stores[n-1], 1)
	save(t, stores[0], order(1, v.ID))
	fail(t, stores[1], order(2, v.ID), "failed")
}

func (s suite) testVersionsBeforeMigrate(t *testing.T) {
	st := s.newDB(t)(t)
	if vs := versions(t, st); len(vs) != 0 {
		t.Errorf("Versions before Migrate = %v; want none", vs)
	}
}

// testWritable: a migrated database takes the probe's write, again and
// again, and the probe changes no voucher; a closed store fails it.
func (s suite) testWritable(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := newVoucher(t, st, 10)
	for range 2 {
		if err := st.Writable(ctx); err != nil {
			t.Fatalf("Writable: %v", err)
		}
	}
	if got, err := st.Voucher(ctx, v.ID); err != nil || got.Stock != 10 {
		t.Errorf("the voucher after Writable = %+v, %v; want its stock 10 unchanged", got, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Writable(ctx); err == nil {
		t.Error("Writable after Close succeeded; want an error")
	}
}

func (s suite) testPingAfterClose(t *testing.T) {
	open := s.newDB(t)
	st := open(t)
	if err := st.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Ping(t.Context()); err == nil {
		t.Error("Ping after Close succeeded; want an error")
	}
}
