package processor

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestCoarseClock: the clock follows real time while busy, sleeps while
// idle, is fresh again as soon as it is poked, and never goes back (a tick
// still in flight when the poke lands cannot undo it).
func TestCoarseClock(t *testing.T) {
	c := newCoarseClock()
	var idle atomic.Bool
	done := make(chan struct{})
	defer close(done)
	go c.run(done, idle.Load)
	start := time.Now()
	waitFor(t, 5*time.Second, "the clock advances while busy", func() bool { return c.Now().Sub(start) > 20*time.Millisecond })
	if lag := time.Since(c.Now()); lag > 500*time.Millisecond {
		t.Fatalf("busy clock lags %v", lag)
	}
	idle.Store(true)
	now := time.Now()
	c.poke(now)
	if c.Now().Before(now) {
		t.Fatalf("poke did not set the clock: reads %v, poked %v", c.Now(), now)
	}
	c.poke(now.Add(-time.Hour))
	if c.Now().Before(now) {
		t.Fatal("a poke with an older time moved the clock back")
	}
	idle.Store(false)
	later := time.Now()
	waitFor(t, 5*time.Second, "the clock runs again after a poke", func() bool { return c.Now().After(later) })
}
