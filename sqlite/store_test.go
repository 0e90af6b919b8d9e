package sqlite

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url      string
		wantPath string
		// wantExtra are driver parameters beyond the store's own.
		wantExtra url.Values
	}{
		{url: "sqlite:///var/lib/seckill/seckill.db", wantPath: "/var/lib/seckill/seckill.db"},
		{url: "sqlite:///seckill.db", wantPath: "/seckill.db"},
		{url: "sqlite://seckill.db", wantPath: filepath.Join(wd, "seckill.db")},
		{url: "sqlite://data/seckill.db", wantPath: filepath.Join(wd, "data/seckill.db")},
		{url: "sqlite://./data/../seckill.db", wantPath: filepath.Join(wd, "seckill.db")},
		{url: "sqlite:///tmp/with%20space.db", wantPath: "/tmp/with space.db"},
		{
			url:       "sqlite:///tmp/s.db?_pragma=synchronous(NORMAL)&cache=shared",
			wantPath:  "/tmp/s.db",
			wantExtra: url.Values{"_pragma": {"synchronous(NORMAL)"}, "cache": {"shared"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			dsn, err := parseURL(tt.url)
			if err != nil {
				t.Fatalf("parseURL: %v", err)
			}
			path, query, ok := strings.Cut(dsn, "?")
			if !ok {
				t.Fatalf("parseURL = %q; want a path and parameters", dsn)
			}
			if path != tt.wantPath {
				t.Errorf("path = %q; want %q", path, tt.wantPath)
			}
			got, err := url.ParseQuery(query)
			if err != nil {
				t.Fatalf("parameters %q: %v", query, err)
			}
			want := url.Values{
				"_pragma": {"busy_timeout(5000)", "journal_mode(WAL)", "foreign_keys(1)"},
				"_txlock": {"immediate"},
			}
			for k, vs := range tt.wantExtra {
				want[k] = append(want[k], vs...)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("parameters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, u := range []string{
		"",
		"seckill.db",
		"/abs/seckill.db",
		"file:seckill.db",
		"sqlite3:///tmp/s.db",
		"mysql://root@localhost/test",
		"sqlite:seckill.db",
		"sqlite://",
		"sqlite:///",
		"sqlite:///tmp/",
		"sqlite://user:pass@/tmp/s.db",
		"sqlite:///tmp/s.db#frag",
		"sqlite:///tmp/what%3F.db",
		"sqlite://%zz",
	} {
		t.Run(u, func(t *testing.T) {
			if dsn, err := parseURL(u); err == nil {
				t.Errorf("parseURL(%q) = %q; want an error", u, dsn)
			}
		})
	}
}

func TestOpenDoesNotCreateDirectories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	s, err := Open(t.Context(), "sqlite://"+filepath.Join(dir, "s.db"), 1)
	if err == nil {
		s.Close()
		t.Fatal("Open in a missing directory succeeded; want an error")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open created the directory %s (stat: %v)", dir, err)
	}
}
