package http

import (
	"net/http"
	"strings"
)

// buyPattern is the pattern of the buy route.
const buyPattern = "POST /api/vouchers/{id}/seckill"

// routeBuys sends a buy straight to its handler, past the mux: a flash
// sale's requests are nearly all buys, and the mux's matching was a sixth
// of a sold-out answer's own CPU. It takes only what the mux would route to
// buy the same way (buyPath); the rest goes to the mux. The request gets
// the pattern and the path value the mux would have set.
func routeBuys(mux *http.ServeMux, buy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := buyPath(r); ok {
			r.Pattern = buyPattern
			r.SetPathValue("id", id)
			buy.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// buyPath returns the voucher id of a buy whose path is plainly
// /api/vouchers/<digits>/seckill: a POST, nothing escaped, a clean path, an
// id of 1 to 19 digits. Other buys (an id the handler refuses, say) are
// left to the mux.
func buyPath(r *http.Request) (string, bool) {
	const prefix, suffix = "/api/vouchers/", "/seckill"
	p := r.URL.Path
	// The length first: "/api/vouchers/seckill" has both ends, overlapping.
	if r.Method != http.MethodPost || r.URL.RawPath != "" || len(p) <= len(prefix)+len(suffix) ||
		!strings.HasPrefix(p, prefix) || !strings.HasSuffix(p, suffix) {
		return "", false
	}
	id := p[len(prefix) : len(p)-len(suffix)]
	if len(id) > 19 {
		return "", false
	}
	for i := range len(id) {
		if id[i] < '0' || id[i] > '9' {
			return "", false
		}
	}
	return id, true
}
