package processor

import (
	"sync/atomic"
	"time"
)

// coarseClock is the clock read once per handler attempt (the start of its
// HandlerTimeout). It has two modes, chosen by the rate at which records
// are admitted (poke's n), so that neither a fast nor a slow processor pays
// for it more than it must:
//
//   - direct, below coarseMinRate records/s (and at the start): Now reads
//     the system clock (time.Now, a vDSO call of tens of nanoseconds). The
//     refreshing goroutine wakes every coarseCheck to measure the rate, and
//     sleeps while the processor is idle.
//   - coarse, at coarseMinRate records/s or more: Now returns a reading
//     that a ticker refreshes every coarseTick while records are held, so
//     that a processor handling hundreds of thousands of records a second
//     does not read the system clock per record. A reading is at most about
//     a millisecond old, which moves a deadline of seconds by as much.
//
// A slow handler (tens of records a second per partition) thus costs no
// ticker: a thousand wake-ups a second of an otherwise idle process cost
// more CPU than the records' own clock reads. The clock never goes back: a
// tick delivered late cannot undo a fresher poke.
type coarseClock struct {
	now      atomic.Pointer[time.Time]
	direct   atomic.Bool   // Now reads the system clock
	admitted atomic.Int64  // records admitted so far (the sum of poke's n)
	wake     chan struct{} // cap 1: the processor holds records again
}

// The coarse clock's periods and the rate that switches it to coarse mode.
const (
	coarseTick    = time.Millisecond
	coarseCheck   = 100 * time.Millisecond
	coarseMinRate = 10_000 // records admitted per second
)

func newCoarseClock() *coarseClock {
	c := &coarseClock{wake: make(chan struct{}, 1)}
	c.direct.Store(true)
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

// Now returns the clock's reading: the system clock's in direct mode, the
// ticker's last in coarse mode. Safe for concurrent use.
func (c *coarseClock) Now() time.Time {
	if c.direct.Load() {
		return time.Now()
	}
	return *c.now.Load()
}

// poke counts n records admitted, refreshes the clock with t, a fresh
// time.Now, and wakes the refreshing goroutine if it sleeps. Safe for
// concurrent use.
func (c *coarseClock) poke(t time.Time, n int) {
	c.admitted.Add(int64(n))
	c.set(t)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run refreshes the clock and switches its mode until done is closed; idle
// reports whether the processor holds no records (the goroutine then
// sleeps until poke).
func (c *coarseClock) run(done <-chan struct{}, idle func() bool) {
	period := coarseCheck
	if !c.direct.Load() {
		period = coarseTick
	}
	t := time.NewTicker(period)
	defer t.Stop()
	last, lastAt := c.admitted.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := time.Now()
		c.set(now)
		if idle() {
			t.Stop()
			select {
			case <-done:
				return
			case <-c.wake:
			}
			c.set(time.Now())
			// The rate's window goes on over the idle time: a processor
			// that drains each poll in a few milliseconds and waits for
			// the next is measured by its records over the wall time.
			t.Reset(period)
			continue
		}
		if now.Sub(lastAt) < coarseCheck {
			continue
		}
		n := c.admitted.Load()
		coarse := float64(n-last) >= coarseMinRate*now.Sub(lastAt).Seconds()
		last, lastAt = n, now
		if coarse != c.direct.Load() {
			continue // the mode stays
		}
		c.direct.Store(!coarse)
		period = coarseCheck
		if coarse {
			period = coarseTick
		}
		t.Reset(period)
	}
}
