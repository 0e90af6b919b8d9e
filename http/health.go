package http

import (
	"context"
	"net/http"
	"sync"
)

// healthzBody is healthz's answer, {"status":"ok"}, encoded once: the
// load balancers' probes, and the bench's ceiling, ask it all the time.
var healthzBody = []byte(`{"status":"ok"}` + "\n")

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(http.StatusOK)
	w.Write(healthzBody)
}

// Detail describes a dependency that answers, for /readyz.
type Detail func(context.Context) (string, error)

// readyz asks every dependency at once, each within ReadyTimeout. Its
// answer names which are down; the reasons go to the log, not to clients.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		states  = make(map[string]string, len(s.checks))
		details = make(map[string]string, len(s.details))
		down    []string
	)
	for name, check := range s.checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
			defer cancel()
			err := check(ctx)
			var detail string
			if describe := s.details[name]; err == nil && describe != nil {
				// A dependency that answers but cannot say what it is
				// (a failover under way) is still ready.
				detail, _ = describe(ctx)
			}
			mu.Lock()
			defer mu.Unlock()
			if detail != "" {
				details[name] = detail
			}
			if err != nil {
				s.logger.Warn("dependency not ready", "dependency", name, "err", err)
				states[name] = "down"
				down = append(down, name)
				return
			}
			states[name] = "ok"
		})
	}
	wg.Wait()
	if len(down) > 0 {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, struct {
			errorBody
			Checks map[string]string `json:"checks"`
		}{errorBody{Code: "unavailable", Message: "not ready: a dependency does not answer"}, states})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Status  string            `json:"status"`
		Checks  map[string]string `json:"checks"`
		Details map[string]string `json:"details,omitempty"`
	}{"ok", states, details})
}
