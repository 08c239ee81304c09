package processor

import (
	"sync/atomic"
	"time"
)

// coarseClock is a clock read once per handler attempt (the start of its
// HandlerTimeout) without a system clock read per record: a ticker refreshes
// it every millisecond while records are held, and it sleeps while the
// processor is idle. A reading is at most about a millisecond old, which only
// moves a deadline of seconds by as much. The clock never goes back: a tick
// delivered late cannot undo a fresher poke.
type coarseClock struct {
	now  atomic.Pointer[time.Time]
	wake chan struct{} // cap 1: the processor holds records again
}

func newCoarseClock() *coarseClock {
	c := &coarseClock{wake: make(chan struct{}, 1)}
	c.set(time.Now())
	return c
}

// set moves the clock to t unless it already reads t or later. Safe for
// concurrent use (the ticker and poke race).
func (c *coarseClock) set(t time.Time) {
	for {
		old := c.now.Load()
		if old != nil && !t.After(*old) {
			return
		}
		if c.now.CompareAndSwap(old, &t) {
			return
		}
	}
}

// Now returns the clock's reading.
func (c *coarseClock) Now() time.Time { return *c.now.Load() }

// poke refreshes the clock with t, a fresh time.Now, and wakes the ticker if
// it sleeps.
func (c *coarseClock) poke(t time.Time) {
	c.set(t)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run refreshes the clock until done is closed; idle reports whether the
// processor holds no records (the ticker then sleeps until poke).
func (c *coarseClock) run(done <-chan struct{}, idle func() bool) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			c.set(time.Now())
			if !idle() {
				continue
			}
			t.Stop()
			select {
			case <-done:
				return
			case <-c.wake:
			}
			c.set(time.Now())
			t.Reset(time.Millisecond)
		}
	}
}
