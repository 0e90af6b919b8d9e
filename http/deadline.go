package http

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// requestContext is a request's context with its deadline (Config.
// RequestTimeout), made for requests that never wait: most answers of a
// flash sale (sold out, from memory) touch nothing that blocks.
// context.WithDeadline costs every request a timer and a registration with
// the connection's context, a quarter of such an answer's CPU; here they
// are made only when something first waits on Done. Until then Err and
// Deadline answer from the parent and the clock.
//
// release ends it, as the cancel of context.WithDeadline would: Err is then
// context.Canceled, and a Done asked for later is closed.
//
// context.Cause of one never waited on reports its parent's cause, not a
// passed deadline: nothing here uses causes.
type requestContext struct {
	parent   context.Context
	deadline time.Time

	armed atomic.Pointer[armedContext]
	// ended is how it ended while not armed (the parent's error, the
	// deadline, or release): set once, so that Err never changes its answer,
	// and a context armed after takes the same end.
	ended atomic.Pointer[error]
	mu    sync.Mutex // held to arm or to end
}

// armedContext is the context.WithDeadline a requestContext defers.
type armedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

var _ context.Context = (*requestContext)(nil)

func newRequestContext(parent context.Context, deadline time.Time) *requestContext {
	return &requestContext{parent: parent, deadline: deadline}
}

// Deadline returns the request's deadline.
func (c *requestContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed when the request's work must stop.
func (c *requestContext) Done() <-chan struct{} { return c.arm().Done() }

// Err reports why the request's work must stop, or nil.
func (c *requestContext) Err() error {
	if a := c.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	if e := c.ended.Load(); e != nil {
		return *e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	return c.endLocked(false)
}

// endLocked returns how the unarmed context ended, fixing it the first time
// it has: the parent's error, else the deadline passed, else, if released,
// context.Canceled; nil while none of these.
func (c *requestContext) endLocked(released bool) error {
	if e := c.ended.Load(); e != nil {
		return *e
	}
	end := &canceled
	switch err := c.parent.Err(); {
	case err == context.Canceled:
	case err == context.DeadlineExceeded:
		end = &deadlineExceeded
	case err != nil:
		other := err // on the heap only in this case
		end = &other
	case !time.Now().Before(c.deadline):
		end = &deadlineExceeded
	case !released:
		return nil
	}
	c.ended.Store(end)
	return *end
}

// The usual ends, stored without allocating one per request.
var (
	canceled         = context.Canceled
	deadlineExceeded = context.DeadlineExceeded
)

// Value returns the parent's value for key (the armed context's, once
// armed: the context package finds its cancel state through Value).
func (c *requestContext) Value(key any) any {
	if a := c.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// arm makes the deferred context.WithDeadline, once; one that ended before
// is made ended the same way.
func (c *requestContext) arm() context.Context {
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	var a armedContext
	switch err := c.endLocked(false); {
	case err == nil:
		a.ctx, a.cancel = context.WithDeadline(c.parent, c.deadline)
	case err == context.DeadlineExceeded:
		// Detached from the parent, which may end otherwise meanwhile.
		a.ctx, a.cancel = context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
	default:
		a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(c.parent))
		a.cancel()
	}
	c.armed.Store(&a)
	return a.ctx
}

// release ends the request's context: its work is done.
func (c *requestContext) release() {
	c.mu.Lock()
	a := c.armed.Load()
	if a == nil {
		c.endLocked(true)
	}
	c.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}
