package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/dlq"
)

func rec(topic string, partition int32, key, value string, headers ...string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(key), Value: []byte(value)}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

// dlqRec is a DLQ record as the runtime writes it.
func dlqRec(group string, partition int32, key, value, class, origTopic string, origOffset int) *kgo.Record {
	return rec(processor.DLQTopic(group), partition, key, value,
		"trace", "t-"+key,
		processor.HeaderOriginalTopic, origTopic,
		processor.HeaderOriginalPartition, "0",
		processor.HeaderOriginalOffset, itoa(origOffset),
		processor.HeaderConsumerGroup, group,
		processor.HeaderErrorClass, class,
		processor.HeaderErrorMessage, "boom",
		processor.HeaderAttempts, "3",
	)
}

func itoa(i int) string { return strconv.Itoa(i) }

// readCommitted returns the values of topic's committed records, reading
// up to the last stable offsets.
func readCommitted(t *testing.T, addrs []string, adm *kadm.Client, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []string
	for len(left) > 0 {
		f := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		f.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, string(r.Value))
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return out
}

func endOffsets(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// TestReplayRoundTrip: a record fails for a cause that a flag fixes, is
// dead-lettered, the cause is fixed, the record is replayed and processed
// once, with its key, its own headers and ordercast-replayed-from; a second
// replay is refused and writes nothing; --force replays it again.
func TestReplayRoundTrip(t *testing.T) {
	ctx := context.Background()
	addrs, adm := testCluster(t, map[string]int32{"events": 2, "g.dlq": 2})
	var fixed atomic.Bool
	seen := newCounter()
	runProcessor(t, processor.Brokers(addrs...), processor.Group("g"), processor.Topics("events"),
		processor.CommitInterval(20*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if string(r.Value) == "bad" && !fixed.Load() {
				return processor.Permanentf("price list not loaded yet")
			}
			seen.add(r)
			return nil
		}))
	bad := rec("events", 0, "k2", "bad", "trace", "abc")
	bad.Timestamp = time.UnixMilli(1700000000123)
	produce(t, addrs, rec("events", 0, "k1", "ok1"), bad, rec("events", 0, "k3", "ok2"))
	waitFor(t, 10*time.Second, "ok2 handled", func() bool { return seen.get("ok2") == 1 })

	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var l *dlq.Listing
	waitFor(t, 10*time.Second, "the bad record in the DLQ", func() bool {
		l, err = d.List(ctx, dlq.Selection{}, 0)
		return err == nil && l.Selected == 1
	})
	dead := l.Records[0]
	if dead.ErrorClass != "permanent" || dead.OriginalTopic != "events" || dead.OriginalPartition != 0 || dead.OriginalOffset != 1 ||
		dead.Key != "k2" || dead.ConsumerGroup != "g" || l.ByClass["permanent"] != 1 || l.ByOriginalTopic["events"] != 1 ||
		!dead.OriginalTimestamp.Equal(bad.Timestamp) {
		t.Fatalf("DLQ record %+v, listing %+v", dead, l)
	}

	fixed.Store(true)
	sel := dlq.Selection{Classes: []string{"permanent"}}
	res, err := d.Replay(ctx, dlq.ReplayOptions{Selection: sel, Rate: 50})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if len(res.Replayed) != 1 || res.Replayed[0].From != dead.ID || !strings.HasPrefix(res.Replayed[0].To, "events/") || len(res.Refused) != 0 {
		t.Fatalf("replay result %+v", res)
	}
	waitFor(t, 10*time.Second, "the replayed record handled", func() bool { return seen.get("bad") == 1 })
	if got := seen.header("bad", processor.HeaderReplayed); got != dead.ID {
		t.Errorf("%s = %q, want %q", processor.HeaderReplayed, got, dead.ID)
	}
	if got := seen.header("bad", "trace"); got != "abc" {
		t.Errorf("own header trace = %q, want abc", got)
	}
	if got := seen.header("bad", processor.HeaderErrorClass); got != "" {
		t.Errorf("replayed record still carries %s=%q", processor.HeaderErrorClass, got)
	}

	before := endOffsets(t, adm, "events")
	res2, err := d.Replay(ctx, dlq.ReplayOptions{Selection: sel})
	if !errors.Is(err, dlq.ErrAlreadyReplayed) || !strings.Contains(err.Error(), "ReplayOptions.Force") {
		t.Fatalf("second replay: err %v, want ErrAlreadyReplayed naming the option that replays it again (ReplayOptions.Force)", err)
	}
	if len(res2.Replayed) != 0 || len(res2.Refused) != 1 || res2.Refused[0].ID != dead.ID {
		t.Fatalf("second replay result %+v", res2)
	}
	if after := endOffsets(t, adm, "events"); after != before {
		t.Fatalf("a refused replay wrote %d records", after-before)
	}
	produce(t, addrs, rec("events", 0, "k4", "ok3"))
	waitFor(t, 10*time.Second, "ok3 handled", func() bool { return seen.get("ok3") == 1 })
	if n := seen.get("bad"); n != 1 {
		t.Fatalf("the replayed record was handled %d times, want 1", n)
	}
	l2, err := d.List(ctx, dlq.Selection{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Replayed != 1 || l2.Records[0].Replay == nil || l2.Records[0].Replay.To != res.Replayed[0].To || l2.Records[0].Replay.Target != "source" {
		t.Fatalf("listing after replay %+v", l2.Records)
	}

	res3, err := d.Replay(ctx, dlq.ReplayOptions{Selection: sel, Force: true})
	if err != nil || len(res3.Replayed) != 1 || !res3.Replayed[0].Forced {
		t.Fatalf("forced replay: %+v, %v", res3, err)
	}
	waitFor(t, 10*time.Second, "the forced replay handled", func() bool { return seen.get("bad") == 2 })
}

// TestReplayToRetryTopic: --to retry writes to <group>.retry.1 only (the
// source topic is untouched) and the handler sees the original topic.
func TestReplayToRetryTopic(t *testing.T) {
	ctx := context.Background()
	addrs, adm := testCluster(t, map[string]int32{"events": 1, "h.retry.1": 1, "h.dlq": 1})
	var fixed atomic.Bool
	var mu sync.Mutex
	var topics []string
	seen := newCounter()
	runProcessor(t, processor.Brokers(addrs...), processor.Group("h"), processor.Topics("events"),
		processor.RetryTopics(10*time.Millisecond), processor.MaxAttempts(1), processor.CommitInterval(20*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if !fixed.Load() {
				return processor.Permanentf("not yet")
			}
			mu.Lock()
			topics = append(topics, r.Topic)
			mu.Unlock()
			seen.add(r)
			return nil
		}))
	produce(t, addrs, rec("events", 0, "k", "v"))
	d, err := dlq.New("h", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	waitFor(t, 10*time.Second, "the record in the DLQ", func() bool {
		l, err := d.List(ctx, dlq.Selection{}, 0)
		return err == nil && l.Selected == 1
	})
	fixed.Store(true)
	res, err := d.Replay(ctx, dlq.ReplayOptions{To: dlq.TargetRetry})
	if err != nil || len(res.Replayed) != 1 || !strings.HasPrefix(res.Replayed[0].To, "h.retry.1/") {
		t.Fatalf("replay to retry: %+v, %v", res, err)
	}
	waitFor(t, 10*time.Second, "the replayed record handled", func() bool { return seen.get("v") == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(topics) != 1 || topics[0] != "events" {
		t.Errorf("handler saw topics %v, want [events]", topics)
	}
	// The record on the retry topic carries the replay mark (the runtime's
	// retry view shows the handler only the record's own headers).
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("h.retry.1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var retried *kgo.Record
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for retried == nil && pctx.Err() == nil {
		rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) { retried = r })
	}
	hs := map[string]string{}
	if retried != nil {
		for _, h := range retried.Headers {
			hs[h.Key] = string(h.Value)
		}
	}
	if hs[processor.HeaderReplayed] != "h.dlq/0/0" || hs[processor.HeaderOriginalTopic] != "events" || hs[processor.HeaderRetryDue] == "" || hs[processor.HeaderErrorClass] != "" {
		t.Errorf("retry-topic record headers %v", hs)
	}
	if n := endOffsets(t, adm, "events"); n != 1 {
		t.Errorf("the source topic has %d records, want 1: a retry replay must not write it", n)
	}

	// A group without retry topics: the error says so and how to proceed.
	d2, _ := dlq.New("nogroup", kgo.SeedBrokers(addrs...))
	defer d2.Close()
	if _, err := d2.Replay(ctx, dlq.ReplayOptions{To: dlq.TargetRetry}); err == nil || !strings.Contains(err.Error(), "--to source") {
		t.Errorf("replay to a missing retry topic: %v", err)
	}
}

// TestPurgeAdvancesPosition: purging moves a stored position and deletes
// nothing; purged records are not listed and not replayed; the position
// never moves back without Force.
func TestPurgeAdvancesPosition(t *testing.T) {
	ctx := context.Background()
	addrs, adm := testCluster(t, map[string]int32{"events": 1, "p.dlq": 2})
	produce(t, addrs,
		dlqRec("p", 0, "a", "1", "invalid", "events", 0),
		dlqRec("p", 0, "b", "2", "undecodable", "events", 1),
		dlqRec("p", 0, "c", "3", "invalid", "events", 2),
		dlqRec("p", 1, "d", "4", "invalid", "events", 3),
	)
	d, err := dlq.New("p", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	l, err := d.List(ctx, dlq.Selection{Classes: []string{"invalid"}}, 0)
	if err != nil || l.Selected != 3 || l.ByClass["invalid"] != 3 || len(l.Partitions) != 2 || l.Partitions[0].Pending != 3 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	// Replay one record so the purge reports it as replayed.
	if _, err := d.Replay(ctx, dlq.ReplayOptions{Selection: dlq.Selection{Partitions: []int32{0}, From: 0, Until: 1}}); err != nil {
		t.Fatal(err)
	}

	dry, err := d.Purge(ctx, dlq.PurgeOptions{Partitions: []int32{0}, Until: 2, DryRun: true})
	if err != nil || len(dry.Partitions) != 1 || dry.Partitions[0].Records != 2 || dry.Partitions[0].Replayed != 1 || dry.Partitions[0].NotReplayed != 1 {
		t.Fatalf("dry-run purge: %+v, %v", dry, err)
	}
	if l, _ := d.List(ctx, dlq.Selection{}, 0); l.Selected != 4 {
		t.Fatalf("a dry run purged: %d selected", l.Selected)
	}
	if _, err := d.Purge(ctx, dlq.PurgeOptions{Partitions: []int32{0}, Until: 2}); err != nil {
		t.Fatal(err)
	}
	l, err = d.List(ctx, dlq.Selection{}, 0)
	if err != nil || l.Selected != 2 || l.Records[0].ID != "p.dlq/0/2" || l.Partitions[0].Position != 2 || l.Partitions[0].Pending != 1 {
		t.Fatalf("after purge to 2: %+v, %v", l, err)
	}
	starts, _ := adm.ListStartOffsets(ctx, "p.dlq")
	if s, _ := starts.Lookup("p.dlq", 0); s.Offset != 0 || endOffsets(t, adm, "p.dlq") != 4 {
		t.Fatalf("purge deleted records: start %d", s.Offset)
	}
	// Purged records are refused by replay, even when selected explicitly.
	res, err := d.Replay(ctx, dlq.ReplayOptions{Selection: dlq.Selection{Partitions: []int32{0}, Until: 2, IncludePurged: true}, Force: true})
	if !errors.Is(err, dlq.ErrPurged) || len(res.Replayed) != 0 || len(res.Refused) != 2 {
		t.Fatalf("replay of purged records: %+v, %v", res, err)
	}
	// Show still finds a purged record, marked.
	r, err := d.Show(ctx, 0, 1)
	if err != nil || !r.Purged || r.ErrorClass != "undecodable" || string(r.Value) != "2" {
		t.Fatalf("show purged: %+v, %v", r, err)
	}
	if _, err := d.Show(ctx, 0, 9); !errors.Is(err, dlq.ErrNoRecord) {
		t.Fatalf("show past the end: %v", err)
	}
	// Backwards needs Force.
	if _, err := d.Purge(ctx, dlq.PurgeOptions{Partitions: []int32{0}, Until: 1}); !errors.Is(err, dlq.ErrBackwards) {
		t.Fatalf("purge backwards: %v", err)
	}
	if _, err := d.Purge(ctx, dlq.PurgeOptions{Partitions: []int32{0}, Until: 1, Force: true}); err != nil {
		t.Fatal(err)
	}
	if l, _ := d.List(ctx, dlq.Selection{Partitions: []int32{0}}, 0); l.Selected != 2 {
		t.Fatalf("after un-purge to 1: %d selected, want 2", l.Selected)
	}
	// Purge everything.
	pr, err := d.Purge(ctx, dlq.PurgeOptions{})
	if err != nil || len(pr.Partitions) != 2 {
		t.Fatalf("purge all: %+v, %v", pr, err)
	}
	if l, _ := d.List(ctx, dlq.Selection{}, 0); l.Selected != 0 {
		t.Fatalf("after purge all: %d selected", l.Selected)
	}
	if _, err := d.Purge(ctx, dlq.PurgeOptions{Partitions: []int32{1}, Until: 5}); err == nil || !strings.Contains(err.Error(), "past its end") {
		t.Fatalf("purge past the end: %v", err)
	}
}

// TestConcurrentReplaysReplayOnce: two replays of the same records started
// at once (two operators) write each record once: the transactional id
// fences one of them, and each reads the marks only after fencing.
func TestConcurrentReplaysReplayOnce(t *testing.T) {
	ctx := context.Background()
	addrs, adm := testCluster(t, map[string]int32{"events": 1, "c.dlq": 1})
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, dlqRec("c", 0, "k", "v"+itoa(i), "invalid", "events", i))
	}
	produce(t, addrs, recs...)
	var wg sync.WaitGroup
	results := make([]*dlq.ReplayResult, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := dlq.New("c", kgo.SeedBrokers(addrs...))
			if err != nil {
				t.Error(err)
				return
			}
			defer d.Close()
			results[i], _ = d.Replay(ctx, dlq.ReplayOptions{})
		}()
	}
	wg.Wait()
	d, _ := dlq.New("c", kgo.SeedBrokers(addrs...))
	defer d.Close()
	l, err := d.List(ctx, dlq.Selection{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Replayed != 20 {
		t.Errorf("%d of 20 records marked replayed", l.Replayed)
	}
	// The committed records are exactly the marked ones, none twice.
	seen := map[string]int{}
	values := readCommitted(t, addrs, adm, "events")
	for _, v := range values {
		seen[v]++
		if seen[v] > 1 {
			t.Errorf("record %s written twice", v)
		}
	}
	if len(values) != l.Replayed {
		t.Errorf("%d records committed to the source topic, %d marked replayed", len(values), l.Replayed)
	}
	t.Logf("replayed by the two: %d and %d; marked %d", lenReplayed(results[0]), lenReplayed(results[1]), l.Replayed)
}

func lenReplayed(r *dlq.ReplayResult) int {
	if r == nil {
		return -1
	}
	return len(r.Replayed)
}

// Show on an empty DLQ partition says it is empty, not "offsets 0 to -1".
func TestShowEmptyPartition(t *testing.T) {
	ctx := context.Background()
	addrs, _ := testCluster(t, map[string]int32{"q.dlq": 1})
	d, err := dlq.New("q", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.Show(ctx, 0, 0)
	if !errors.Is(err, dlq.ErrNoRecord) || !strings.Contains(err.Error(), "partition 0 holds no records now; its next offset is 0") {
		t.Fatalf("show on an empty partition: %v", err)
	}
}
