package http

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/seckill/seckill"
)

// adminUI is the admin page: plain files, no build step, served from the
// binary so that the page works wherever seckill runs, offline included.
//
//go:embed adminui
var adminUI embed.FS

// adminTypes are the content types of the admin page's files, by extension.
// Set here rather than from the system's MIME table, which varies between
// machines and would be fatal under X-Content-Type-Options: nosniff.
var adminTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// adminCSP lets the page load nothing but its own files and call nothing
// but its own origin: the token it holds can go nowhere else.
const adminCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// adminPage serves the admin page's files under /admin/. The page holds no
// secret: it signs in with an admin token and calls the admin JSON API.
func (s *Server) adminPage() http.Handler {
	files, err := fs.Sub(adminUI, "adminui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/admin/")
		if name == "" {
			name = "index.html"
		}
		ctype, known := adminTypes[path.Ext(name)]
		var data []byte
		if known && fs.ValidPath(name) {
			data, _ = fs.ReadFile(files, name) // a directory or a missing file: nil
		}
		if data == nil {
			s.error(w, r, seckill.Errorf(errRouteNotFound, "no such file"))
			return
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", adminCSP)
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
	})
}
