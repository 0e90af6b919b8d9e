package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"

	seckill "github.com/seckill/seckill"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url                    string
		host                   string
		port                   uint16
		user, password, dbName string
		runtime                map[string]string // beyond pgx's own
		connectTimeout         time.Duration
	}{
		{
			url:  "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			host: "127.0.0.1", port: 5432, user: "postgres", dbName: "test",
		},
		{
			url:  "postgresql://seckill:p%40ss@db.example.com/shop?sslmode=disable&search_path=tenant_1&application_name=seckill",
			host: "db.example.com", port: 5432, user: "seckill", password: "p@ss", dbName: "shop",
			runtime: map[string]string{"search_path": "tenant_1", "application_name": "seckill"},
		},
		{
			url:  "postgres://u@h/shop?sslmode=disable&idle_in_transaction_session_timeout=1min",
			host: "h", port: 5432, user: "u", dbName: "shop",
			runtime: map[string]string{"idle_in_transaction_session_timeout": "1min"},
		},
		{
			url:  "postgres://u@[::1]:6432/shop?sslmode=disable&connect_timeout=3",
			host: "::1", port: 6432, user: "u", dbName: "shop", connectTimeout: 3 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			cfg, err := parseURL(tt.url)
			if err != nil {
				t.Fatalf("parseURL: %v", err)
			}
			type fields struct {
				Host, User, Password, Database string
				Port                           uint16
				ConnectTimeout                 time.Duration
			}
			want := fields{tt.host, tt.user, tt.password, tt.dbName, tt.port, tt.connectTimeout}
			cc := cfg.ConnConfig
			got := fields{cc.Host, cc.User, cc.Password, cc.Database, cc.Port, cc.ConnectTimeout}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("configuration (-want +got):\n%s", diff)
			}
			// A session idle in a transaction ends within 5s (parseURL),
			// unless the URL says otherwise.
			if _, ok := tt.runtime[idleParam]; !ok {
				if got := cfg.ConnConfig.RuntimeParams[idleParam]; got != "5s" {
					t.Errorf("%s = %q; want 5s", idleParam, got)
				}
			}
			for k, v := range tt.runtime {
				if got := cfg.ConnConfig.RuntimeParams[k]; got != v {
					t.Errorf("run-time parameter %s = %q; want %q", k, got, v)
				}
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, u := range []string{
		"",
		"host=localhost user=u password=secret dbname=shop",
		"mysql://u:secret@h/db",
		"pg://u:secret@h/db",
		"postgres:u:secret@h/db",
		"postgres://u:secret@h/db?sslmode=sometimes",
		"postgres://u:secret@h/db?connect_timeout=soon",
		"postgres://u:secret@h:port/db",
		"postgres://u:secret@h/%zz",
	} {
		t.Run(u, func(t *testing.T) {
			if _, err := parseURL(u); err == nil {
				t.Fatalf("parseURL(%q) succeeded; want an error", u)
			} else if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestOpenUnreachable(t *testing.T) {
	// Nothing listens on port 1: the error is one worth retrying later.
	s, err := Open(t.Context(), "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", 1)
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable server succeeded")
	}
	if !errors.Is(err, seckill.ErrTransient) {
		t.Errorf("Open of an unreachable server: %v; want an error wrapping ErrTransient", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}
}

func TestDBErr(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		transient bool
		invalid   bool
	}{
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true, false},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, true, false},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true, false},
		{"read-only transaction", &pgconn.PgError{Code: "25006"}, true, false},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true, false},
		{"idle in transaction timeout", &pgconn.PgError{Code: "25P03"}, true, false},
		{"idle session timeout", &pgconn.PgError{Code: "57P05"}, true, false},
		{"disk full", &pgconn.PgError{Code: "53100"}, true, false},
		{"out of memory", &pgconn.PgError{Code: "53200"}, true, false},
		{"configuration limit", &pgconn.PgError{Code: "53400"}, true, false},
		{"I/O error", &pgconn.PgError{Code: "58030"}, true, false},
		{"internal error", &pgconn.PgError{Code: "XX000"}, false, false},
		{"check violation", &pgconn.PgError{Code: "23514"}, false, true},
		{"string too long", &pgconn.PgError{Code: "22001"}, false, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false, false},
		{"syntax", &pgconn.PgError{Code: "42601"}, false, false},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, false},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true, false},
		{"canceled", fmt.Errorf("query: %w", context.Canceled), false, false},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false, false},
		{"other", errors.New("something else"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := dbErr(tt.err)
			if !errors.Is(got, tt.err) {
				t.Errorf("dbErr(%v) = %v, which lost the original error", tt.err, got)
			}
			if errors.Is(got, seckill.ErrTransient) != tt.transient {
				t.Errorf("dbErr(%v) = %v; transient = %v, want %v", tt.err, got, !tt.transient, tt.transient)
			}
			if errors.Is(got, seckill.ErrInvalidArgument) != tt.invalid {
				t.Errorf("dbErr(%v) = %v; invalid argument = %v, want %v", tt.err, got, !tt.invalid, tt.invalid)
			}
		})
	}
	if dbErr(nil) != nil {
		t.Error("dbErr(nil) != nil")
	}
}
