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
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// jsonFallback makes the mux's own 404 and 405 answers JSON errors like
// every other answer.
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			w = &fallbackWriter{ResponseWriter: w}
		}
		mux.ServeHTTP(w, r)
	})
}

// fallbackWriter replaces the plain-text body of the mux's 404 and 405.
type fallbackWriter struct {
	http.ResponseWriter
	replaced bool
}

func (f *fallbackWriter) WriteHeader(status int) {
	var err error
	switch status {
	case http.StatusNotFound:
		err = seckill.Errorf(errRouteNotFound, "no such route")
	case http.StatusMethodNotAllowed:
		err = seckill.Errorf(errMethodNotAllowed, "method not allowed on this route")
	default:
		f.ResponseWriter.WriteHeader(status)
		return
	}
	f.replaced = true
	f.Header().Del("Content-Length")
	writeError(f.ResponseWriter, err)
}

func (f *fallbackWriter) Write(p []byte) (int, error) {
	if f.replaced {
		return len(p), nil
	}
	return f.ResponseWriter.Write(p)
}

type identityKey struct{}

// identity returns whom the request acts for, as set by authenticate.
func identity(r *http.Request) auth.Identity {
	id, _ := r.Context().Value(identityKey{}).(auth.Identity)
	return id
}

// authenticate verifies the bearer token and puts its identity in the
// request's context.
func (s *Server) authenticate(r *http.Request) (*http.Request, error) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return nil, seckill.Errorf(seckill.ErrUnauthorized, "missing Authorization: Bearer token")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, seckill.Errorf(seckill.ErrUnauthorized, "Authorization must be a Bearer token")
	}
	id, err := s.tokens.Verify(strings.TrimSpace(token))
	if err != nil {
		return nil, err
	}
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id)), nil
}

// user admits requests with a valid token.
func (s *Server) user(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authed, err := s.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="seckill"`)
			s.error(w, r, err)
			return
		}
		next(w, authed)
	})
}

// admin admits requests with a valid admin token.
func (s *Server) admin(next http.HandlerFunc) http.Handler {
	return s.user(func(w http.ResponseWriter, r *http.Request) {
		if !identity(r).Admin {
			s.error(w, r, seckill.Errorf(seckill.ErrForbidden, "this route is for admins"))
			return
		}
		next(w, r)
	})
}
