package http

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/seckill/seckill"
)

// saleUI is the buyers' sale page: plain files, no build step, served from
// the binary. Every buyer gets the same bytes (nothing is rendered per
// request), so a CDN or the browser can keep them.
//
//go:embed saleui
var saleUI embed.FS

// saleAssetPrefix is where the sale page's scripts and styles are served;
// the page itself is at "/" alone, since "GET /" in a ServeMux would catch
// every path and unknown paths must stay JSON 404s.
const saleAssetPrefix = "/sale/"

// saleCSP is adminCSP with the solver's Web Worker allowed from the page's
// own origin: the buyer's token can go nowhere else. Images may come from
// any https origin too, since a voucher's picture (imageUrl) is wherever
// the shop keeps it; an image sends no token and runs nothing, and the
// page sends no Referer with it. Not http: a page served over https, as a
// shop's is, could not show an http picture anyway (the browser upgrades
// or blocks it as mixed content), and over http which pictures a buyer
// looks at is anyone's to read; the page shows its placeholder instead.
const saleCSP = "default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data: https:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Cache lifetimes of the sale page's files. The page is revalidated on
// every load (an ETag makes that a 304), so a new release shows at once;
// it names its assets with their content hash (?v=), and an asset asked for
// by its current hash never changes: a year, immutable. An asset asked for
// without it, or by an old hash, gets a few minutes.
const (
	salePageCache        = "no-cache"
	saleAssetCache       = "public, max-age=300"
	saleHashedAssetCache = "public, max-age=31536000, immutable"
)

// saleFile is one file of the sale page, ready to serve.
type saleFile struct {
	data  []byte
	ctype string
	// hash is the hex SHA-256 of data, cut short: the file's version in
	// ?v= and its ETag.
	hash string
}

// salePage is the sale page's files by name ("index.html", "app.js"…).
type salePage map[string]*saleFile

// loadSalePage reads the embedded files and points index.html's references
// to its assets (`/sale/app.js"`) at their current versions
// (`/sale/app.js?v=<hash>"`), once, at start: the same bytes for every
// request after.
func loadSalePage() salePage {
	files, err := fs.Sub(saleUI, "saleui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	page := salePage{}
	err = fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ctype, known := adminTypes[path.Ext(name)]
		if !known {
			return nil
		}
		data, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		page[name] = &saleFile{data: data, ctype: ctype}
		return nil
	})
	if err != nil {
		panic(err)
	}
	index := page["index.html"]
	for name, f := range page {
		if name == "index.html" {
			continue
		}
		f.hash = contentHash(f.data)
		ref := saleAssetPrefix + name + `"`
		index.data = bytes.ReplaceAll(index.data, []byte(ref), []byte(saleAssetPrefix+name+"?v="+f.hash+`"`))
	}
	index.hash = contentHash(index.data)
	return page
}

// contentHash is the version of a file's content: 16 hex digits of its
// SHA-256, plenty to tell a handful of releases apart.
func contentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// salePageHandler serves the page itself, at GET /{$}.
func (s *Server) salePageHandler(page salePage) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveSaleFile(w, r, "index.html", page["index.html"], salePageCache)
	})
}

// saleAssets serves the sale page's scripts and styles under /sale/. A
// path that is no file, the page itself included, is a JSON 404.
func (s *Server) saleAssets(page salePage) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, saleAssetPrefix)
		f := page[name]
		if f == nil || name == "index.html" {
			s.error(w, r, seckill.Errorf(errRouteNotFound, "no such file"))
			return
		}
		cache := saleAssetCache
		if r.URL.Query().Get("v") == f.hash {
			cache = saleHashedAssetCache
		}
		serveSaleFile(w, r, name, f, cache)
	})
}

// serveSaleFile answers with f, its ETag and cache policy; a request whose
// If-None-Match holds the ETag gets 304 (http.ServeContent).
func serveSaleFile(w http.ResponseWriter, r *http.Request, name string, f *saleFile, cache string) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", cache)
	h.Set("ETag", `"`+f.hash+`"`)
	h.Set("Content-Security-Policy", saleCSP)
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.data))
}
