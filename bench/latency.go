package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// LatencyConfig configures a LatencyProxy.
type LatencyConfig struct {
	// Target is the service's host:port. Required.
	Target string
	// Delay is added to each round trip: every chunk from a client is held
	// until Delay after it arrived, then sent on to Target; answers go back
	// at once. The whole delay is on one side because each wait on a timer
	// costs its own lateness (about a millisecond on an idle process): one
	// wait per round trip instead of two halves it.
	Delay time.Duration
	// Spin is the last stretch of each wait spent busy (one goroutine for
	// the whole proxy yields in a loop, runtime.Gosched) instead of on a
	// timer, whose wake-up is late by up to a millisecond when the process
	// is idle. It costs CPU while any chunk is that close to due; 0 (the
	// default) spins never.
	Spin time.Duration
	// Logger receives the connections that fail to reach Target. Default:
	// discard.
	Logger *slog.Logger
}

// LatencyProxy is a TCP proxy on a loopback port in front of a service
// that adds a delay to each round trip, keeping each connection's bytes in
// order and its connections independent: a database farther away, as
// netem would make it. It can also cut every connection and refuse new
// ones, Down, until Up: the service stopped and back.
type LatencyProxy struct {
	cfg   LatencyConfig
	ln    net.Listener
	clock *clock // nil without Spin

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartLatencyProxy listens on 127.0.0.1:0 and forwards to cfg.Target.
// Close stops it.
func StartLatencyProxy(cfg LatencyConfig) (*LatencyProxy, error) {
	if cfg.Target == "" || cfg.Delay < 0 || cfg.Spin < 0 {
		return nil, fmt.Errorf("bench: latency proxy: want a target and a delay and spin of 0 or more, got %q, %v, %v", cfg.Target, cfg.Delay, cfg.Spin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: latency proxy: %w", err)
	}
	p := &LatencyProxy{cfg: cfg, ln: ln, conns: map[net.Conn]struct{}{}}
	if cfg.Spin > 0 {
		p.clock = startClock(cfg.Spin)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port, to dial instead of the target's.
func (p *LatencyProxy) Addr() string { return p.ln.Addr().String() }

// Delay returns the delay the proxy asks of each round trip.
func (p *LatencyProxy) Delay() time.Duration { return p.cfg.Delay }

// Down cuts every connection through the proxy and refuses new ones (they
// are accepted and closed at once): the service looks stopped.
func (p *LatencyProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

// Up lets connections through again.
func (p *LatencyProxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines. It is safe to call twice.
func (p *LatencyProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Down()
	p.wg.Wait()
	if p.clock != nil {
		p.clock.stop()
	}
	return err
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the target for one client, in its own goroutine so that a
// slow dial holds up no other client.
func (p *LatencyProxy) serve(client net.Conn) {
	defer p.wg.Done()
	if p.isDown() {
		client.Close()
		return
	}
	server, err := net.Dial("tcp", p.cfg.Target)
	if err != nil {
		p.cfg.Logger.Warn("latency proxy: dial the target", "target", p.cfg.Target, "err", err)
		client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	chunks := make(chan chunk, 64)
	var wg sync.WaitGroup
	wg.Go(func() { p.read(client, chunks) })
	wg.Go(func() { p.write(server, chunks) })
	wg.Go(func() {
		// Answers go back at once; the round trip's delay was added on
		// the way there.
		io.Copy(client, server)
		client.Close()
		server.Close()
	})
	wg.Wait()
	p.untrack(client, server)
}

func (p *LatencyProxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// track records a pair of connections, unless the proxy went down
// meanwhile: then it closes them and reports false.
func (p *LatencyProxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		a.Close()
		b.Close()
		return false
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

func (p *LatencyProxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, a)
	delete(p.conns, b)
}

// chunk is what one read from a client brought, and when it is due at the
// target: its arrival plus the delay. Chunks that pile up each keep their
// own due time, so that a burst is delayed once, not once per chunk.
type chunk struct {
	data []byte
	due  time.Time
}

// read reads a client's bytes into chunks, in order, until it closes.
func (p *LatencyProxy) read(client net.Conn, chunks chan<- chunk) {
	defer close(chunks)
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.cfg.Delay)}
		}
		if err != nil {
			return
		}
	}
}

// write sends each chunk to the server when it is due. When the client
// has closed, the chunks already read still go, then the server's side is
// closed; on a failed write the chunks left are dropped, as a cut
// connection drops them.
func (p *LatencyProxy) write(server net.Conn, chunks <-chan chunk) {
	var timer *time.Timer
	var release chan struct{}
	if p.clock != nil {
		release = make(chan struct{}, 1)
	}
	failed := false
	for c := range chunks {
		if failed {
			continue // drain, so that read ends
		}
		switch wait := time.Until(c.due); {
		case wait <= 0:
		case p.clock != nil:
			p.clock.wait(c.due, release)
			<-release
		case timer == nil:
			timer = time.NewTimer(wait)
			<-timer.C
		default:
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := server.Write(c.data); err != nil {
			failed = true
			server.Close()
		}
	}
	if tc, ok := server.(*net.TCPConn); ok && !failed {
		// The client is done sending; let the server see it and answer
		// what is left before the copy back closes both.
		if err := tc.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
			server.Close()
		}
	}
}
