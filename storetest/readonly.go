package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
)

// ReadOnlyConnectionsClosed checks a store on a database server (mysql,
// postgres): after a failover the pool's connections may reach a writer
// that was demoted, which refuses writes on them while new connections
// reach the new writer. Once a connection is refused as read-only the
// store must close its connections, or it goes on refusing writes until
// they are recycled (an hour later). dbURL is an empty database of the
// test's own; readOnly makes a user of it whose sessions the test makes
// read-only (faults.MySQLReadOnly, faults.PostgresReadOnly); open opens a store on a URL.
func ReadOnlyConnectionsClosed(t *testing.T, dbURL string, readOnly func(t testing.TB, dbURL string) *faults.ReadOnlyDB,
	open func(ctx context.Context, url string, maxConns int) (seckill.Store, error)) {
	ctx := context.Background()
	root, err := open(ctx, dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, dbURL)
	s, err := open(ctx, ro.URL, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable before: %v", err)
	}
	ro.Set(true)
	// Writes at once: each on a connection of its own, made read-only.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Writable(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, seckill.ErrTransient) {
			t.Fatalf("Writable of a read-only session = %v; want a transient error", err)
		}
	}
	ro.Set(false)
	if err := s.Writable(ctx); err != nil {
		t.Errorf("Writable once the server takes writes again = %v: a connection that was read-only was used again", err)
	}
}
