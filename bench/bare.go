package bench

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ServerTimeouts are an HTTP server's limits: the bare handler is served
// with those of the server under test. Zero fields take serve's defaults.
type ServerTimeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxHeaderBytes                int
}

func (t ServerTimeouts) withDefaults() ServerTimeouts {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.ReadHeader, 5*time.Second)
	def(&t.Read, 10*time.Second)
	def(&t.Write, 15*time.Second)
	def(&t.Idle, time.Minute)
	if t.MaxHeaderBytes <= 0 {
		t.MaxHeaderBytes = 16 << 10
	}
	return t
}

// Answer describes an answer's body: the bare handler's must be the same
// size and type as the server's sold-out answer, which the run records
// when it first sees one.
type Answer struct {
	Bytes       int64  `json:"bytes"`
	ContentType string `json:"contentType"`
}

// soldOutBody is the body the server answers a buy of a sold-out voucher
// with: http.writeError's {"code","message"} of the domain's
// Errorf(ErrSoldOut, "voucher %d is sold out"), and json.Encoder's newline.
// The run compares its size with a real sold-out answer's (Report.
// BareAnswer, Report.SoldOutAnswer) and says so when they differ.
func soldOutBody(voucherID int64) []byte {
	return fmt.Appendf(nil, "{\"code\":\"sold_out\",\"message\":\"voucher %d is sold out\"}\n", voucherID)
}

// soldOutType is the Content-Type of the server's JSON answers.
const soldOutType = "application/json; charset=utf-8"

// bareHandler answers every request with a fixed sold-out answer and does
// nothing else: it reads and discards the request's body. It also writes
// the two fixed headers every answer of the server carries, so that its
// answer is the sold-out answer's size on the wire.
func bareHandler(body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", soldOutType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusConflict)
		w.Write(body)
	})
}

// bareServer is the bare handler served by plain net/http on a loopback
// port of this process, with the server's timeouts and no middleware.
type bareServer struct {
	url string
	srv *http.Server
}

func startBare(body []byte, t ServerTimeouts) (*bareServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the bare handler: %w", err)
	}
	t = t.withDefaults()
	srv := &http.Server{
		Handler:           bareHandler(body),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    t.MaxHeaderBytes,
	}
	go srv.Serve(ln) // returns ErrServerClosed at close
	return &bareServer{url: "http://" + ln.Addr().String(), srv: srv}, nil
}

func (b *bareServer) close() { b.srv.Close() }
