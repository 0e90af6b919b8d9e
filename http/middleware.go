package http

import (
	"context"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// recover turns a panic in a handler into a 500 with a JSON body and a
// logged stack, so one bad request cannot take the process down.
func (s *Server) recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				if sw, ok := w.(*statusWriter); ok && sw.wroteHeader {
					return // the answer has begun: too late to change it
				}
				writeJSON(w, http.StatusInternalServerError, errorBody{Code: "internal", Message: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// limit caps every request's body and the time its work may take, and
// marks every answer as not to be cached or sniffed.
func (s *Server) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A timer for every request, a memory answer's too: a context that
		// made it only when waited on saved less than a sale's run-to-run
		// spread (docs/benchmarks-history.md, Standard code on the buy route).
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		h := w.Header()
		h["X-Content-Type-Options"] = nosniff
		h["Cache-Control"] = noStore
		next.ServeHTTP(w, r)
	})
}

// Header values every answer, or many, carry: set as they are, shared and
// never changed, rather than a slice allocated per answer by Header.Set.
// (Header.Add appends to a copy: their capacity is their length.)
var (
	nosniff         = []string{"nosniff"}
	noStore         = []string{"no-store"}
	contentTypeJSON = []string{"application/json; charset=utf-8"}
	retryAfterOne   = []string{"1"}
)

// replaceFallback makes the mux's own 404 and 405 answers, which it writes
// as plain text for a request that matched no route (r.Pattern is empty),
// JSON errors like every other answer. It reports whether it answered.
func replaceFallback(w http.ResponseWriter, r *http.Request, status int) bool {
	if r.Pattern != "" {
		return false
	}
	var err error
	switch status {
	case http.StatusNotFound:
		err = seckill.Errorf(errRouteNotFound, "no such route")
	case http.StatusMethodNotAllowed:
		err = seckill.Errorf(errMethodNotAllowed, "method not allowed on this route")
	default:
		return false
	}
	w.Header().Del("Content-Length")
	writeError(w, err)
	return true
}

// userHandler is the handler of a route for signed-in users: who is whom
// the request acts for, as its token says.
type userHandler func(w http.ResponseWriter, r *http.Request, who auth.Identity)

// authenticate verifies the bearer token and returns whom it names.
func (s *Server) authenticate(r *http.Request) (auth.Identity, error) {
	var h string
	// Indexed, not Get: the server has made the key canonical already.
	if v := r.Header["Authorization"]; len(v) > 0 {
		h = v[0]
	}
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return auth.Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "missing Authorization: Bearer token")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return auth.Identity{}, seckill.Errorf(seckill.ErrUnauthorized, "Authorization must be a Bearer token")
	}
	return s.tokens.Verify(strings.TrimSpace(token))
}

// user admits requests with a valid token.
func (s *Server) user(next userHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := s.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="seckill"`)
			s.error(w, r, err)
			return
		}
		next(w, r, who)
	})
}

// admin admits requests with a valid admin token.
func (s *Server) admin(next userHandler) http.Handler {
	return s.user(func(w http.ResponseWriter, r *http.Request, who auth.Identity) {
		if !who.Admin {
			s.error(w, r, seckill.Errorf(seckill.ErrForbidden, "this route is for admins"))
			return
		}
		next(w, r, who)
	})
}
