package http

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSalePageFiles: the sale page is at / alone, as static bytes with an
// ETag and revalidated; its assets are named in it by content hash and
// cached for good by that name, briefly without it; anything else stays a
// JSON 404, and every answer matches openapi.json.
func TestSalePageFiles(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	get := func(path, etag string) response {
		t.Helper()
		return e.send("GET", path, map[string]string{"If-None-Match": etag}, nil)
	}

	page := get("/", "")
	if page.status != 200 || page.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / = %d %q, want 200 text/html", page.status, page.header.Get("Content-Type"))
	}
	if cc := page.header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("GET /: Cache-Control %q, want no-cache (revalidated on every load)", cc)
	}
	for _, h := range []string{"Content-Security-Policy", "ETag"} {
		if page.header.Get(h) == "" {
			t.Errorf("GET /: no %s", h)
		}
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "worker-src 'self'") {
		t.Errorf("GET /: Content-Security-Policy %q", csp)
	}
	// Pictures from any https origin (a voucher's imageUrl), none over
	// plain http.
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: https:;") || strings.Contains(csp, "http:") {
		t.Errorf("GET /: Content-Security-Policy %q, want img-src 'self' data: https: and no http:", csp)
	}
	if res := get("/", page.header.Get("ETag")); res.status != http.StatusNotModified || len(res.raw) != 0 {
		t.Errorf("GET / with its ETag = %d (%d bytes), want 304", res.status, len(res.raw))
	}

	// The page names each asset by its hash; that name is immutable.
	refs := regexp.MustCompile(`"/sale/([a-z]+\.(?:js|css))\?v=([0-9a-f]{16})"`).FindAllStringSubmatch(string(page.raw), -1)
	named := map[string]bool{}
	for _, m := range refs {
		named[m[1]] = true
		res := get("/sale/"+m[1]+"?v="+m[2], "")
		if res.status != 200 || res.header.Get("Cache-Control") != "public, max-age=31536000, immutable" || res.header.Get("ETag") != `"`+m[2]+`"` {
			t.Errorf("GET /sale/%s?v=%s = %d, Cache-Control %q, ETag %s; want 200, immutable, its hash",
				m[1], m[2], res.status, res.header.Get("Cache-Control"), res.header.Get("ETag"))
		}
		if got := contentHash(res.raw); got != m[2] {
			t.Errorf("/sale/%s: the page names hash %s, the file's is %s", m[1], m[2], got)
		}
		if res := get("/sale/"+m[1]+"?v="+m[2], `"`+m[2]+`"`); res.status != http.StatusNotModified {
			t.Errorf("GET /sale/%s with its ETag = %d, want 304", m[1], res.status)
		}
		// Without the hash, or with an old one: a few minutes only.
		for _, q := range []string{"", "?v=0123456789abcdef"} {
			if res := get("/sale/"+m[1]+q, ""); res.status != 200 || res.header.Get("Cache-Control") != "public, max-age=300" {
				t.Errorf("GET /sale/%s%s = %d, Cache-Control %q; want 200, public, max-age=300", m[1], q, res.status, res.header.Get("Cache-Control"))
			}
		}
	}
	if want := map[string]bool{"app.js": true, "style.css": true, "solver.js": true}; !cmp.Equal(named, want) {
		t.Errorf("the page names assets %v, want %v", named, want)
	}
	for path, ctype := range map[string]string{"/sale/app.js": "text/javascript; charset=utf-8", "/sale/style.css": "text/css; charset=utf-8"} {
		if res := get(path, ""); res.header.Get("Content-Type") != ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", path, res.header.Get("Content-Type"), ctype)
		}
	}

	// Any other path is the JSON 404 it was.
	for _, path := range []string{"/index.html", "/nothing", "/sale/", "/sale/index.html", "/sale/nothing.js", "/sale/app.go", "/sale/%2e%2e/salepage.go", "/api/nothing"} {
		e.wantError(get(path, ""), 404, "not_found")
	}

	// Offline: the page loads nothing from elsewhere.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(saleUI, "saleui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(saleUI, name)
		for _, m := range external.FindAllString(string(data), -1) {
			t.Errorf("%s refers to %s: the page must work offline", name, m)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestServerTime: GET /api/time answers the clock it is given, never
// cached, and matches openapi.json.
func TestServerTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 20, 0, 0, 123456789, time.FixedZone("CST", 8*3600))
	w := httptest.NewRecorder()
	serverTime(func() time.Time { return at })(w, httptest.NewRequest("GET", "/api/time", nil))
	if got, want := w.Body.String(), `{"now":"2026-12-01T12:00:00.123456789Z","unixMs":1796126400123}`+"\n"; w.Code != 200 || got != want {
		t.Errorf("GET /api/time = %d %s, want 200 %s", w.Code, got, want)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}

	e := newFakeEnv(t)
	before := time.Now()
	res := e.do("GET", "/api/time", "", nil)
	after := time.Now()
	var body timeJSON
	if err := json.Unmarshal(res.raw, &body); err != nil || res.status != 200 {
		t.Fatalf("GET /api/time = %d %s (%v)", res.status, res.raw, err)
	}
	if body.Now.Before(before) || body.Now.After(after) || body.UnixMs != body.Now.UnixMilli() || body.Now.Location() != time.UTC {
		t.Errorf("GET /api/time = %s, want a UTC time between %v and %v with unixMs its milliseconds", res.raw, before, after)
	}
	wantHeaders(t, res, map[string]string{"Content-Type": "application/json; charset=utf-8"})
}
