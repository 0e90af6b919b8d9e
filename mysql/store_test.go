package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url  string
		want func(*mysqldriver.Config) // the fields beyond the store's defaults
	}{
		{
			url: "mysql://root@127.0.0.1:3306/test",
			want: func(c *mysqldriver.Config) {
				c.User, c.Addr, c.DBName = "root", "127.0.0.1:3306", "test"
			},
		},
		{
			url: "mysql://seckill:p%40ss%3Aword@db.example.com/shop",
			want: func(c *mysqldriver.Config) {
				c.User, c.Passwd, c.Addr, c.DBName = "seckill", "p@ss:word", "db.example.com:3306", "shop"
			},
		},
		{
			url: "mysql://u@[::1]:3307/shop",
			want: func(c *mysqldriver.Config) {
				c.User, c.Addr, c.DBName = "u", "[::1]:3307", "shop"
			},
		},
		{
			url: "mysql://h/shop",
			want: func(c *mysqldriver.Config) {
				c.Addr, c.DBName = "h:3306", "shop"
			},
		},
		{
			url: "mysql://u@h/shop?timeout=5s&readTimeout=2s&interpolateParams=false&sql_mode=ANSI",
			want: func(c *mysqldriver.Config) {
				c.User, c.Addr, c.DBName = "u", "h:3306", "shop"
				c.Timeout, c.ReadTimeout = 5*time.Second, 2*time.Second
				c.InterpolateParams = false
				c.Params = map[string]string{"sql_mode": "ANSI", "wait_timeout": "5"}
			},
		},
		{
			// The URL's wait_timeout replaces the store's.
			url: "mysql://u@h/shop?wait_timeout=28800",
			want: func(c *mysqldriver.Config) {
				c.User, c.Addr, c.DBName = "u", "h:3306", "shop"
				c.Params = map[string]string{"wait_timeout": "28800"}
			},
		},
		{
			// The store reads times as UTC whatever the URL says.
			url: "mysql://u@h/shop?parseTime=false&loc=Local",
			want: func(c *mysqldriver.Config) {
				c.User, c.Addr, c.DBName = "u", "h:3306", "shop"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := parseURL(tt.url)
			if err != nil {
				t.Fatalf("parseURL: %v", err)
			}
			want := mysqldriver.NewConfig()
			want.Net = "tcp"
			want.ParseTime = true
			want.InterpolateParams = true
			// A cut-off session's locks end within 5s (parseURL).
			want.Params = map[string]string{"wait_timeout": "5"}
			tt.want(want)
			if diff := cmp.Diff(want.FormatDSN(), got.FormatDSN()); diff != "" {
				t.Errorf("configuration as a DSN (-want +got):\n%s", diff)
			}
			if got.Loc != time.UTC {
				t.Errorf("Loc = %v; want UTC", got.Loc)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, u := range []string{
		"",
		"root@127.0.0.1:3306/test",
		"postgres://u:secret@h/db",
		"mariadb://u:secret@h/db",
		"mysql:u@h/db",
		"mysql:///db",
		"mysql://u:secret@h",
		"mysql://u:secret@h/",
		"mysql://u:secret@h/a/b",
		"mysql://u:secret@h/db?timeout=soon",
		"mysql://u:secret@h/db?tls=nosuchconfig",
		"mysql://u:secret@h:port/db",
		"mysql://u:secret@h/db#frag",
		"mysql://u:secret@h/%zz",
	} {
		t.Run(u, func(t *testing.T) {
			cfg, err := parseURL(u)
			if err == nil {
				t.Fatalf("parseURL(%q) = %s; want an error", u, cfg.FormatDSN())
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestOpenUnreachable(t *testing.T) {
	// Nothing listens on port 1: the error is one worth retrying later.
	s, err := Open(t.Context(), "mysql://root:secret@127.0.0.1:1/test?timeout=2s", 1)
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
		{"deadlock", &mysqldriver.MySQLError{Number: 1213}, true, false},
		{"lock wait timeout", &mysqldriver.MySQLError{Number: 1205}, true, false},
		{"too many connections", &mysqldriver.MySQLError{Number: 1040}, true, false},
		{"read_only", &mysqldriver.MySQLError{Number: 1290}, true, false},
		{"read-only transaction", &mysqldriver.MySQLError{Number: 1792}, true, false},
		{"MySQL read-only mode", &mysqldriver.MySQLError{Number: 1836}, true, false},
		{"MariaDB statement timeout", &mysqldriver.MySQLError{Number: 1969}, true, false},
		{"MySQL statement timeout", &mysqldriver.MySQLError{Number: 3024}, true, false},
		{"query interrupted", &mysqldriver.MySQLError{Number: 1317}, true, false},
		{"disk full", &mysqldriver.MySQLError{Number: 1021}, true, false},
		{"table full", &mysqldriver.MySQLError{Number: 1114}, true, false},
		{"out of memory", &mysqldriver.MySQLError{Number: 1037}, true, false},
		{"out of resources", &mysqldriver.MySQLError{Number: 1041}, true, false},
		{"error during commit", &mysqldriver.MySQLError{Number: 1180}, true, false},
		{"group replication refused the commit", &mysqldriver.MySQLError{Number: 3100}, true, false},
		{"binary log not written", &mysqldriver.MySQLError{Number: 1026}, true, false},
		{"MariaDB check constraint", &mysqldriver.MySQLError{Number: 4025}, false, true},
		{"MySQL check constraint", &mysqldriver.MySQLError{Number: 3819}, false, true},
		{"data too long", &mysqldriver.MySQLError{Number: 1406}, false, true},
		{"duplicate key", &mysqldriver.MySQLError{Number: 1062}, false, false},
		{"syntax", &mysqldriver.MySQLError{Number: 1064}, false, false},
		{"bad connection", fmt.Errorf("exec: %w", mysqldriver.ErrInvalidConn), true, false},
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
