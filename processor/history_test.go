package processor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The scenario tests record a history of what every member did (through the
// runtime's test hooks) and check invariants over it afterwards, in the
// Jepsen manner, rather than trusting the code under test to report on
// itself. Child processes (crash tests) append the same events to a file as
// JSON lines; the parent reads them back.

// Event kinds.
const (
	evAssigned     = "assigned"
	evReleaseStart = "release-start" // Why: revoked, lost, shutdown
	evReleaseEnd   = "release-end"
	evHandle       = "handle"    // a handler attempt starts
	evHandled      = "handled"   // a handler attempt returned (Err)
	evCompleted    = "completed" // the runtime let the record's offset be passed (Target: forwarded to)
	evCommitSent   = "commit-sent"
	evCommitOK     = "commit-ok" // accepted by the broker
	evApplied      = "applied"   // the test's handler applied an effect
	evCrashIn      = "crash-in"  // a child process SIGKILLs itself in the handler of this record, before its effect
)

type event struct {
	Seq       int64  `json:"seq"`
	Member    string `json:"member"`
	Kind      string `json:"kind"`
	Why       string `json:"why,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"` // record offset, or committed offset for commits
	// Original coordinates of a retry-topic record as shown to the handler.
	ViewTopic  string `json:"viewTopic,omitempty"`
	ViewOffset int64  `json:"viewOffset,omitempty"`
	Target     string `json:"target,omitempty"`
	Err        string `json:"err,omitempty"`
	Gen        int32  `json:"gen,omitempty"`
	MemberID   string `json:"memberId,omitempty"`
	Value      string `json:"value,omitempty"`
	Delivery   int32  `json:"delivery,omitempty"` // share groups: the broker's delivery count of the record
	At         int64  `json:"at"`                 // Unix nanoseconds
}

func (e event) tp() tp { return tp{e.Topic, e.Partition} }

// recorder collects events from any number of members, in one order.
type recorder struct {
	mu     sync.Mutex
	events []event
	file   *os.File // child processes: every event is also appended here
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Seq = int64(len(r.events))
	e.At = time.Now().UnixNano()
	r.events = append(r.events, e)
	if r.file != nil {
		b, _ := json.Marshal(e)
		// One write per event, no buffering: it survives a SIGKILL.
		if _, err := r.file.Write(append(b, '\n')); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// count returns how many events match f.
func (r *recorder) count(f func(e event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if f(e) {
			n++
		}
	}
	return n
}

// hooks returns an option installing runtime hooks that record into r as
// member.
func (r *recorder) hooks(member string) Opt { return withHooks(r.hookSet(member)) }

// hookSet returns runtime hooks that record into r as member, for tests that
// add to them before passing them to withHooks.
func (r *recorder) hookSet(member string) hooks {
	recEv := func(kind string, rec, view *kgo.Record) event {
		e := event{Member: member, Kind: kind, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Value: string(rec.Value)}
		if view != nil && view != rec {
			e.ViewTopic, e.ViewOffset = view.Topic, view.Offset
		}
		return e
	}
	parts := func(kind, why string, m map[string][]int32) {
		for t, ps := range m {
			for _, p := range ps {
				r.add(event{Member: member, Kind: kind, Why: why, Topic: t, Partition: p})
			}
		}
	}
	return hooks{
		handleStart: func(rec, view *kgo.Record) { r.add(recEv(evHandle, rec, view)) },
		afterHandle: func(rec, view *kgo.Record, err error) {
			e := recEv(evHandled, rec, view)
			if err != nil {
				e.Err = err.Error()
			}
			r.add(e)
		},
		completed: func(rec, view *kgo.Record, target string) {
			e := recEv(evCompleted, rec, view)
			e.Target = target
			r.add(e)
		},
		commitSent: func(memberID string, gen int32, offs map[string]map[int32]int64) {
			for t, ps := range offs {
				for p, o := range ps {
					r.add(event{Member: member, Kind: evCommitSent, Topic: t, Partition: p, Offset: o, Gen: gen, MemberID: memberID})
				}
			}
		},
		commitDone: func(acc map[string]map[int32]int64, _ error) {
			for t, ps := range acc {
				for p, o := range ps {
					r.add(event{Member: member, Kind: evCommitOK, Topic: t, Partition: p, Offset: o})
				}
			}
		},
		partitions: func(ev string, m map[string][]int32) {
			kind, why, _ := strings.Cut(ev, ":")
			parts(kind, why, m)
		},
	}
}

// applied records an effect of the test's handler.
func (r *recorder) applied(member string, rec *kgo.Record) {
	r.add(event{Member: member, Kind: evApplied, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Value: string(rec.Value)})
}

// readHistory loads the events child processes appended to path, numbering
// them in file order.
func readHistory(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A SIGKILL can cut the last line short.
			continue
		}
		e.Seq = int64(len(out))
		out = append(out, e)
	}
	return out
}

// historyReport is what checkHistory found besides violations.
type historyReport struct {
	// completions counts "completed" events per record (as fetched).
	completions map[tp]map[int64]int
	// duplicates lists records completed more than once.
	duplicates []string
}

// checkHistory checks the runtime's guarantees over events:
//
//   - a member starts a handler for a partition only while it owns it
//     (from "assigned" to "release-start"): records fetched under an old
//     assignment, or buffered when a revoke began, are never handled;
//   - a member sends a commit for a partition only while it owns it (until
//     "release-end");
//   - an accepted commit never passes an offset of the log (logOffsets) that
//     was not completed before it;
//   - no handler starts for a record that an accepted commit already passed
//     (so duplicates are only of records not yet passed by a commit);
//   - the accepted commits of a partition never move backwards;
//   - with complete, every offset of logOffsets was completed.
func checkHistory(t *testing.T, events []event, logOffsets map[tp][]int64, complete bool) historyReport {
	t.Helper()
	var violations []string
	bad := func(f string, a ...any) {
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(f, a...))
		}
	}
	type mtp struct {
		member string
		tp     tp
	}
	owned := map[mtp]int{} // 0 none, 1 owned, 2 releasing (commits allowed, handling not)
	completedAt := map[tp]map[int64]int64{}
	rep := historyReport{completions: map[tp]map[int64]int{}}
	lastCommit := map[tp]int64{}
	for _, e := range events {
		k := mtp{e.Member, e.tp()}
		switch e.Kind {
		case evAssigned:
			owned[k] = 1
		case evReleaseStart:
			if owned[k] == 1 {
				owned[k] = 2
			}
		case evReleaseEnd:
			owned[k] = 0
		case evHandle:
			if owned[k] != 1 {
				bad("seq %d: %s starts a handler for %s@%d without owning %s (state %d)", e.Seq, e.Member, e.tp(), e.Offset, e.tp(), owned[k])
			}
			if c, ok := lastCommit[e.tp()]; ok && c > e.Offset {
				bad("seq %d: %s handles %s@%d after a commit passed it (committed %d)", e.Seq, e.Member, e.tp(), e.Offset, c)
			}
		case evCompleted:
			if completedAt[e.tp()] == nil {
				completedAt[e.tp()] = map[int64]int64{}
				rep.completions[e.tp()] = map[int64]int{}
			}
			if _, ok := completedAt[e.tp()][e.Offset]; !ok {
				completedAt[e.tp()][e.Offset] = e.Seq
			}
			rep.completions[e.tp()][e.Offset]++
			if owned[k] == 0 {
				bad("seq %d: %s completes %s@%d after releasing it", e.Seq, e.Member, e.tp(), e.Offset)
			}
		case evCommitSent:
			if owned[k] == 0 {
				bad("seq %d: %s sends a commit %s->%d for a partition it does not own", e.Seq, e.Member, e.tp(), e.Offset)
			}
		case evCommitOK:
			if c, ok := lastCommit[e.tp()]; ok && e.Offset < c {
				bad("seq %d: commit of %s moves backwards %d -> %d (%s)", e.Seq, e.tp(), c, e.Offset, e.Member)
			}
			lastCommit[e.tp()] = max(lastCommit[e.tp()], e.Offset)
			for _, o := range logOffsets[e.tp()] {
				if o >= e.Offset {
					break
				}
				if s, ok := completedAt[e.tp()][o]; !ok || s > e.Seq {
					bad("seq %d: %s commits %s->%d but offset %d was not completed", e.Seq, e.Member, e.tp(), e.Offset, o)
					break
				}
			}
		}
	}
	if complete {
		for k, offs := range logOffsets {
			for _, o := range offs {
				if _, ok := completedAt[k][o]; !ok {
					bad("lost: %s@%d was never completed", k, o)
				}
			}
		}
	}
	for k, m := range rep.completions {
		for o, n := range m {
			if n > 1 {
				rep.duplicates = append(rep.duplicates, fmt.Sprintf("%s@%d x%d", k, o, n))
			}
		}
	}
	sort.Strings(rep.duplicates)
	if len(violations) > 0 {
		t.Errorf("history (%d events) violates the runtime's guarantees:\n  %s", len(events), strings.Join(violations, "\n  "))
	}
	return rep
}

// logOffsetsOf reads every record of topics from the start (up to their
// current end offsets) and returns their offsets per partition.
func logOffsetsOf(t *testing.T, addrs []string, topics ...string) map[tp][]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends := endOffsets(t, addrs, topics...)
	want := 0
	for _, e := range ends {
		want += int(e)
	}
	out := map[tp][]int64{}
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for got < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			out[k] = append(out[k], r.Offset)
			got++
		})
	}
	if got < want {
		t.Fatalf("read %d of %d records of %v", got, want, topics)
	}
	return out
}
