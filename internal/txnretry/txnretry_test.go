package txnretry

import (
	"testing"
	"time"
)

// TestBackoff: 20 ms before the first retry, doubling, never above a second,
// never below four fifths of its step (the jitter), never negative.
func TestBackoff(t *testing.T) {
	for fails := 0; fails <= 40; fails++ {
		step := Max
		if fails < 10 {
			step = min(Max, First<<max(0, fails-1))
		}
		for range 100 {
			d := Backoff(fails)
			if d > step || d < step*4/5 || d <= 0 {
				t.Fatalf("Backoff(%d) = %v, want %v less at most a fifth", fails, d, step)
			}
		}
	}
	if s := First << 5; s != 640*time.Millisecond {
		t.Fatalf("sixth step %v", s)
	}
}
