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

	armed    atomic.Pointer[armedContext]
	released atomic.Bool
	mu       sync.Mutex // held to arm
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
	if c.released.Load() {
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value returns the parent's value for key (the armed context's, once
// armed: the context package finds its cancel state through Value).
func (c *requestContext) Value(key any) any {
	if a := c.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// arm makes the deferred context.WithDeadline, once; after release it is
// made canceled.
func (c *requestContext) arm() context.Context {
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	if c.released.Load() {
		cancel()
	}
	c.armed.Store(&armedContext{ctx: ctx, cancel: cancel})
	return ctx
}

// release ends the request's context: its work is done.
func (c *requestContext) release() {
	c.mu.Lock()
	c.released.Store(true)
	a := c.armed.Load()
	c.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}
