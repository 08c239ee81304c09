package checkout

import (
	"strconv"
	"testing"
	"time"
)

// A throttled client stays throttled however many other clients arrive:
// filling the bucket map with maxClients new addresses (each throttled in
// turn) never frees the throttled bucket, and the clients that find the map
// full share one bucket rather than get a fresh burst each.
func TestLimitsSweepKeepsThrottled(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := newClientLimits(0.001, 1) // one request per 1,000 s
	if _, _, ok := c.reserve("victim", now); !ok {
		t.Fatal("the first request of a client was refused")
	}
	if _, _, ok := c.reserve("victim", now); ok {
		t.Fatal("the second request within its burst of 1 was allowed")
	}
	for i := range maxClients + 10 {
		c.reserve("flood-"+strconv.Itoa(i), now.Add(2*time.Minute)) // past the sweep interval
	}
	if _, _, ok := c.reserve("victim", now.Add(2*time.Minute)); ok {
		t.Fatal("the throttled client was allowed again after a flood of new clients: its bucket was freed")
	}
	if n := len(c.m); n > maxClients {
		t.Fatalf("%d buckets kept, want at most %d", n, maxClients)
	}
	allowed := 0
	for i := range 5 {
		if _, _, ok := c.reserve("late-"+strconv.Itoa(i), now.Add(2*time.Minute)); ok {
			allowed++
		}
	}
	if allowed > 1 {
		t.Fatalf("%d of 5 new clients allowed while the map is full of throttled ones, want them to share one bucket (at most 1)", allowed)
	}
}
