package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// startQueue creates and runs a queue member of group "g" on addrs; stop
// cancels it and waits for Run (also at cleanup).
func startQueue(t *testing.T, addrs []string, opts ...Opt) (*QueueProcessor, func()) {
	t.Helper()
	base := []Opt{Brokers(addrs...), Group("g"), Topics("in"), Backoff(10*time.Millisecond, 20*time.Millisecond), DrainTimeout(200 * time.Millisecond)}
	q, err := NewQueue(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return q, testkafka.Run(t, q)
}

// shareFake is a kfake cluster with "in" (partitions) and g.dlq, and the
// share-group broker configs given (lock duration, sweep interval...).
func shareFake(t *testing.T, partitions int32, bcfg map[string]string) []string {
	t.Helper()
	testkafka.SkipIfReal(t, "sets kfake's share-group broker configs")
	_, addrs := testkafka.Fake(t, withGroupDLQ(map[string]int32{"in": partitions}), kfake.BrokerConfigs(bcfg))
	return addrs
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// TestQueueRefusesOptions: the options that cannot apply to a share group
// are refused by NewQueue, each named; MaxDeliveries is refused by New.
func TestQueueRefusesOptions(t *testing.T) {
	h := func(context.Context, *kgo.Record) error { return nil }
	_, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h),
		WithOrdering(OrderPartition), RetryTopics(time.Second), MaxAttempts(3), CommitInterval(time.Second),
		StartOffset(Latest), MaxInFlight(10, 1<<20), WithBatchHandler(func(context.Context, []*kgo.Record) error { return nil }))
	if err == nil {
		t.Fatal("NewQueue took options that cannot apply to a share group")
	}
	for _, name := range []string{"WithOrdering (option 5)", "RetryTopics (option 6)", "MaxAttempts (option 7)", "CommitInterval (option 8)",
		"StartOffset (option 9)", "MaxInFlight (option 10)", "WithBatchHandler or MaxBatch (option 11)"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	// Refused options and invalid values are reported together.
	_, err = NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), Logger(nil), ShareSessions(0), DeadLetterTopic(""), RetryTopics(time.Second))
	for _, name := range []string{"Logger: nil", "ShareSessions", "DeadLetterTopic: empty", "RetryTopics (option 8)"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	if _, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), Concurrency(4), MaxDeliveries(3),
		HandlerTimeout(time.Second), DeadLetterTopic("g.dead"), HeaderPrefix("x-")); err != nil {
		t.Fatalf("NewQueue refused options of the queue mode: %v", err)
	}
	if _, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), MaxDeliveries(-1)); err == nil {
		t.Fatal("NewQueue took MaxDeliveries(-1)")
	}
	if _, err := New(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), MaxDeliveries(3)); err == nil || !strings.Contains(err.Error(), "MaxDeliveries") {
		t.Fatalf("New took MaxDeliveries: %v", err)
	}
	if _, err := New(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareSessions(2)); err == nil || !strings.Contains(err.Error(), "ShareSessions") {
		t.Fatalf("New took ShareSessions: %v", err)
	}
	for _, n := range []int{0, -1} {
		if _, err := NewQueue(Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ShareSessions(n)); err == nil || !strings.Contains(err.Error(), "ShareSessions") {
			t.Fatalf("NewQueue took ShareSessions(%d): %v", n, err)
		}
	}
	for _, c := range []struct {
		opts []Opt
		want int
	}{{nil, DefaultShareSessions}, {[]Opt{ShareSessions(1)}, 1}, {[]Opt{ShareSessions(3)}, 3}} {
		q, err := NewQueue(append([]Opt{Brokers("x:1"), Group("g"), Topics("in"), WithHandler(h), ClientID("c")}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.Health().Sessions; got != c.want || len(q.Clients()) != c.want {
			t.Errorf("%d sessions, %d clients; want %d", got, len(q.Clients()), c.want)
		}
		for i, cl := range q.Clients() {
			id, _ := cl.OptValue(kgo.ClientID).(string)
			want := "c"
			if c.want > 1 {
				want = fmt.Sprintf("c-s%d", i)
			}
			if id != want {
				t.Errorf("session %d of %d: client ID %q, want %q", i, c.want, id, want)
			}
		}
		for _, cl := range q.Clients() {
			cl.Close()
		}
	}
}

// TestQueueManyMembers: 12 members of one share group on a topic of 6
// partitions all receive work (a share group hands one partition's records
// to several members), and every record is handled; the members are 12
// processors of one share session each, or 6 of two (ShareSessions), where
// every session must have acquired records.
func TestQueueManyMembers(t *testing.T) {
	for _, c := range []struct{ processors, sessions int }{{12, 1}, {6, 2}} {
		t.Run(fmt.Sprintf("%dx%d", c.processors, c.sessions), func(t *testing.T) {
			testkafka.Parallel(t)
			testQueueManyMembers(t, c.processors, c.sessions)
		})
	}
}

func testQueueManyMembers(t *testing.T, processors, sessions int) {
	addrs := testCluster(t, map[string]int32{"in": 6})
	var mu sync.Mutex
	byMember := map[int]int{}
	seen := newHistory()
	var qs []*QueueProcessor
	for m := range processors {
		q, _ := startQueue(t, addrs, Concurrency(2), ShareSessions(sessions), WithHandler(func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			byMember[m]++
			mu.Unlock()
			seen.add(string(r.Value))
			select { // some work, so that records queue up and spread
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}))
		qs = append(qs, q)
	}
	allSessions := func() bool {
		for _, q := range qs {
			for _, s := range q.sessions {
				if s.acquired.Load() == 0 {
					return false
				}
			}
		}
		return true
	}
	n := 0
	waitFor(t, 60*time.Second, "every member (every share session) handling records", func() bool {
		var recs []*kgo.Record
		for range 60 {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(n % 6), Value: val(n)})
			n++
		}
		produce(t, addrs, recs...)
		mu.Lock()
		defer mu.Unlock()
		return len(byMember) == processors && allSessions()
	})
	waitFor(t, 60*time.Second, "every record handled", func() bool { return seen.distinct() == n })
}

// TestQueueTransientRedelivered: a record failing transiently is released
// and delivered again (delivery counts 1, 2, 3), then handled; the DLQ
// stays empty.
func TestQueueTransientRedelivered(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2})
	var mu sync.Mutex
	var deliveries []int32
	done := make(chan struct{})
	reg := prometheus.NewRegistry()
	m := mustMetrics(t, reg)
	startQueue(t, addrs, WithMetrics(m), MaxDeliveries(5), WithHandler(func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		deliveries = append(deliveries, r.DeliveryCount())
		if len(deliveries) < 3 {
			return errors.New("not yet")
		}
		close(done)
		return nil
	}))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("flaky")})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the record was not handled after two transient failures")
	}
	mu.Lock()
	got := fmt.Sprint(deliveries)
	mu.Unlock()
	if got != "[1 2 3]" {
		t.Fatalf("delivery counts %s, want [1 2 3]", got)
	}
	waitFor(t, 10*time.Second, "released twice, accepted once", func() bool {
		return promtest.Sum(t, reg, "ordercast_consumer_share_records_released_total", "group", "g", "topic", "in") == 2 &&
			promtest.Sum(t, reg, "ordercast_consumer_share_records_accepted_total", "group", "g", "topic", "in") == 1
	})
	if n := promtest.Sum(t, reg, "ordercast_consumer_records_dead_lettered_total", "group", "g"); n != 0 {
		t.Fatalf("%v records dead-lettered, want 0", n)
	}
}

// TestQueuePoisonToDLQ: a record failing on every delivery reaches the DLQ
// once, on delivery MaxDeliveries, with the runtime's headers, and is not
// delivered again; a permanent failure goes there on its first delivery.
// The share series count it: 5 acquisitions (poison 3, bad 1, a later
// record 1), 2 releases, 3 accepts (both DLQ writes and the later record),
// no reject, and share_delivery_count observes deliveries 1, 2, 3 of
// poison and 1 of the others.
func TestQueuePoisonToDLQ(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2})
	calls := newHistory()
	var dlqCalls sync.Map
	reg := prometheus.NewRegistry()
	startQueue(t, addrs, WithMetrics(mustMetrics(t, reg)), MaxDeliveries(3),
		OnDeadLetter(func(r *kgo.Record, _ error) { dlqCalls.Store(string(r.Value), true) }),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			calls.add(string(r.Value))
			switch string(r.Value) {
			case "poison":
				return fmt.Errorf("delivery %d failed", r.DeliveryCount())
			case "bad":
				return Permanentf("undecodable")
			}
			return nil
		}))
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("poison")}, &kgo.Record{Topic: "in", Partition: 1, Value: []byte("bad")})
	dlq := readAll(t, addrs, "g.dlq", 2, 30*time.Second)
	byValue := map[string]*kgo.Record{}
	for _, r := range dlq {
		byValue[string(r.Value)] = r
	}
	for v, want := range map[string]struct{ attempts, class string }{"poison": {"3", ClassTransient}, "bad": {"1", ClassPermanent}} {
		r := byValue[v]
		if r == nil {
			t.Fatalf("%q not in the DLQ (%d records)", v, len(dlq))
		}
		if got := header(r, HeaderAttempts); got != want.attempts {
			t.Errorf("%q: %s %q, want %q", v, HeaderAttempts, got, want.attempts)
		}
		if got := header(r, HeaderErrorClass); got != want.class {
			t.Errorf("%q: %s %q, want %q", v, HeaderErrorClass, got, want.class)
		}
		if header(r, HeaderOriginalTopic) != "in" || header(r, HeaderConsumerGroup) != "g" || header(r, HeaderOriginalOffset) != "0" {
			t.Errorf("%q: origin headers %v", v, r.Headers)
		}
		if _, ok := dlqCalls.Load(v); !ok {
			t.Errorf("%q: OnDeadLetter not called", v)
		}
	}
	// A record written after them is handled: the member polled past the
	// dead-lettered records, which are not delivered again.
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("after")})
	waitFor(t, 30*time.Second, "the next record handled", func() bool { return calls.count("after") == 1 })
	if calls.count("poison") != 3 || calls.count("bad") != 1 {
		t.Fatalf("poison handled %d times (want 3), bad %d (want 1)", calls.count("poison"), calls.count("bad"))
	}
	if more := readAll(t, addrs, "g.dlq", 3, 2*time.Second); len(more) != 2 {
		t.Fatalf("%d DLQ records, want 2", len(more))
	}
	checkShareSeries(t, reg, shareCounts{acquired: 5, accepted: 3, released: 2, rejected: 0},
		map[float64]uint64{1: 3, 2: 4, 3: 5, 4: 5}, 1+2+3+1+1)
}

// shareCounts are the values of the share_records_*_total counters of
// group g, topic in.
type shareCounts struct{ acquired, accepted, released, rejected float64 }

// checkShareSeries waits until the share counters of group g, topic in
// reach want (the last acknowledgement is counted just after its handler
// returns), then checks them and the share_delivery_count histogram: its
// cumulative buckets (by upper bound, those given) and the sum of the
// delivery counts observed; one observation per acquisition.
func checkShareSeries(t *testing.T, reg *prometheus.Registry, want shareCounts, buckets map[float64]uint64, sum float64) {
	t.Helper()
	get := func() shareCounts {
		c := func(name string) float64 {
			return promtest.Sum(t, reg, "ordercast_consumer_share_records_"+name+"_total", "group", "g", "topic", "in")
		}
		return shareCounts{c("acquired"), c("accepted"), c("released"), c("rejected")}
	}
	testkafka.WaitFor(t, 10*time.Second, fmt.Sprintf("share counters at %+v", want), func() bool { return get() == want })
	count, gotSum, gotBuckets := promtest.Histogram(t, reg, "ordercast_consumer_share_delivery_count", "group", "g", "topic", "in")
	if float64(count) != want.acquired || gotSum != sum {
		t.Errorf("share_delivery_count: %d observations summing to %v, want %v summing to %v", count, gotSum, want.acquired, sum)
	}
	for le, n := range buckets {
		if gotBuckets[le] != n {
			t.Errorf("share_delivery_count{le=%v} = %d, want %d (buckets %v)", le, gotBuckets[le], n, gotBuckets)
		}
	}
}

// TestQueueRejectCounted: with the runtime's DLQ off (DeadLetter(false)),
// a record failing on its last allowed delivery (MaxDeliveries 2) is
// REJECTed once: share_records_rejected_total 1, after one release on its
// first delivery; the broker archives it, so it is not delivered again (a
// record written after it is handled, and poison's handler ran twice). The
// delivery-count histogram observes poison's deliveries 1 and 2 and the
// later record's 1.
func TestQueueRejectCounted(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	calls := newHistory()
	reg := prometheus.NewRegistry()
	startQueue(t, addrs, WithMetrics(mustMetrics(t, reg)), MaxDeliveries(2), DeadLetter(false),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			calls.add(string(r.Value))
			if string(r.Value) == "poison" {
				return fmt.Errorf("delivery %d failed", r.DeliveryCount())
			}
			return nil
		}))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("poison")})
	waitFor(t, 30*time.Second, "poison rejected", func() bool {
		return promtest.Sum(t, reg, "ordercast_consumer_share_records_rejected_total", "group", "g", "topic", "in") == 1
	})
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("after")})
	waitFor(t, 30*time.Second, "the next record handled", func() bool { return calls.count("after") == 1 })
	checkShareSeries(t, reg, shareCounts{acquired: 3, accepted: 1, released: 1, rejected: 1},
		map[float64]uint64{1: 2, 2: 3, 3: 3}, 1+2+1)
	if n := calls.count("poison"); n != 2 {
		t.Fatalf("poison handled %d times, want 2 (rejected on its second delivery, then archived)", n)
	}
	if n := promtest.Sum(t, reg, "ordercast_consumer_records_dead_lettered_total", "group", "g"); n != 0 {
		t.Fatalf("%v records dead-lettered with DeadLetter(false), want 0", n)
	}
}

// TestQueueSlowHandlerRenews: a handler running three times the lock
// duration keeps its record: the member renews the lock, the record is
// delivered once (to neither member again) and accepted.
func TestQueueSlowHandlerRenews(t *testing.T) {
	testkafka.Parallel(t)
	addrs := shareFake(t, 1, map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "100",
	})
	calls := newHistory()
	reg := prometheus.NewRegistry()
	m := mustMetrics(t, reg)
	h := func(ctx context.Context, r *kgo.Record) error {
		calls.add(string(r.Value))
		if string(r.Value) != "slow" {
			return nil
		}
		select {
		case <-time.After(3 * time.Second): // the work: three lock durations
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	startQueue(t, addrs, WithMetrics(m), HandlerTimeout(10*time.Second), WithHandler(h))
	startQueue(t, addrs, WithMetrics(m), HandlerTimeout(10*time.Second), WithHandler(h))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("slow")})
	waitFor(t, 30*time.Second, "the slow record accepted", func() bool {
		return promtest.Sum(t, reg, "ordercast_consumer_share_records_accepted_total", "group", "g", "topic", "in") == 1
	})
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("after")})
	waitFor(t, 30*time.Second, "the next record handled", func() bool { return calls.count("after") == 1 })
	if n := calls.count("slow"); n != 1 {
		t.Fatalf("the slow record was delivered %d times, want 1 (its lock expired)", n)
	}
	if n := promtest.Sum(t, reg, "ordercast_consumer_share_lock_renewals_total", "group", "g"); n < 2 {
		t.Fatalf("%v lock renewals, want at least 2 over three lock durations", n)
	}
	if n := promtest.Sum(t, reg, "ordercast_consumer_share_records_released_total", "group", "g", "topic", "in"); n != 0 {
		t.Fatalf("%v records released, want 0", n)
	}
}

// TestQueueShutdownReleases: a member stopped with records in its handlers
// releases them (its handlers cancelled after DrainTimeout), and another
// member gets them at once, on their second delivery, long before their
// locks would have expired (30 s).
func TestQueueShutdownReleases(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	held := make(chan string, 10)
	_, stopA := startQueue(t, addrs, Concurrency(4), WithHandler(func(ctx context.Context, r *kgo.Record) error {
		held <- string(r.Value)
		<-ctx.Done() // never finishes: the shutdown cancels it
		return ctx.Err()
	}))
	var recs []*kgo.Record
	for i := range 4 {
		recs = append(recs, &kgo.Record{Topic: "in", Value: val(i)})
	}
	produce(t, addrs, recs...)
	gotA := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for len(gotA) < 4 {
		select {
		case v := <-held:
			gotA[v] = true
		case <-deadline:
			t.Fatalf("member A holds %d records, want 4", len(gotA))
		}
	}
	var mu sync.Mutex
	gotB := map[string]int32{}
	start := time.Now()
	stopA()
	startQueue(t, addrs, WithHandler(func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		gotB[string(r.Value)] = r.DeliveryCount()
		mu.Unlock()
		return nil
	}))
	waitFor(t, 20*time.Second, "member B handling the records A released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(gotB) == 4
	})
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the records came back after %v: released by their lock timeout, not by the shutdown", d)
	}
	for v, dc := range gotB {
		if dc != 2 {
			t.Errorf("%s: delivery count %d at member B, want 2", v, dc)
		}
	}
}

// TestQueueGroupDeliveryLimit (real Kafka 4.4; kfake has no group-level
// share configs): the group's share.delivery.count.limit (KIP-1240) bounds
// MaxDeliveries: with the group's limit at 2 and MaxDeliveries(10), a
// record failing on every delivery reaches the DLQ on its second delivery.
func TestQueueGroupDeliveryLimit(t *testing.T) {
	if !testkafka.Real() {
		t.Skipf("needs a real Kafka 4.4 (%s): kfake has no group-level share.delivery.count.limit", testkafka.EnvBrokers)
	}
	addrs := testCluster(t, map[string]int32{"in": 1})
	setGroupConfig(t, addrs, "g", "share.delivery.count.limit", "2")
	calls := newHistory()
	q, _ := startQueue(t, addrs, MaxDeliveries(10), WithHandler(func(ctx context.Context, r *kgo.Record) error {
		calls.add(string(r.Value))
		return errors.New("always")
	}))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("poison")})
	dlq := readAll(t, addrs, "g.dlq", 1, 60*time.Second)
	if got := header(dlq[0], HeaderAttempts); got != "2" {
		t.Fatalf("%s %q, want 2 (the group's limit)", HeaderAttempts, got)
	}
	if q.DeliveryLimit() != 2 || calls.count("poison") != 2 {
		t.Fatalf("delivery limit %d, handled %d times; want 2 and 2", q.DeliveryLimit(), calls.count("poison"))
	}
}

// setGroupConfig sets a config of group (IncrementalAlterConfigs, GROUP
// resource: KIP-848, KIP-932), and deletes it when the test ends: a
// group's configs outlive the group, and later tests use the same name.
func setGroupConfig(t *testing.T, addrs []string, group, name, value string) {
	t.Helper()
	if err := alterGroupConfig(addrs, group, name, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(value)); err != nil {
		t.Fatalf("setting %s=%s on group %s: %v", name, value, group, err)
	}
	t.Cleanup(func() {
		if err := alterGroupConfig(addrs, group, name, kmsg.IncrementalAlterConfigOpDelete, nil); err != nil {
			t.Errorf("deleting %s of group %s: %v", name, group, err)
		}
	})
}

func alterGroupConfig(addrs []string, group, name string, op kmsg.IncrementalAlterConfigOp, value *string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = name, op, value
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = errCode(resp.Resources[0].ErrorCode)
	}
	return err
}

// TestQueueRenewsRealLock (real Kafka 4.4): the renewal of
// TestQueueSlowHandlerRenews against the broker's KIP-1222 renew
// acknowledgement, with the group's lock at the broker's smallest allowed
// (group.share.min.record.lock.duration.ms, 15 s) and a handler running
// 20 s: the record is delivered once.
func TestQueueRenewsRealLock(t *testing.T) {
	if !testkafka.Real() {
		t.Skipf("needs a real Kafka 4.4 (%s); TestQueueSlowHandlerRenews covers kfake", testkafka.EnvBrokers)
	}
	addrs := testCluster(t, map[string]int32{"in": 1})
	setGroupConfig(t, addrs, "g", "share.record.lock.duration.ms", "15000")
	calls := newHistory()
	h := func(ctx context.Context, r *kgo.Record) error {
		calls.add(string(r.Value))
		if string(r.Value) != "slow" {
			return nil
		}
		select {
		case <-time.After(20 * time.Second): // the work: longer than the lock
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	reg := prometheus.NewRegistry()
	m := mustMetrics(t, reg)
	startQueue(t, addrs, WithMetrics(m), HandlerTimeout(time.Minute), WithHandler(h))
	startQueue(t, addrs, WithMetrics(m), HandlerTimeout(time.Minute), WithHandler(h))
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("slow")})
	waitFor(t, 60*time.Second, "the slow record accepted", func() bool {
		return promtest.Sum(t, reg, "ordercast_consumer_share_records_accepted_total", "group", "g", "topic", "in") == 1
	})
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("after")})
	waitFor(t, 30*time.Second, "the next record handled", func() bool { return calls.count("after") == 1 })
	if n := calls.count("slow"); n != 1 {
		t.Fatalf("the slow record was delivered %d times, want 1 (its lock expired)", n)
	}
}
