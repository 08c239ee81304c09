package chaos

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSoakTable: one row per seed with its faults, orders, redeliveries,
// recovery times and failed invariants; a seed the harness could not run is
// a row of its own; the closing line totals the violations.
func TestSoakTable(t *testing.T) {
	t0 := time.Now()
	recs := []Recovery{
		{Fault: FaultBrokerKill, Group: "orders", EndedAt: t0, Seconds: 4},
		{Fault: FaultBrokerKill, Group: "payments", EndedAt: t0, Seconds: 9}, // same fault: its slowest group counts
		{Fault: FaultBrokerKill, Group: "orders", EndedAt: t0.Add(time.Minute), Seconds: 2},
	}
	sum := summarizeRecoveries(recs)
	if s := sum[FaultBrokerKill]; s.Faults != 2 || s.Max != 9 || s.Group != "payments" || s.Median != 9 {
		t.Fatalf("summary %+v: want 2 faults, max 9 s (payments), median 9 s (of 2 and 9, the upper)", s)
	}
	rep := &Report{Seed: 5, Backend: "kafka+postgres+proxies", FaultSeconds: 120,
		OrdersByKind:    map[string]OrderCounts{kindSynthetic: {Accepted: 10, Rejected: 1}, kindReal: {Accepted: 3}},
		Injected:        map[string]int{FaultBrokerKill: 2, FaultKill: 0},
		InboxDuplicates: map[string]int{"orders": 4, "payments": 1},
		TxnAborted:      2, RelayAborted: 1,
		BadRecords: make([]badRecord, 8), DLQRecords: map[string]int{"orders": 8},
		RecoveryByFault: sum,
		Invariants:      []Invariant{{Name: "a", OK: true}, {Name: "lost", OK: false, Violations: 3}},
	}
	out := SoakTable([]SoakResult{{Report: rep, Elapsed: 3 * time.Minute}, {Err: errors.New("checkout-1 not healthy")}})
	for _, want := range []string{
		"| 5 | kafka+postgres+proxies | 2.0 / 3.0 | broker-kill 2 |", "| 13 / 1 | 5 | 2 / 1 | 8 / 8 | broker-kill 9/9 | lost (3) |",
		"harness error: checkout-1 not healthy", "2 seeds, 4 violations.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
