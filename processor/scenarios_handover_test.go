package processor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/faultproxy"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// Scenario tests for handovers and late commits: docs/scenarios.md S15, S17.

// keyVersions is the history of a key-ordered run: per key, the highest
// version completed on any member, and what went wrong.
type keyVersions struct {
	mu         sync.Mutex
	done       map[string]int      // key -> highest version completed, any member
	handled    map[string]int      // "member/key/version" -> handler calls that returned nil
	regressed  []string            // a handler started a version below one completed
	redone     map[string][]string // member -> "key/version" started again after it completed
	completedN int
}

func newKeyVersions() *keyVersions {
	return &keyVersions{done: map[string]int{}, handled: map[string]int{}, redone: map[string][]string{}}
}

// start is called when a handler begins key's version on member.
func (k *keyVersions) start(member, key string, version int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := k.done[key]; version < d {
		k.regressed = append(k.regressed, fmt.Sprintf("%s saw %s v%d after v%d completed", member, key, version, d))
	} else if version == d {
		k.redone[member] = append(k.redone[member], fmt.Sprintf("%s/v%d", key, version))
	}
}

// finish is called when a handler returned nil.
func (k *keyVersions) finish(member, key string, version int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.done[key] = max(k.done[key], version)
	k.handled[fmt.Sprintf("%s/%s/%d", member, key, version)]++
	k.completedN++
}

func (k *keyVersions) completed() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.completedN
}

func (k *keyVersions) allDone(keys, versions int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range keys {
		if k.done[fmt.Sprintf("k%02d", i)] != versions {
			return false
		}
	}
	return true
}

// TestS17_KeyOrderAcrossHandover: key order, 1 partition, 20 keys with
// versions 1..500 written in order. On member A the first record of key k00
// blocks (until its context is cancelled), holding the commit point at 0
// while every other key completes. B joins; A leaves and B takes the
// partition (A's drain gives up on k00 after DrainTimeout, so A's final
// commit is offset 0 with every other record completed above it); then a new
// A joins, B leaves and A takes the partition back. (With one partition the
// sticky assignor moves it only when its owner leaves; a revoke in a
// rebalance releases it through the same path.) No handler, on any member, ever sees a key's version lower
// than one already completed for that key; B handles none of the records A
// completed (they are skipped through the commit's completed-offsets map);
// in the end every version of every key is done and the group is committed
// to the end of the partition. Without the map (CommitMetadataMaxBytes(0)) B
// handles the 9,500 records again, starting from version 1 of every key:
// key order goes backwards.
//
// The guarantee is the handover's (a revoke or a shutdown, whose final
// commit carries the map), not a lost session's: a member whose session
// expires cannot commit what it completed since its last commit (the broker
// refuses it, S02), and the next owner handles those records again (docs/guarantees.md,
// "Limit: a partition lost"). So the members' sessions must not expire
// here: the session timeout is 30s (heartbeats every 50ms, so rebalances
// are still noticed at once) rather than rebalanceOpts' 450ms, which a
// starved process (load average 90 on 2 cores; the embedded broker's
// session timer and the client's heartbeat share it) outlasts, and the test
// fails if any partition is lost all the same, saying so, rather than
// reporting the at-least-once redelivery that follows as a regression.
func TestS17_KeyOrderAcrossHandover(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	const keys, versions = 20, 500
	var recs []*kgo.Record
	for v := 1; v <= versions; v++ {
		for k := range keys {
			recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(strconv.Itoa(v))})
		}
	}
	produce(t, addrs, recs...)
	kv := newKeyVersions()
	var slowOnce sync.Once
	slowStarted := make(chan struct{})
	handler := func(member string) Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			key := string(r.Key)
			version, _ := strconv.Atoi(string(r.Value))
			kv.start(member, key, version)
			if member == "A1" && key == "k00" && version == 1 {
				// The slow key: holds the commit point at 0 on A's
				// first ownership, until the revoke's drain gives up.
				slowOnce.Do(func() { close(slowStarted) })
				<-ctx.Done()
				return ctx.Err()
			}
			kv.finish(member, key, version)
			return nil
		}
	}
	losses := newLossWatch()
	opts := func(member string, reg *prometheus.Registry, extra ...Opt) []Opt {
		return rebalanceOpts(addrs, append([]Opt{WithOrdering(OrderKey), Concurrency(8), MaxInFlight(20000, 64<<20),
			DrainTimeout(200 * time.Millisecond), WithHandler(handler(member)), WithMetrics(mustMetrics(t, reg))},
			append(losses.opts(member), extra...)...)...)
	}
	defer losses.check(t) // also after a Fatal: a lost session explains what failed
	regB := prometheus.NewRegistry()
	a := startMember(t, opts("A1", prometheus.NewRegistry())...)
	<-slowStarted
	waitFor(t, 30*time.Second, "A completed every record but k00's", func() bool { return kv.completed() == keys*versions-versions })
	// B joins; with one partition the sticky assignor leaves it on A
	// until A leaves: A's revoke gives up on k00 after DrainTimeout and
	// commits offset 0 with every other record completed above it.
	b := startMember(t, opts("B", regB)...)
	waitFor(t, 10*time.Second, "B joined", func() bool { return b.p.Health().Joined })
	a.stop()
	waitFor(t, 30*time.Second, "B completed k00", func() bool {
		kv.mu.Lock()
		defer kv.mu.Unlock()
		return kv.done["k00"] == versions
	})
	if got := counterValue(t, regB, "ordercast_consumer_records_skipped_completed_total"); got != keys*versions-versions {
		t.Errorf("B skipped %v records completed by A, want %d", got, keys*versions-versions)
	}
	// A second A takes the partition back when B leaves.
	a2 := startMember(t, opts("A2", prometheus.NewRegistry())...)
	waitFor(t, 10*time.Second, "A2 joined", func() bool { return a2.p.Health().Joined })
	b.stop()
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	a2.stop()

	kv.mu.Lock()
	defer kv.mu.Unlock()
	if len(kv.regressed) > 0 {
		t.Fatalf("key order went backwards %d times, first: %v", len(kv.regressed), kv.regressed[:min(5, len(kv.regressed))])
	}
	if r := kv.redone["B"]; len(r) > 0 {
		t.Fatalf("B handled %d records A had completed, first: %v", len(r), r[:min(5, len(r))])
	}
	if !kvAllDone(kv, keys, versions) {
		t.Fatalf("not every version done: %v", kv.done)
	}
}

// lossWatch keeps a test's group sessions alive under a starved process
// and records every partition loss, for tests whose guarantee is a
// handover's (a revoke or a shutdown) and not a lost session's.
type lossWatch struct {
	mu     sync.Mutex
	events []string // every rebalance event, "member event partitions", for the report
	lost   []string
}

func newLossWatch() *lossWatch { return &lossWatch{} }

// opts are a member's options: a 30s session and rebalance timeout
// (heartbeats every 50ms: a rebalance is noticed at once, a starved
// process is not expelled) and a hook recording partition events.
func (w *lossWatch) opts(member string) []Opt {
	return []Opt{SessionTimeout(30 * time.Second), RebalanceTimeout(30 * time.Second),
		ClientOpts(kgo.HeartbeatInterval(50 * time.Millisecond)),
		withHooks(hooks{partitions: func(event string, parts map[string][]int32) {
			w.mu.Lock()
			defer w.mu.Unlock()
			e := fmt.Sprintf("%s %s %v", member, event, parts)
			w.events = append(w.events, e)
			if event == "release-start:lost" && len(parts) > 0 {
				w.lost = append(w.lost, e)
			}
		}})}
}

// check fails the test if any member lost a partition: the scenario's
// premise (no session expires) did not hold, and what follows a loss is an
// at-least-once redelivery, not a handover.
func (w *lossWatch) check(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lost) > 0 {
		t.Errorf("a session expired (%v): the partition was lost, not handed over, and the records completed since the last commit are handled again (at-least-once); rebalance events: %v", w.lost, w.events)
	}
}

func kvAllDone(k *keyVersions, keys, versions int) bool {
	for i := range keys {
		if k.done[fmt.Sprintf("k%02d", i)] != versions {
			return false
		}
	}
	return true
}

// TestOffsetMapWindowBounded: with a tiny CommitMetadataMaxBytes, a stuck key
// makes the partition stop admitting records before the completed-offsets
// map could outgrow the budget (the window-full gauge says so), every commit's
// metadata stays within the budget, and once the stuck key is released the
// partition drains to its end.
func TestOffsetMapWindowBounded(t *testing.T) {
	const budget = 96
	addrs := testCluster(t, map[string]int32{"in": 1})
	const n = 3000
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("k%02d", i%2)), Value: []byte(strconv.Itoa(i))})
	}
	produce(t, addrs, recs...)
	release := make(chan struct{})
	reg := prometheus.NewRegistry()
	h := newHistory()
	var metas []string
	m := startMember(t, rebalanceOpts(addrs, WithOrdering(OrderKey), Concurrency(4), MaxInFlight(n, 64<<20),
		CommitMetadataMaxBytes(budget), WithMetrics(mustMetrics(t, reg)),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if string(r.Value) == "0" { // k00's first: every k00 record waits behind it
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			h.add(string(r.Value))
			return nil
		}))...)
	waitFor(t, 20*time.Second, "the window is full", func() bool {
		return counterValue(t, reg, "ordercast_consumer_offset_map_window_full") == 1
	})
	waitFor(t, 5*time.Second, "the window-used ratio near 1", func() bool {
		v := counterValue(t, reg, "ordercast_consumer_offset_map_window_used_ratio")
		return v > 0.9 && v <= 1
	})
	// Admission stopped: far fewer than the 1,500 k01 records were handled,
	// and the map in the broker is within the budget.
	waitFor(t, 10*time.Second, "a commit with a map", func() bool {
		md := committedMeta(t, addrs, "g", "in", 0)
		if md != "" {
			metas = append(metas, md)
		}
		return md != ""
	})
	if got := h.distinct(); got >= n/2 {
		t.Fatalf("handled %d records with the first one stuck; admission did not stop", got)
	}
	for _, md := range metas {
		if len(md) > budget {
			t.Fatalf("metadata of %d bytes over the budget of %d: %q", len(md), budget, md)
		}
		if !strings.HasPrefix(md, offsetMapPrefix) {
			t.Fatalf("metadata %q is not an offset map", md)
		}
	}
	close(release)
	waitFor(t, 30*time.Second, "everything handled and committed", func() bool {
		return h.distinct() == n && committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	if got := counterValue(t, reg, "ordercast_consumer_offset_map_window_full"); got != 0 {
		t.Fatalf("window still full after the drain: %v", got)
	}
	m.stop()
}

// committedMeta returns the metadata of the group's commit for one partition.
func committedMeta(t *testing.T, addrs []string, group, topic string, partition int32) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(context.Background(), group, topic)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := resps.Lookup(topic, partition)
	return r.Metadata
}

// TestS15_StaleCommitAppliedLate: 2 partitions, steady input, commits every
// 50ms. The broker takes one OffsetCommit and does not answer it (a kfake
// control swallows it), so the client gives up after its request timeout
// (1s here) and re-sends it on a new connection, where it is applied; later
// commits succeed; input stops, every record is handled and committed; only
// then does the held request reach the broker: the test sends the very
// request (same member, generation and offsets) itself, and the broker
// applies it, moving the group's offsets back to where they were when it
// was first sent. The runtime repairs that without new input: within
// CommitRefreshInterval the group's offsets are back at the end of both
// partitions. Without the refresh (CommitRefreshInterval(time.Hour)) they
// stay behind. (An earlier version slept the request inside the control;
// kfake then sometimes stalled the test's own offset reads.)
func TestS15_StaleCommitAppliedLate(t *testing.T) {
	parallel(t)
	c, addrs := testClusterC(t, map[string]int32{"in": 2})
	var (
		mu      sync.Mutex
		commits int
		held    *kmsg.OffsetCommitRequest
	)
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != "g" {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		commits++
		if held == nil && commits == 5 {
			cp := *r
			held = &cp
			return nil, nil, true // taken, never answered: the client times out
		}
		return nil, nil, false // the cluster applies it now
	})
	const perPart = 300
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(50*time.Millisecond),
		ClientOpts(kgo.RequestTimeoutOverhead(time.Second), kgo.RetryTimeout(30*time.Second)),
		WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	for i := range perPart {
		produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: val(i)}, &kgo.Record{Topic: "in", Partition: 1, Value: val(i)})
		time.Sleep(2 * time.Millisecond) // steady input, not a burst
	}
	end := endOffsets(t, addrs, "in")
	// The group's offsets are read with short timeouts and a failed read
	// is "not yet": the embedded broker sometimes leaves a read of the
	// group's offsets unanswered for seconds right after the swallowed
	// OffsetCommit (1 run in 4 under -race, on the old code too), and
	// committedEquals would fail the test on the first read that stalls.
	waitFor(t, 60*time.Second, "every record committed while one commit is held", func() bool {
		mu.Lock()
		h := held
		mu.Unlock()
		return h != nil && committedNow(addrs, "g", end)
	})
	mu.Lock()
	stale := held
	mu.Unlock()
	behind := false
	for _, rt := range stale.Topics {
		for _, rp := range rt.Partitions {
			behind = behind || rp.Offset < perPart
		}
	}
	if !behind {
		t.Fatalf("the held commit was not behind the end (%d): nothing to repair", perPart)
	}
	// The held request lands now.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := stale.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("the late commit was refused (%v): it must be applied for the scenario", err)
			}
		}
	}
	if committedEquals(t, addrs, "g", end) {
		t.Fatal("the late commit did not move the group's offsets back")
	}
	waitFor(t, 20*time.Second, "the stale commit repaired without new input", func() bool {
		return committedEquals(t, addrs, "g", end)
	})
	if lag := endOffsets(t, addrs, "in"); lag[tp{"in", 0}] != end[tp{"in", 0}] || lag[tp{"in", 1}] != end[tp{"in", 1}] {
		t.Fatalf("new input arrived: %v, was %v", lag, end)
	}
	m.stop()
}

// TestS15_StaleCommitAppliedLateThroughProxy is S15 on either broker (Apache
// Kafka when ORDERCAST_TEST_BROKERS is set) with the network doing it: the
// member's connections go through the fault proxy, which holds the next
// OffsetCommit for 8s and then delivers it, after the client gave up on it
// (request timeout 1s), re-sent it on a new connection and committed every
// record of the burst since. The broker applies the stale request last; the
// runtime's periodic re-commit brings the group back to the end without new
// input. Whether the moment between the stale commit landing and its repair
// is seen by the test's reads depends on timing, so it is logged, not
// required; TestS15_StaleCommitAppliedLate pins it down on the embedded
// broker.
func TestS15_StaleCommitAppliedLateThroughProxy(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 2})
	proxy, dial := testkafka.Proxy(t)
	const perPart = 300
	m := startMember(t, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(50*time.Millisecond),
		ClientOpts(dial, kgo.RequestTimeoutOverhead(time.Second), kgo.RetryTimeout(30*time.Second)),
		WithHandler(func(ctx context.Context, _ *kgo.Record) error { return sleepOrCancel(ctx, time.Millisecond) }))
	burst := func(from int) {
		var recs []*kgo.Record
		for i := from; i < from+perPart; i++ {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Value: val(i)}, &kgo.Record{Topic: "in", Partition: 1, Value: val(i)})
		}
		produce(t, addrs, recs...)
	}
	burst(0)
	waitFor(t, 30*time.Second, "the first burst committed", func() bool {
		return committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	hold := proxy.HoldRequest(faultproxy.Keys(int16(kmsg.OffsetCommit)), 8*time.Second)
	burst(perPart)
	end := endOffsets(t, addrs, "in")
	select {
	case <-hold.Matched():
	case <-time.After(10 * time.Second):
		t.Fatal("no OffsetCommit went through the proxy")
	}
	waitFor(t, 30*time.Second, "every record committed while the first commit is held", func() bool {
		return committedEquals(t, addrs, "g", end)
	})
	select {
	case <-hold.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the held OffsetCommit was never delivered")
	}
	if !hold.ClientLeft() {
		t.Fatal("the client did not give up on the held OffsetCommit: it was not applied late")
	}
	seenBehind := false
	waitFor(t, 20*time.Second, "the stale commit repaired without new input", func() bool {
		if !committedEquals(t, addrs, "g", end) {
			seenBehind = true
			return false
		}
		return true
	})
	t.Logf("stale commit seen standing before its repair: %v", seenBehind)
	if now := endOffsets(t, addrs, "in"); now[tp{"in", 0}] != end[tp{"in", 0}] || now[tp{"in", 1}] != end[tp{"in", 1}] {
		t.Fatalf("new input arrived: %v, was %v", now, end)
	}
	m.stop()
}

// committedNow reports whether the group's committed offsets equal want,
// reading them once with a 2 s timeout on a new client; any failure to read
// is false (see TestS15_StaleCommitAppliedLate).
func committedNow(addrs []string, group string, want map[tp]int64) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil || offs.Error() != nil {
		return false
	}
	for k, w := range want {
		o, ok := offs.Lookup(k.topic, k.partition)
		if !ok || o.At != w {
			return false
		}
	}
	return true
}
