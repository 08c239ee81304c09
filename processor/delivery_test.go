package processor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDeliveryRefused(t *testing.T) {
	h := WithHandler(func(context.Context, *kgo.Record) error { return nil })
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("in")}
	for _, tc := range []struct {
		opts []Opt
		want string
	}{
		{[]Opt{h, Delivery(AtMostOnce), WithOrdering(OrderKey)}, "needs OrderPartition"},
		{[]Opt{h, Delivery(AtMostOnce), WithOrdering(OrderUnordered)}, "needs OrderPartition"},
		{[]Opt{Delivery(AtMostOnce), WithBatchHandler(func(context.Context, []*kgo.Record) error { return nil })}, "not with WithBatchHandler"},
		{[]Opt{h, Delivery(DeliverySemantics(7))}, "want AtLeastOnce or AtMostOnce"},
	} {
		if _, err := New(append(base, tc.opts...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error with %q", err, tc.want)
		}
	}
	if _, err := New(append(base, h, Delivery(AtMostOnce))...); err != nil {
		t.Errorf("AtMostOnce in partition order refused: %v", err)
	}
	for _, s := range []string{"at-least-once", "at-most-once"} {
		if d, err := ParseDeliverySemantics(s); err != nil || d.String() != s {
			t.Errorf("ParseDeliverySemantics(%q) = %v, %v", s, d, err)
		}
	}
	if _, err := ParseDeliverySemantics("exactly-once"); err == nil || !strings.Contains(err.Error(), "NewTransactional") {
		t.Errorf("ParseDeliverySemantics(exactly-once): %v, want an error pointing at NewTransactional", err)
	}
}

// The delivery semantics under a crash inside the handler: a child process
// SIGKILLs itself at the start of its 150th handler call, before the
// record's effect; a second process takes over. At most once: that record
// is never handled again (lost) and no record is applied twice. At least
// once: the record is handled again by the second process.
func TestDeliveryCrashInHandler(t *testing.T) {
	parallel(t)
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, mode := range []DeliverySemantics{AtMostOnce, AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 2})
			const n = 400
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: val(i)})
			}
			produce(t, addrs, recs...)
			hist := filepath.Join(t.TempDir(), "history.jsonl")
			env := []string{"OC_BROKERS=" + strings.Join(addrs, ","), "OC_HISTORY=" + hist, "OC_ORDERING=partition",
				"OC_COMMIT_INTERVAL=20ms", "OC_HANDLER_SLEEP=1ms", "OC_DELIVERY=" + mode.String()}
			run1 := startChild(t, "consumer", append(env, "OC_MEMBER=run1", "OC_KILL_AT=150")...)
			if ws := run1.wait(t, 60*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("run 1 should have died of SIGKILL, got %v; output:\n%s", ws, run1.out.String())
			}
			var crashed *event
			for _, e := range readHistory(t, hist) {
				if e.Kind == evCrashIn {
					crashed = &e
				}
			}
			if crashed == nil {
				t.Fatal("run 1 recorded no crash-in event")
			}
			run2 := startChild(t, "consumer", append(env, "OC_MEMBER=run2")...)
			waitFor(t, 60*time.Second, "run 2 committed everything", func() bool {
				return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: n / 2, {"in", 1}: n / 2})
			})
			_ = run2.cmd.Process.Signal(syscall.SIGTERM)
			if ws := run2.wait(t, 30*time.Second); ws.ExitStatus() != 0 {
				t.Fatalf("run 2 exited with %v; output:\n%s", ws, run2.out.String())
			}
			applied := map[string]int{}
			for _, e := range readHistory(t, hist) {
				if e.Kind == evApplied {
					applied[fmt.Sprintf("%s@%d", e.tp(), e.Offset)]++
				}
			}
			key := fmt.Sprintf("%s@%d", crashed.tp(), crashed.Offset)
			twice, lost := 0, 0
			var lostKeys []string
			for i := range n {
				k := fmt.Sprintf("in[%d]@%d", i%2, i/2)
				switch c := applied[k]; {
				case c > 1:
					twice++
				case c == 0:
					lost++
					lostKeys = append(lostKeys, k)
				}
			}
			switch mode {
			case AtMostOnce:
				if applied[key] != 0 {
					t.Fatalf("at most once: %s, whose handler was running at the crash, was applied %d times, want 0", key, applied[key])
				}
				if twice != 0 {
					t.Fatalf("at most once: %d records applied twice", twice)
				}
				if lost > 2 {
					t.Fatalf("at most once: %d records lost (%v; crashed in %s), want at most the one running on each of the 2 partitions; run 1's history:\n%s",
						lost, lostKeys, key, historyTail(t, hist, "run1", 40))
				}
			case AtLeastOnce:
				if applied[key] != 1 {
					t.Fatalf("at least once: %s, whose handler was running at the crash, was applied %d times by the restart, want 1", key, applied[key])
				}
				if lost != 0 {
					t.Fatalf("at least once: %d records never applied", lost)
				}
			}
			t.Logf("%s: crashed in %s; %d lost, %d applied twice", mode, key, lost, twice)
		})
	}
}

// At most once loses nothing on a clean handover: a member joins mid-stream,
// then the first leaves; every record is handled exactly once (an offset is
// committed only as its record starts, and a revoke lets the running
// records finish).
func TestAtMostOnceCleanHandoverLosesNothing(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 4})
	h := newRecorder()
	const perPart = 100
	produceN(t, addrs, 4, perPart)
	handler := func(name string) Opt {
		return WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if err := sleepOrCancel(ctx, 2*time.Millisecond); err != nil {
				return err
			}
			h.applied(name, r)
			return nil
		})
	}
	opts := func(name string) []Opt {
		return rebalanceOpts(addrs, handler(name), Delivery(AtMostOnce), DrainTimeout(2*time.Second), h.hooks(name))
	}
	a := startMember(t, opts("A")...)
	waitFor(t, 30*time.Second, "A applied some", func() bool { return h.count(func(e event) bool { return e.Kind == evApplied }) > 40 })
	b := startMember(t, opts("B")...)
	waitFor(t, 30*time.Second, "B applied some", func() bool {
		return h.count(func(e event) bool { return e.Kind == evApplied && e.Member == "B" }) > 0
	})
	a.stop()
	waitFor(t, 60*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: perPart, {"in", 1}: perPart, {"in", 2}: perPart, {"in", 3}: perPart})
	})
	deadline := time.Now().Add(10 * time.Second)
	for h.count(func(e event) bool { return e.Kind == evApplied }) < 4*perPart {
		if time.Now().After(deadline) {
			applied := map[string]bool{}
			for _, e := range h.snapshot() {
				if e.Kind == evApplied {
					applied[fmt.Sprintf("%s@%d", e.tp(), e.Offset)] = true
				}
			}
			for p := range 4 {
				for o := range perPart {
					k := fmt.Sprintf("in[%d]@%d", p, o)
					if applied[k] {
						continue
					}
					t.Errorf("%s never applied; its partition's history:", k)
					for _, e := range h.snapshot() {
						if e.Topic == "in" && e.Partition == int32(p) && e.Kind != evApplied && e.Kind != evHandle && e.Kind != evHandled && e.Kind != evCompleted {
							t.Logf("  %+v", e)
						}
					}
				}
			}
			t.FailNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.stop()
	applied := map[string]int{}
	for _, e := range h.snapshot() {
		if e.Kind == evApplied {
			applied[fmt.Sprintf("%s@%d", e.tp(), e.Offset)]++
		}
	}
	for p := range 4 {
		for o := range perPart {
			if c := applied[fmt.Sprintf("in[%d]@%d", p, o)]; c != 1 {
				t.Errorf("in[%d]@%d applied %d times, want 1", p, o, c)
			}
		}
	}
}

// historyTail returns the last n events of member in the history file at
// path, one per line, for a failure message.
func historyTail(t *testing.T, path, member string, n int) string {
	t.Helper()
	var evs []event
	for _, e := range readHistory(t, path) {
		if e.Member == member {
			evs = append(evs, e)
		}
	}
	evs = evs[max(0, len(evs)-n):]
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s@%d\n", e.Member, e.Kind, e.tp(), e.Offset)
	}
	return b.String()
}
