package migrate

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"empty", "", nil},
		{"only comments and blanks", "-- a comment\n\n  -- another;\n", nil},
		{"one", "CREATE TABLE a (id INT);\n", []string{"CREATE TABLE a (id INT)"}},
		{"no final newline", "SELECT 1;", []string{"SELECT 1"}},
		{
			"several over many lines",
			"-- users\nCREATE TABLE users (\n  id INT, -- the key\n  phone TEXT\n);\n\nCREATE INDEX i ON users (phone);  \r\n",
			[]string{"CREATE TABLE users (\n  id INT, -- the key\n  phone TEXT\n)", "CREATE INDEX i ON users (phone)"},
		},
		{
			"semicolon inside a line does not end the statement",
			"INSERT INTO t VALUES ('a;b');\nSELECT ';' ; \n",
			[]string{"INSERT INTO t VALUES ('a;b')", "SELECT ';'"},
		},
		{"comment lines inside a statement are dropped", "SELECT\n-- why\n1;\n", []string{"SELECT\n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.text)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Split (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
	}{
		{"missing final semicolon", "SELECT 1;\nSELECT 2\n"},
		{"semicolon followed by a comment", "SELECT 1; -- done\n"},
		{"empty statement", "SELECT 1;\n;\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.text)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Split = %q, %v; want an error wrapping ErrInvalid", got, err)
			}
		})
	}
}

func file(text string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(text)} }

func TestLoad(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"migrations/0002_orders.sql": file("CREATE TABLE orders (id INT);\nCREATE INDEX o ON orders (id);\n"),
		"migrations/0001_init.sql":   file("-- the first\nCREATE TABLE users (id INT);\n"),
		"migrations/0003_more.sql":   file("ALTER TABLE users ADD phone TEXT;\n"),
		"migrations/README.md":       file("not a migration"),
		"migrations/old/0009_x.sql":  file("SELECT 1;\n"),
		"other/0004_elsewhere.sql":   file("SELECT 1;\n"),
	}
	got, err := Load(fsys, "migrations")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []Migration{
		{Version: 1, Name: "init", Statements: []string{"CREATE TABLE users (id INT)"}},
		{Version: 2, Name: "orders", Statements: []string{"CREATE TABLE orders (id INT)", "CREATE INDEX o ON orders (id)"}},
		{Version: 3, Name: "more", Statements: []string{"ALTER TABLE users ADD phone TEXT"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
	}{
		{"no files", map[string]string{"m/README.md": "x"}},
		{"gap", map[string]string{"m/0001_a.sql": "SELECT 1;", "m/0003_c.sql": "SELECT 1;"}},
		{"not starting at 1", map[string]string{"m/0002_b.sql": "SELECT 1;"}},
		{"duplicate version", map[string]string{"m/0001_a.sql": "SELECT 1;", "m/0001_b.sql": "SELECT 1;"}},
		{"short number", map[string]string{"m/001_a.sql": "SELECT 1;"}},
		{"no name", map[string]string{"m/0001.sql": "SELECT 1;"}},
		{"no underscore", map[string]string{"m/0001-a.sql": "SELECT 1;"}},
		{"uppercase name", map[string]string{"m/0001_Init.sql": "SELECT 1;"}},
		{"no number", map[string]string{"m/init.sql": "SELECT 1;"}},
		{"no statements", map[string]string{"m/0001_a.sql": "-- nothing yet\n"}},
		{"bad statement", map[string]string{"m/0001_a.sql": "SELECT 1\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, text := range tt.files {
				fsys[name] = file(text)
			}
			got, err := Load(fsys, "m")
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Load = %v, %v; want an error wrapping ErrInvalid", got, err)
			}
		})
	}
}

func TestLoadMissingDir(t *testing.T) {
	t.Parallel()
	if _, err := Load(fstest.MapFS{}, "nowhere"); err == nil {
		t.Error("Load of a missing directory succeeded; want an error")
	}
}
