package http

import (
	"net/http"

	"github.com/seckill/seckill"
)

// The admin API of dead letters and reconciliation. (Stubs: being built.)

func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "not built yet"))
}

func (s *Server) adminRetryDeadLetter(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "not built yet"))
}

func (s *Server) adminDiscardDeadLetter(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "not built yet"))
}

func (s *Server) adminReconcile(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "not built yet"))
}
