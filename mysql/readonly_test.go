package mysql

import (
	"context"
	"errors"
	"sync"
	"testing"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// TestReadOnlyConnectionsClosed: after a failover the pool's connections
// may reach a writer that was demoted, which refuses writes on them while
// new connections reach the new writer. Once a connection is refused as
// read-only the store must close its connections, or it goes on refusing
// writes until they are recycled (an hour later).
func TestReadOnlyConnectionsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.MySQLURL(t)
	root, err := Open(ctx, dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ro := testenv.MySQLReadOnly(t, dbURL, testenv.SessionsReadOnly)
	s, err := Open(ctx, ro.URL, 4)
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
