package main

import (
	"testing"
	"time"
)

func TestTrackerCountsRecordsHandledTwice(t *testing.T) {
	tr := newTracker(2)
	a, b := tr.member(0), tr.member(1)
	tr.handle(0, a, 0, 0)
	tr.handle(0, a, 0, 1)
	tr.handle(0, a, 1, 70000) // beyond the first growth of the offsets
	tr.handle(1, b, 0, 1)     // a second member handles offset 1 again
	tr.handle(1, b, 1, 70000)
	tr.handle(1, b, 1, 70001)
	if got := tr.handled.Load(); got != 6 {
		t.Errorf("handled %d, want 6", got)
	}
	if got := tr.dups.Load(); got != 2 {
		t.Errorf("handled twice %d, want 2", got)
	}
}

func TestTrackerSettled(t *testing.T) {
	tr := newTracker(4)
	a, b := tr.member(0), tr.member(1)
	for p := range int32(4) {
		tr.handle(0, a, p, 0)
	}
	// Member 1 joins a group of 2: its share is 2 of the 4 partitions.
	if _, ok := tr.settled(true, 1, 2, nil); ok {
		t.Fatal("join settled before the new member handled anything")
	}
	tr.handle(1, b, 2, 1)
	if _, ok := tr.settled(true, 1, 2, nil); ok {
		t.Fatal("join settled with 1 of the new member's 2 partitions")
	}
	tr.handle(1, b, 3, 1)
	at, ok := tr.settled(true, 1, 2, nil)
	if !ok || at.After(time.Now()) {
		t.Fatalf("join: settled %v at %v, want true, not in the future", ok, at)
	}
	// Member 1 leaves: its partitions 2 and 3 must be handled by another.
	left := tr.owned(1)
	if len(left) != 2 {
		t.Fatalf("member 1 owns %v, want [2 3]", left)
	}
	tr.handle(0, a, 2, 2)
	if _, ok := tr.settled(false, 1, 1, left); ok {
		t.Fatal("leave settled with partition 3 not taken over")
	}
	tr.handle(0, a, 3, 2)
	if _, ok := tr.settled(false, 1, 1, left); !ok {
		t.Fatal("leave not settled with both partitions taken over")
	}
}
