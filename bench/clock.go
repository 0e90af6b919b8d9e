package bench

import (
	"container/heap"
	"runtime"
	"time"
)

// clock releases waiters at their due times more precisely than a timer
// of an idle Go process, which wakes up to a millisecond late (the
// runtime's poller waits in whole milliseconds). One goroutine sleeps on a
// timer until spin before the earliest due time, then yields in a loop
// until it: so a proxy spins on one goroutine however many connections
// wait, and only while a wait is that close to its end.
type clock struct {
	spin time.Duration
	add  chan waiter
	done chan struct{}
	quit chan struct{}
}

// waiter is a wait: release gets a value at due.
type waiter struct {
	due     time.Time
	release chan<- struct{}
}

func startClock(spin time.Duration) *clock {
	c := &clock{spin: spin, add: make(chan waiter, 256), done: make(chan struct{}), quit: make(chan struct{})}
	go c.run()
	return c
}

// wait sends a value on release (which must have room for it) at due.
func (c *clock) wait(due time.Time, release chan<- struct{}) {
	c.add <- waiter{due: due, release: release}
}

// stop ends the clock; waits not yet released are dropped.
func (c *clock) stop() {
	close(c.quit)
	<-c.done
}

func (c *clock) run() {
	defer close(c.done)
	var q waiters
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		now := time.Now()
		for len(q) > 0 && !q[0].due.After(now) {
			heap.Pop(&q).(waiter).release <- struct{}{}
		}
		if len(q) == 0 {
			select {
			case w := <-c.add:
				heap.Push(&q, w)
			case <-c.quit:
				return
			}
			continue
		}
		if wait := q[0].due.Sub(now); wait > c.spin {
			timer.Reset(wait - c.spin)
			select {
			case w := <-c.add:
				heap.Push(&q, w)
			case <-timer.C:
			case <-c.quit:
				return
			}
			timer.Stop()
			continue
		}
		select {
		case w := <-c.add:
			heap.Push(&q, w)
		case <-c.quit:
			return
		default:
			runtime.Gosched()
		}
	}
}

// waiters is a min-heap of waits by due time.
type waiters []waiter

func (q waiters) Len() int           { return len(q) }
func (q waiters) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q waiters) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *waiters) Push(x any)        { *q = append(*q, x.(waiter)) }
func (q *waiters) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	return w
}
