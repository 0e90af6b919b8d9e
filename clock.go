package seckill

import "time"

// Clock tells the time: every service and loop reads it through one, so
// that a test can set it. A nil Clock is time.Now.
type Clock func() time.Time

// Now returns the current time by c, or time.Now if c is nil.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}
