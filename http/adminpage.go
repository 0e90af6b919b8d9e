package http

import "net/http"

// adminPage serves the admin page. (Stub: being built.)
func (s *Server) adminPage() http.Handler { return http.NotFoundHandler() }
