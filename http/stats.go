package http

import (
	"net/http"

	"github.com/seckill/seckill"
)

// The admin API of stats. (Stub: being built.)

func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, seckill.Errorf(seckill.ErrUnavailable, "not built yet"))
}
