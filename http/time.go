package http

import (
	"net/http"
	"time"
)

// timeJSON is the answer of GET /api/time.
type timeJSON struct {
	// Now is the server's time, to the nanosecond, in UTC.
	Now time.Time `json:"now"`
	// UnixMs is the same time in milliseconds since the epoch: what a
	// page's clock arithmetic wants.
	UnixMs int64 `json:"unixMs"`
}

// serverTime answers GET /api/time with now(): the sale page measures its
// clock's offset from it, so that its countdown and its buy button follow
// the server's clock (which decides not_started) rather than the
// visitor's. Never cached: a stored time would be a wrong one.
func serverTime(now func() time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		t := now().UTC()
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, timeJSON{Now: t, UnixMs: t.UnixMilli()})
	}
}
