package order_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// TestNewTimeOrderedID: the id is the prefix and the 32 hex digits of a
// UUID version 7 whose time is now, and each id sorts after the one before
// (what makes the database's inserts go to the right edge of its indexes);
// none repeats.
func TestNewTimeOrderedID(t *testing.T) {
	before := time.Now().UnixMilli()
	const n = 20000
	seen := make(map[string]bool, n)
	prev := ""
	for i := range n {
		id := order.NewTimeOrderedID("ord_")
		digits, ok := strings.CutPrefix(id, "ord_")
		if !ok || len(digits) != 32 {
			t.Fatalf("id %q: want ord_ and 32 hex digits", id)
		}
		b, err := hex.DecodeString(digits)
		if err != nil {
			t.Fatalf("id %q: %v", id, err)
		}
		u, err := uuid.FromBytes(b)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %q: version %v variant %v (%v), want a version 7 UUID of RFC 9562", id, u.Version(), u.Variant(), err)
		}
		if sec, _ := u.Time().UnixTime(); i == 0 && (sec*1000 < before-1000 || sec*1000 > time.Now().UnixMilli()+1000) {
			t.Fatalf("id %q: time %d s, want now (%d ms)", id, sec, before)
		}
		if id <= prev {
			t.Fatalf("id %d %q does not sort after the one before, %q", i, id, prev)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id], prev = true, id
	}
}

// TestNewIDIsRandom: NewID's digits are random (its first 6 make client id
// suffixes: two ids made in one millisecond must differ there too).
func TestNewIDIsRandom(t *testing.T) {
	heads := map[string]bool{}
	for range 100 {
		id := order.NewID("")
		if len(id) != 32 {
			t.Fatalf("id %q: want 32 hex digits", id)
		}
		heads[id[:6]] = true
	}
	if len(heads) < 95 {
		t.Fatalf("%d distinct 6-digit heads in 100 ids made back to back, want nearly 100", len(heads))
	}
}
