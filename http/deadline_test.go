package http

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill"
)

// waitingOrders is an OrderService whose Buy waits on its context, as a
// call to a Redis that does not answer, unless fast; it records the context
// it was given and how long it waited.
type waitingOrders struct {
	fakeOrders
	fast   bool
	ctx    context.Context
	waited time.Duration
}

func (f *waitingOrders) Buy(ctx context.Context, userID, voucherID int64) (*seckill.Order, error) {
	f.ctx = ctx
	if f.fast {
		return f.fakeOrders.Buy(ctx, userID, voucherID)
	}
	start := time.Now()
	<-ctx.Done()
	f.waited = time.Since(start)
	return nil, fmt.Errorf("%w: redis: %w", seckill.ErrTransient, ctx.Err())
}

// TestRequestTimeout: a buy whose service waits is answered 503 when
// Config.RequestTimeout has passed, to the nanosecond on synctest's clock,
// and not before; a fast answer is not touched by it; either way the
// request's context is ended once it is answered.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	for _, fast := range []bool{false, true} {
		t.Run(map[bool]string{false: "waits", true: "fast"}[fast], func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				orders := &waitingOrders{fast: fast}
				e := newFakeEnv(t, fakeOptions{cfg: Config{RequestTimeout: timeout}, edit: func(s *Services) { s.Orders = orders }})
				req := httptest.NewRequest("POST", "/api/vouchers/7/seckill", nil)
				req.Header.Set("Authorization", "Bearer "+e.buyer)
				w := httptest.NewRecorder()
				start := time.Now()
				answered := make(chan time.Duration)
				go func() {
					e.handler.ServeHTTP(w, req)
					answered <- time.Since(start)
				}()

				if fast {
					if took := <-answered; took != 0 || w.Code != 200 {
						t.Fatalf("a fast buy answered %d after %v, want 200 at once", w.Code, took)
					}
				} else {
					time.Sleep(timeout - time.Nanosecond)
					synctest.Wait()
					select {
					case took := <-answered:
						t.Fatalf("answered %d after %v, before the request timeout %v", w.Code, took, timeout)
					default:
					}
					time.Sleep(time.Nanosecond)
					if took := <-answered; took != timeout || w.Code != 503 {
						t.Fatalf("answered %d after %v, want 503 at the request timeout %v", w.Code, took, timeout)
					}
					if orders.waited != timeout {
						t.Errorf("the service waited %v, want %v", orders.waited, timeout)
					}
					if err := orders.ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("the service's context ended with %v, want DeadlineExceeded", err)
					}
				}
				if d, ok := orders.ctx.Deadline(); !ok || !d.Equal(start.Add(timeout)) {
					t.Errorf("the service's context has deadline %v, %v; want %v", d, ok, start.Add(timeout))
				}
				if err := orders.ctx.Err(); err == nil {
					t.Error("the service's context lives on after the answer")
				}
			})
		})
	}
}
