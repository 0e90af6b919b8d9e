package http

import (
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAdminPageFiles(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{}, Services{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := client.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, string(body)
	}
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/admin/", "text/html; charset=utf-8", `<script src="app.js"`},
		{"/admin/index.html", "text/html; charset=utf-8", "<title>seckill admin</title>"},
		{"/admin/app.js", "text/javascript; charset=utf-8", "/api/admin/stats"},
		{"/admin/style.css", "text/css; charset=utf-8", ":root"},
	} {
		res, body := get(tc.path)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s = %d %q, want 200 %q", tc.path, res.StatusCode, res.Header.Get("Content-Type"), tc.ctype)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("GET %s: Cache-Control %q, want no-store", tc.path, cc)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		if !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
	}
	if res, _ := get("/admin"); res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/admin/" {
		t.Errorf("GET /admin = %d to %q, want 301 to /admin/", res.StatusCode, res.Header.Get("Location"))
	}
	for _, path := range []string{"/admin/nothing.js", "/admin/adminui/app.js", "/admin/app.go", "/admin/x/", "/admin/%2e%2e/adminpage.go"} {
		res, body := get(path)
		if res.StatusCode != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("GET %s = %d %s, want 404 not_found", path, res.StatusCode, body)
		}
	}
	// Offline: the page loads nothing from elsewhere.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err = fs.WalkDir(adminUI, "adminui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(adminUI, name)
		for _, m := range external.FindAllString(string(data), -1) {
			if m != "http://www.w3.org" { // the SVG namespace: a name, not fetched
				t.Errorf("%s refers to %s: the page must work offline", name, m)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
