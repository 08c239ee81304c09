package processor

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestCoarseClock: the clock reads the system clock while records are
// admitted slowly, switches to the millisecond ticker once they are
// admitted at coarseMinRate or more (and the ticker's reading follows real
// time), back when the rate falls, is fresh again as soon as it is poked,
// and never goes back (a tick still in flight when a poke lands cannot undo
// it).
func TestCoarseClock(t *testing.T) {
	c := newCoarseClock()
	var idle atomic.Bool
	done := make(chan struct{})
	defer close(done)
	go c.run(done, idle.Load)

	if !c.direct.Load() {
		t.Fatal("a new clock is not in direct mode")
	}
	before := time.Now()
	if got := c.Now(); got.Before(before) {
		t.Fatalf("direct mode: Now %v is older than the time.Now before it (%v)", got, before)
	}

	// coarseMinRate records a second or more: the ticker takes over.
	stop := make(chan struct{})
	feeding := make(chan struct{})
	go func() { // admits 2 × coarseMinRate records a second, as polls would
		defer close(feeding)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				c.poke(now, 2*coarseMinRate/100)
			}
		}
	}()
	waitFor(t, 5*time.Second, "coarse mode at twice coarseMinRate", func() bool { return !c.direct.Load() })
	start := time.Now()
	waitFor(t, 5*time.Second, "the coarse clock advances", func() bool { return c.Now().Sub(start) > 20*time.Millisecond })
	if lag := time.Since(c.Now()); lag > 500*time.Millisecond {
		t.Fatalf("coarse clock lags %v", lag)
	}
	close(stop)
	<-feeding

	// Nothing admitted any more (records still held): direct mode again.
	waitFor(t, 5*time.Second, "direct mode once the rate falls", func() bool { return c.direct.Load() })

	idle.Store(true)
	now := time.Now()
	c.poke(now, 1)
	if c.Now().Before(now) {
		t.Fatalf("poke did not set the clock: reads %v, poked %v", c.Now(), now)
	}
	c.poke(now.Add(-time.Hour), 1)
	if c.now.Load().Before(now) { // the stored reading, whatever the mode
		t.Fatal("a poke with an older time moved the clock back")
	}
}
