package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// backendPID returns the server process of a connection of the pool.
func backendPID(t *testing.T, s *Store) uint32 {
	t.Helper()
	var pid uint32
	err := s.with(t.Context(), func(conn *pgx.Conn) error {
		pid = conn.PgConn().PID()
		return nil
	})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return pid
}

func TestPoolDropsBrokenConnections(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := Open(t.Context(), url, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	pid := backendPID(t, s)

	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatalf("terminate the store's connection: %v", err)
	}

	// The idle connection is dead: the first call may fail, as a transient
	// failure, and must not leave it in the pool.
	if err := s.Ping(t.Context()); err != nil && !errors.Is(err, seckill.ErrTransient) {
		t.Errorf("Ping on a terminated connection: %v; want success or an error wrapping ErrTransient", err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after the broken connection: %v", err)
	}
	if got := backendPID(t, s); got == pid {
		t.Errorf("the pool still hands out the terminated connection %d", pid)
	}
}
