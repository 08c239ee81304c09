package processor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// s18Modes runs a start-position scenario with New (under the classic group
// protocol and KIP-848's) and with NewTransactional:
// start(opts, seen) starts a member of group "g" on "in" that adds the value
// of every record it handles to seen, and returns its stop function.
func s18Modes(t *testing.T, run func(t *testing.T, start func(seen *history, opts ...Opt) func())) {
	t.Run("New", func(t *testing.T) {
		run(t, func(seen *history, opts ...Opt) func() {
			h := func(_ context.Context, r *kgo.Record) error { seen.add(string(r.Value)); return nil }
			return startMember(t, append([]Opt{WithHandler(h), CommitInterval(20 * time.Millisecond)}, opts...)...).stop
		})
	})
	t.Run("New/KIP-848", func(t *testing.T) {
		run(t, func(seen *history, opts ...Opt) func() {
			h := func(_ context.Context, r *kgo.Record) error { seen.add(string(r.Value)); return nil }
			return startMember(t, append([]Opt{WithHandler(h), CommitInterval(20 * time.Millisecond), GroupProtocol("consumer")}, opts...)...).stop
		})
	})
	t.Run("NewTransactional", func(t *testing.T) {
		run(t, func(seen *history, opts ...Opt) func() {
			h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
				seen.add(string(r.Value))
				return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
			}
			tp, err := NewTransactional("s18-txn", h, mustTxnOpts(t, append([]Opt{CommitInterval(20 * time.Millisecond)}, opts...))...)
			if err != nil {
				t.Fatal(err)
			}
			return testkafka.Run(t, tp)
		})
	})
}

// rec is a record of "in" with the given partition, value and timestamp (zero:
// the producer's clock).
func rec(p int32, v string, ts time.Time) *kgo.Record {
	return &kgo.Record{Topic: "in", Partition: p, Value: []byte(v), Timestamp: ts}
}

// warmUp writes records to partitions 0 and 1 of "in" until the member has
// handled one of each: then it has resolved its start offsets (for every
// partition at once: franz-go fetches none before all are resolved), and
// every record written from now on is after them. The warm-up records are
// "warmup-*": written around the start, whether they are consumed is not
// decided.
func warmUp(t *testing.T, addrs []string, seen *history) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for seen.count("warmup-0") == 0 || seen.count("warmup-1") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no warm-up record handled within 20s")
		}
		produce(t, addrs, rec(0, "warmup-0", time.Time{}), rec(1, "warmup-1", time.Time{}))
		time.Sleep(10 * time.Millisecond) // pace the writes; the loop polls seen
	}
}

// finish writes a marker to every partition of "in" and waits until seen has
// all of them: records are handled in partition order, so every record
// written before a marker that is going to be handled has been by then.
func finish(t *testing.T, addrs []string, seen *history, parts int32, tag string) {
	t.Helper()
	var recs []*kgo.Record
	for p := range parts {
		recs = append(recs, rec(p, fmt.Sprintf("%s-marker-%d", tag, p), time.Time{}))
	}
	produce(t, addrs, recs...)
	waitFor(t, 30*time.Second, tag+" markers handled", func() bool {
		for p := range parts {
			if seen.count(fmt.Sprintf("%s-marker-%d", tag, p)) == 0 {
				return false
			}
		}
		return true
	})
}

// TestS18StartLatest is docs/scenarios.md S18: a new group told to start at the
// latest offset, on 4 partitions. Records written before its first start
// are not consumed; records written during its run to partitions 0 and 1
// are; it stops; records are written to partitions 2 and 3, which had no
// record (so no record commit) during the run; after a restart those are
// consumed too. Without the start offsets committed at assignment, the
// restart resolves "latest" again for partitions 2 and 3 and skips them.
func TestS18StartLatest(t *testing.T) {
	parallel(t)
	s18Modes(t, func(t *testing.T, start func(*history, ...Opt) func()) {
		addrs := testCluster(t, map[string]int32{"in": 4, "out": 1, "g.dlq": 1})
		opts := []Opt{Brokers(addrs...), Group("g"), Topics("in"), StartOffset(Latest)}
		for p := range int32(4) {
			produce(t, addrs, rec(p, fmt.Sprintf("before-%d-a", p), time.Time{}), rec(p, fmt.Sprintf("before-%d-b", p), time.Time{}))
		}
		seen := newHistory()
		stop := start(seen, opts...)
		warmUp(t, addrs, seen)
		var want []string
		for i := range 10 {
			v := fmt.Sprintf("run-%d", i)
			produce(t, addrs, rec(int32(i%2), v, time.Time{}))
			want = append(want, v)
		}
		waitFor(t, 30*time.Second, "records of the first run handled", func() bool { return seen.distinct() == len(want)+2 })
		stop()
		for i := range 10 {
			v := fmt.Sprintf("down-%d", i)
			produce(t, addrs, rec(int32(2+i%2), v, time.Time{}))
			want = append(want, v)
		}
		stop = start(seen, opts...)
		finish(t, addrs, seen, 4, "restart")
		stop()
		checkSeen(t, seen, want, "restart-marker-", "warmup-")
	})
}

// TestS18StartAtTime is S18 with a time: records stamped before the time are
// not consumed, records stamped at or after it are, even those written before
// the group started; a partition with no such record starts at its end, and
// that start is committed, so records written there while the group is down
// are consumed after its restart whatever their timestamps.
func TestS18StartAtTime(t *testing.T) {
	s18Modes(t, func(t *testing.T, start func(*history, ...Opt) func()) {
		addrs := testCluster(t, map[string]int32{"in": 4, "out": 1, "g.dlq": 1})
		now := time.Now().Truncate(time.Millisecond)
		at := now.Add(-30 * time.Minute)
		opts := []Opt{Brokers(addrs...), Group("g"), Topics("in"), StartOffset(AtTime(at))}
		var want []string
		for p := range int32(4) {
			produce(t, addrs, rec(p, fmt.Sprintf("before-%d", p), at.Add(-time.Hour)), rec(p, fmt.Sprintf("before-%d-edge", p), at.Add(-time.Millisecond)))
			if p < 2 {
				v := fmt.Sprintf("after-%d", p)
				produce(t, addrs, rec(p, v, at))
				want = append(want, v)
			}
		}
		seen := newHistory()
		stop := start(seen, opts...)
		waitFor(t, 30*time.Second, "records stamped at or after the start time handled", func() bool { return seen.distinct() == len(want) })
		stop()
		for i := range 6 {
			v := fmt.Sprintf("down-%d", i)
			produce(t, addrs, rec(int32(2+i%2), v, at.Add(-2*time.Hour)))
			want = append(want, v)
		}
		stop = start(seen, opts...)
		finish(t, addrs, seen, 4, "restart")
		stop()
		checkSeen(t, seen, want, "restart-marker-")
	})
}

// TestS18StartLatestPartitionAdded is S18 for a partition added while the
// group runs: a group told to start at the latest offset runs on "in" (2
// partitions, records written to both before its first start); a third
// partition is added (CreatePartitions) and records are written to it at
// once, before the group has noticed it. Every record written after the
// group's first start is consumed, so those are not skipped, and the
// records written before it still are never consumed. Kafka's own consumer
// loses them with auto.offset.reset=latest (KIP-842). Without the group's
// start time the member resolves the new partition to its end when it is
// assigned it, and skips them.
func TestS18StartLatestPartitionAdded(t *testing.T) {
	parallel(t)
	s18Modes(t, func(t *testing.T, start func(*history, ...Opt) func()) {
		addrs := testCluster(t, map[string]int32{"in": 2, "out": 1, "g.dlq": 1})
		opts := []Opt{Brokers(addrs...), Group("g"), Topics("in"), StartOffset(Latest),
			ClientOpts(kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond))}
		produce(t, addrs, rec(0, "before-0", time.Time{}), rec(1, "before-1", time.Time{}))
		seen := newHistory()
		stop := start(seen, opts...)
		defer stop()
		warmUp(t, addrs, seen)
		addPartition(t, addrs)
		var want []string
		for i := range 10 {
			v := fmt.Sprintf("new-%d", i)
			produce(t, addrs, rec(2, v, time.Time{}))
			want = append(want, v)
		}
		// The group handles partition 2 once it is assigned it: wait for
		// that (markers written until one is handled), then check that
		// what was written before is not skipped.
		deadline := time.Now().Add(30 * time.Second)
		for seen.count("end-2") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("partition 2 never handled within 30s; seen %v", seen.log)
			}
			produce(t, addrs, rec(2, "end-2", time.Time{}))
			time.Sleep(50 * time.Millisecond) // pace the writes; the loop polls seen
		}
		checkSeen(t, seen, want, "end-", "warmup-")
	})
}

// TestS18StartLatestPartitionAddedWhileDown is S18 for a partition added
// while the whole group is down: the group starts at the latest offset on
// "in" (2 partitions, records written to both before its first start),
// handles records, and stops; a third partition is added and records are
// written to all three; after a restart every record written after the
// first start is consumed, those of the new partition included, and none
// written before it. Every commit the group left carries its start time,
// taken between the member's start and its first handled record. Without
// the start time in the commits the restarted member sees no commit for
// partition 2, takes it for a first start, resolves it to its end and
// skips its records.
func TestS18StartLatestPartitionAddedWhileDown(t *testing.T) {
	parallel(t)
	s18Modes(t, func(t *testing.T, start func(*history, ...Opt) func()) {
		addrs := testCluster(t, map[string]int32{"in": 2, "out": 1, "g.dlq": 1})
		opts := []Opt{Brokers(addrs...), Group("g"), Topics("in"), StartOffset(Latest)}
		produce(t, addrs, rec(0, "before-0", time.Time{}), rec(1, "before-1", time.Time{}))
		seen := newHistory()
		started := time.Now().UnixMilli()
		stop := start(seen, opts...)
		warmUp(t, addrs, seen)
		warm := time.Now().UnixMilli()
		var want []string
		for i := range 6 {
			v := fmt.Sprintf("run-%d", i)
			produce(t, addrs, rec(int32(i%2), v, time.Time{}))
			want = append(want, v)
		}
		waitFor(t, 30*time.Second, "records of the first run handled", func() bool { return seen.distinct() == len(want)+2 })
		stop()
		metas := commitMetadata(t, addrs, "g", "in")
		if len(metas) != 2 {
			t.Errorf("commits on in: %v, want one per partition", metas)
		}
		for p, meta := range metas {
			if ms, ok := decodeGroupStart(meta); !ok || ms < started || ms > warm {
				t.Errorf("in[%d]: commit metadata %q: want the group's start time in [%d, %d]", p, meta, started, warm)
			}
		}
		addPartition(t, addrs)
		for i := range 9 {
			v := fmt.Sprintf("down-%d", i)
			produce(t, addrs, rec(int32(i%3), v, time.Time{}))
			want = append(want, v)
		}
		stop = start(seen, opts...)
		finish(t, addrs, seen, 3, "restart")
		stop()
		checkSeen(t, seen, want, "restart-marker-", "warmup-")
	})
}

// addPartition adds a partition to "in" (CreatePartitions).
func addPartition(t *testing.T, addrs []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	before, err := adm.ListTopics(context.Background(), "in")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := adm.CreatePartitions(context.Background(), 1, "in")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// A real cluster's metadata shows the new partition a moment later;
	// a producer that asks before then refuses to write to it.
	want := len(before["in"].Partitions) + 1
	waitFor(t, 30*time.Second, "the new partition in the metadata", func() bool {
		td, err := adm.ListTopics(context.Background(), "in")
		return err == nil && len(td["in"].Partitions) == want
	})
}

// commitMetadata returns the metadata of the group's committed offsets for
// topic, by partition.
func commitMetadata(t *testing.T, addrs []string, group, topic string) map[int32]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(context.Background(), group, topic)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]string{}
	resps.Each(func(r kadm.OffsetResponse) {
		if r.Topic == topic && r.At >= 0 {
			out[r.Partition] = r.Metadata
		}
	})
	if len(out) == 0 {
		t.Fatalf("no commit of group %s on %s", group, topic)
	}
	return out
}

// checkSeen fails unless seen holds every value of want, and nothing else
// but values with one of the prefixes.
func checkSeen(t *testing.T, seen *history, want []string, prefixes ...string) {
	t.Helper()
	for _, v := range want {
		if seen.count(v) == 0 {
			t.Errorf("%s was not consumed", v)
		}
	}
	wanted := map[string]bool{}
	for _, v := range want {
		wanted[v] = true
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for v := range seen.seen {
		if !wanted[v] && !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(v, p) }) {
			t.Errorf("%s was consumed: it is before the start position", v)
		}
	}
}

// TestStartEarliestDefault: without StartOffset a new group reads every
// record from the log start, as before, and commits nothing before a record
// is done.
func TestStartEarliestDefault(t *testing.T) {
	s18Modes(t, func(t *testing.T, start func(*history, ...Opt) func()) {
		addrs := testCluster(t, map[string]int32{"in": 2, "out": 1, "g.dlq": 1})
		produce(t, addrs, rec(0, "before-0", time.Time{}), rec(1, "before-1", time.Time{}))
		seen := newHistory()
		stop := start(seen, Brokers(addrs...), Group("g"), Topics("in"))
		finish(t, addrs, seen, 2, "m")
		stop()
		checkSeen(t, seen, []string{"before-0", "before-1"}, "m-marker-")
	})
}

// TestStartRetryTopicsFromStart: with StartOffset(Latest), a record the
// group wrote to its retry topic is handled from there even when the retry
// topic partition had no committed offset: retry topics are always read from
// their start.
func TestStartRetryTopicsFromStart(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "g.retry.1": 1, "g.dlq": 1})
	// A record already in the retry topic before the group started, as one
	// forwarded by a member of this group whose offsets were not committed
	// on the retry topic yet.
	produce(t, addrs, &kgo.Record{Topic: "g.retry.1", Value: []byte("retried"), Headers: []kgo.RecordHeader{
		{Key: HeaderOriginalTopic, Value: []byte("in")},
		{Key: HeaderOriginalPartition, Value: []byte("0")},
		{Key: HeaderOriginalOffset, Value: []byte("0")},
	}})
	seen := newHistory()
	h := func(_ context.Context, r *kgo.Record) error { seen.add(string(r.Value)); return nil }
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), StartOffset(Latest), RetryTopics(time.Millisecond))
	waitFor(t, 20*time.Second, "the retry topic record handled", func() bool { return seen.count("retried") == 1 })
	m.stop()
}

func TestParseStart(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Start
		err  string
	}{
		{in: "earliest", want: Earliest},
		{in: "LATEST", want: Latest},
		{in: "2026-05-01T12:00:00Z", want: AtTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))},
		{in: "2026-05-01T14:00:00.250+02:00", want: AtTime(time.Date(2026, 5, 1, 12, 0, 0, 250e6, time.UTC))},
		{in: "yesterday", err: "want earliest, latest or an RFC 3339 time"},
		{in: "2026-05-01", err: "want earliest, latest or an RFC 3339 time"},
		{in: "1969-12-31T00:00:00Z", err: "before 1970"},
	} {
		got, err := ParseStart(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseStart(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.kind != tc.want.kind || !got.at.Equal(tc.want.at) {
			t.Errorf("ParseStart(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseStart(got.String()); err != nil || back.kind != got.kind || !back.at.Equal(got.at) {
			t.Errorf("ParseStart(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

// TestStartOutOfRangeResumesAtLogStart: a committed offset below the log
// start (retention deleted the records it points to) is not a start: with
// StartOffset(Latest) the group still resumes at the log start and handles
// every record that is left, instead of Kafka's auto.offset.reset=latest,
// which would skip them.
func TestStartOutOfRangeResumesAtLogStart(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "g.dlq": 1})
	for i := range 10 {
		produce(t, addrs, rec(0, fmt.Sprintf("r%d", i), time.Time{}))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "in", Partition: 0, At: 2, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: "in", Partition: 0, At: 5, LeaderEpoch: -1})
	if res, err := adm.DeleteRecords(ctx, del); err != nil || res.Error() != nil {
		t.Fatalf("delete records: %v %v", err, res.Error())
	}
	seen := newHistory()
	h := func(_ context.Context, r *kgo.Record) error { seen.add(string(r.Value)); return nil }
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), StartOffset(Latest))
	waitFor(t, 20*time.Second, "the records left after the deletion handled", func() bool { return seen.distinct() == 5 })
	m.stop()
	checkSeen(t, seen, []string{"r5", "r6", "r7", "r8", "r9"})
}
