package faults

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/seckill/seckill/internal/testenv"
)

// ReadOnlyDB is a database user of the test's own, on the test MariaDB or
// PostgreSQL, whose sessions the test can make read-only, as a failover
// does to the connections of a service: to a standby that refuses writes,
// or to a writer demoted under its pooled connections, which go on
// refusing writes after the new writer is up until they are closed.
//
// The superuser the other tests connect as is never refused: on MariaDB
// read_only and init_connect spare users with READ_ONLY ADMIN and SUPER,
// on PostgreSQL the setting is the user's own.
type ReadOnlyDB struct {
	// URL is the database's URL as the test's user.
	URL string

	t   testing.TB
	mu  sync.Mutex
	on  bool
	set func(ctx context.Context, on bool) error
}

// ReadOnlyMode says how a MariaDB user's sessions refuse writes.
type ReadOnlyMode int

const (
	// ServerReadOnly sets read_only: every session of the user refuses
	// writes (error 1290) until it is unset, as a server that became a
	// replica does.
	ServerReadOnly ReadOnlyMode = iota
	// SessionsReadOnly makes each new session of the user read-only
	// (init_connect; error 1792) and ends the user's sessions: those made
	// while it is on stay read-only after it is off, as connections to a
	// demoted writer do.
	SessionsReadOnly
)

// MySQLReadOnly makes a user of the test's own for the database of
// dbURL (a URL of MySQLURL), and returns it.
//
// MariaDB's read_only and init_connect are the server's, and refuse the
// writes of every user but the superuser: a test that uses them holds a
// named lock on the server from now to its end, and the others (in other
// packages too: other processes) wait for it. Held only while one was
// read-only, another's user's sessions made meanwhile came out read-only.
func MySQLReadOnly(t testing.TB, dbURL string, mode ReadOnlyMode) *ReadOnlyDB {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	admin := mysqlAdmin(t, u)
	ctx := context.Background()
	lock, err := admin.Conn(ctx)
	if err != nil {
		t.Fatalf("MariaDB: %v", err)
	}
	var got sql.NullInt64
	if err := lock.QueryRowContext(ctx, "SELECT GET_LOCK('seckill_test_read_only', 1200)").Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("MariaDB: take the lock on read_only: %v (%v)", got, err)
	}
	user, password := "seckill_u_"+testenv.Random(), testenv.Random()
	db := strings.TrimPrefix(u.Path, "/")
	for _, stmt := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", db, user),
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("MariaDB: %s: %v", stmt, err)
		}
	}
	r := &ReadOnlyDB{t: t}
	uu := *u
	uu.User = url.UserPassword(user, password)
	r.URL = uu.String()
	r.set = func(ctx context.Context, on bool) error {
		var stmts []string
		switch {
		case mode == ServerReadOnly && on:
			stmts = []string{"SET GLOBAL read_only = 1"}
		case mode == ServerReadOnly:
			stmts = []string{"SET GLOBAL read_only = 0"}
		case on:
			stmts = []string{"SET GLOBAL init_connect = 'SET SESSION TRANSACTION READ ONLY'"}
		default:
			stmts = []string{"SET GLOBAL init_connect = ''"}
		}
		for _, stmt := range stmts {
			if _, err := admin.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		if on && mode == SessionsReadOnly {
			ids, err := queryInts(ctx, admin, "SELECT id FROM information_schema.processlist WHERE user = ?", user)
			if err != nil {
				return err
			}
			for _, id := range ids {
				admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)) // it may have ended
			}
		}
		return nil
	}
	t.Cleanup(func() {
		r.Set(false)
		ctx := context.Background()
		admin.ExecContext(ctx, fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user))
		lock.ExecContext(ctx, "DO RELEASE_LOCK('seckill_test_read_only')")
		lock.Close()
		admin.Close()
	})
	return r
}

// PostgresReadOnly makes a role of the test's own that may use the schema
// of dbURL (a URL of PostgresURL) and everything in it, and returns it.
// Call it after the schema's tables are made.
func PostgresReadOnly(t testing.TB, dbURL string) *ReadOnlyDB {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	schema := u.Query().Get("search_path")
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	role := "seckill_r_" + testenv.Random()
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT ALL ON SCHEMA " + schema + " TO " + role,
		"GRANT ALL ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("PostgreSQL: %s: %v", stmt, err)
		}
	}
	r := &ReadOnlyDB{t: t}
	uu := *u
	uu.User = url.User(role)
	r.URL = uu.String()
	r.set = func(ctx context.Context, on bool) error {
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER ROLE %s SET default_transaction_read_only = %t", role, on)); err != nil {
			return err
		}
		if on {
			// The sessions open now reconnect read-only, as to a standby;
			// those made while it is on stay read-only after.
			_, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
			return err
		}
		return nil
	}
	t.Cleanup(func() {
		r.Set(false)
		ctx := context.Background()
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		for _, stmt := range []string{"REASSIGN OWNED BY " + role + " TO CURRENT_USER", "DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Errorf("PostgreSQL: %s: %v", stmt, err)
			}
		}
		admin.Close(ctx)
	})
	return r
}

// Set makes the user's sessions refuse writes (on) or take them again (off,
// for new sessions; in SessionsReadOnly and on PostgreSQL, the sessions
// made while it was on still refuse them).
func (r *ReadOnlyDB) Set(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on == on {
		return
	}
	if err := r.set(context.Background(), on); err != nil {
		r.t.Errorf("make the database read-only=%t: %v", on, err)
		return
	}
	r.on = on
}

// mysqlAdmin opens the test MariaDB as the user of u, with no database.
func mysqlAdmin(t testing.TB, u *url.URL) *sql.DB {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open MariaDB: %v", err)
	}
	return admin
}

func queryInts(ctx context.Context, db *sql.DB, q string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
