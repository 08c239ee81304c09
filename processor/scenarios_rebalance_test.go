package processor

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
)

// Scenario tests for rebalances: docs/scenarios.md S01, S02, S03, S14.

// observeCommits records every OffsetCommit request the broker receives
// (kind "broker-commit", with the member id and generation it carries).
func observeCommits(t *testing.T, c *kfake.Cluster, addrs []string, h *recorder) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := map[[16]byte]string{} // OffsetCommit v10+ names topics by id
	for _, d := range details {
		names[d.ID] = d.Topic
	}
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		for _, t := range r.Topics {
			topic := t.Topic
			if topic == "" {
				topic = names[t.TopicID]
			}
			for _, p := range t.Partitions {
				h.add(event{Member: "broker", Kind: "broker-commit", MemberID: r.MemberID, Gen: r.Generation, Topic: topic, Partition: p.Partition, Offset: p.Offset})
			}
		}
		return nil, nil, false
	})
}

// rebalanceOpts are the options every member of these tests shares: short
// timeouts so that rebalances take milliseconds on the embedded broker.
func rebalanceOpts(addrs []string, extra ...Opt) []Opt {
	return append([]Opt{Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10 * time.Millisecond),
		SessionTimeout(450 * time.Millisecond), RebalanceTimeout(5 * time.Second), Backoff(time.Millisecond, 2*time.Millisecond)}, extra...)
}

func produceN(t *testing.T, addrs []string, partitions int32, perPartition int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range int(partitions) * perPartition {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i) % partitions, Key: []byte(strconv.Itoa(i)), Value: val(i)})
	}
	produce(t, addrs, recs...)
}

// sleepOrCancel waits d unless ctx ends first.
func sleepOrCancel(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// S01: 4 partitions; member A handles slowly and commits every 10ms; member B
// joins halfway. The history shows that A never starts a record of a
// partition after its revoke began, that every commit (as sent by the
// runtime, and as seen by the broker) is for a partition its member owns,
// that nothing is lost, no commit passes an unfinished record, and - since
// the drain lets in-flight records finish - nothing is handled twice.
//
// The second part makes the commit race explicit: A's periodic commit is
// computed, then held while A's session is lost (heartbeats answered
// UNKNOWN_MEMBER_ID), A rejoins, B joins, takes over the partition and commits
// further. When the held commit is let go it must not be sent: with the
// generation of A's new session the broker would accept it and move the
// offset backwards.
func TestS01_CommitAfterRevoke(t *testing.T) {
	parallel(t)
	t.Run("revoke", func(t *testing.T) {
		c, addrs := testClusterC(t, map[string]int32{"in": 4})
		const perPart = 40
		produceN(t, addrs, 4, perPart)
		h := newRecorder()
		observeCommits(t, c, addrs, h)
		handler := func(ctx context.Context, r *kgo.Record) error { return sleepOrCancel(ctx, 20*time.Millisecond) }
		a := startMember(t, rebalanceOpts(addrs, WithHandler(handler), DrainTimeout(2*time.Second), h.hooks("A"))...)
		waitFor(t, 20*time.Second, "A halfway", func() bool {
			return h.count(func(e event) bool { return e.Kind == evCompleted }) >= perPart
		})
		b := startMember(t, rebalanceOpts(addrs, WithHandler(handler), DrainTimeout(2*time.Second), h.hooks("B"))...)
		waitFor(t, 20*time.Second, "everything committed", func() bool {
			return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: perPart, {"in", 1}: perPart, {"in", 2}: perPart, {"in", 3}: perPart})
		})
		b.stop()
		a.stop()
		ev := h.snapshot()
		if n := countKind(ev, "A", evReleaseStart, "revoked"); n == 0 {
			t.Fatal("A never had a partition revoked: the scenario did not happen")
		}
		if n := countKind(ev, "B", evCompleted, ""); n == 0 {
			t.Fatal("B handled nothing")
		}
		rep := checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
		if len(rep.duplicates) > 0 {
			t.Fatalf("records handled twice although every revoke drained in time: %v", rep.duplicates)
		}
		checkBrokerCommits(t, ev)
	})

	t.Run("lost-session-stale-commit", func(t *testing.T) {
		c, addrs := testClusterC(t, map[string]int32{"in": 4})
		const perPart = 40
		produceN(t, addrs, 4, perPart)
		h := newRecorder()
		observeCommits(t, c, addrs, h)
		handler := func(ctx context.Context, r *kgo.Record) error { return sleepOrCancel(ctx, 10*time.Millisecond) }
		var (
			mu      sync.Mutex
			armed   bool
			held    map[int32]int64
			holding = make(chan struct{})
			release = make(chan struct{})
			cycles  atomic.Int32
		)
		ma, err := New(rebalanceOpts(addrs, WithHandler(handler), h.hooks("A"))...)
		if err != nil {
			t.Fatal(err)
		}
		ma.cfg.hooks.beforeCommit = func(offs map[string]map[int32]kgo.EpochOffset) {
			cycles.Add(1)
			mu.Lock()
			hold := armed && held == nil && len(offs["in"]) == 4
			if hold {
				held = map[int32]int64{}
				for p, o := range offs["in"] {
					held[p] = o.Offset
				}
			}
			mu.Unlock()
			if hold {
				close(holding)
				<-release
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ma.Run(ctx) }()
		defer func() {
			cancel()
			<-done
		}()
		waitFor(t, 20*time.Second, "A handled records of every partition", func() bool {
			return len(committed(t, addrs, "g", "in")) == 4
		})
		aID, _ := ma.Client().GroupMetadata()
		mu.Lock()
		armed = true
		mu.Unlock()
		// More records on every partition, so that A commits all four
		// again after arming, however far it got with the first ones.
		var more []*kgo.Record
		for i := range 4 * perPart {
			more = append(more, &kgo.Record{Topic: "in", Partition: int32(i % 4), Key: []byte(strconv.Itoa(i)), Value: val(4*perPart + i)})
		}
		produce(t, addrs, more...)
		select {
		case <-holding:
		case <-time.After(20 * time.Second):
			t.Fatal("A never committed all four partitions after arming")
		}
		// A's session is lost; B joins.
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: "g", Err: kerr.UnknownMemberID, Count: 1,
			When: func(r kmsg.Request) bool { return r.(*kmsg.HeartbeatRequest).MemberID == aID }})
		waitFor(t, 20*time.Second, "A notices the loss", func() bool { return countKind(h.snapshot(), "A", evReleaseStart, "lost") > 0 })
		b := startMember(t, rebalanceOpts(addrs, WithHandler(handler), h.hooks("B"))...)
		var target int32 = -1
		waitFor(t, 20*time.Second, "B owns a partition of the held commit and committed past it", func() bool {
			cur := committed(t, addrs, "g", "in")
			for _, e := range h.snapshot() {
				if e.Member == "B" && e.Kind == evAssigned && cur[e.Partition] > held[e.Partition] {
					target = e.Partition
					return true
				}
			}
			return false
		})
		before := committed(t, addrs, "g", "in")[target]
		n := cycles.Load()
		close(release)
		waitFor(t, 20*time.Second, "A's committer ran again", func() bool { return cycles.Load() > n })

		if after := committed(t, addrs, "g", "in")[target]; after < before {
			t.Fatalf("committed offset of in[%d] moved backwards %d -> %d: A's stale commit (%d) was accepted", target, before, after, held[target])
		}
		waitFor(t, 20*time.Second, "everything committed", func() bool {
			return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: 2 * perPart, {"in", 1}: 2 * perPart, {"in", 2}: 2 * perPart, {"in", 3}: 2 * perPart})
		})
		b.stop()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		done <- nil
		ev := h.snapshot()
		checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
		checkBrokerCommits(t, ev)
	})
}

// countKind counts member's events of kind (and why, if not empty).
func countKind(ev []event, member, kind, why string) int {
	n := 0
	for _, e := range ev {
		if e.Member == member && e.Kind == kind && (why == "" || e.Why == why) {
			n++
		}
	}
	return n
}

// memberIDOf reports whether id is a group member id that member used.
func memberIDOf(ev []event, member, id string) bool {
	for _, e := range ev {
		if e.Member == member && e.Kind == evCommitSent && e.MemberID == id {
			return true
		}
	}
	return false
}

// checkBrokerCommits checks the commits as the broker received them: each
// must have passed the runtime's ownership check first (a commit-sent event
// with the same member id, generation, partition and offset, recorded while
// the member owned the partition: see checkHistory). A commit that reaches
// the broker around that check, such as a stale one sent with the
// generation of a later session, fails here.
func checkBrokerCommits(t *testing.T, ev []event) {
	t.Helper()
	type key struct {
		id     string
		gen    int32
		tp     tp
		offset int64
	}
	sent := map[key]bool{}
	for _, e := range ev {
		switch e.Kind {
		case evCommitSent:
			sent[key{e.MemberID, e.Gen, e.tp(), e.Offset}] = true
		case "broker-commit":
			if !sent[key{e.MemberID, e.Gen, e.tp(), e.Offset}] {
				t.Errorf("seq %d: broker got a commit %s->%d (member %s, generation %d) that did not pass the ownership check", e.Seq, e.tp(), e.Offset, e.MemberID, e.Gen)
			}
		}
	}
}

// S02: 2 partitions; A owns both and is slowly handling the first record of
// each (the handler ignores cancellation). B joins and gets one of them, X;
// A's revoke gives up after DrainTimeout; B handles and commits X's first two
// records; only then does A's slow handler for X return. A must not commit it:
// the committed offset of X never moves backwards (history and broker), and
// the lag of X on the now quiet topic is 0 in B's metrics.
func TestS02_OffsetsNeverMoveBackwards(t *testing.T) {
	c, addrs := testClusterC(t, map[string]int32{"in": 2})
	const perPart = 3
	produceN(t, addrs, 2, perPart)
	h := newRecorder()
	observeCommits(t, c, addrs, h)
	bAssigned := func() map[int32]bool {
		out := map[int32]bool{}
		for _, e := range h.snapshot() {
			if e.Member == "B" && e.Kind == evAssigned {
				out[e.Partition] = true
			}
		}
		return out
	}
	var slowStarted atomic.Int32
	var bStarted atomic.Bool
	slowA := func(ctx context.Context, r *kgo.Record) error {
		if r.Offset != 0 {
			return nil
		}
		slowStarted.Add(1)
		// Ignore ctx, like a handler stuck in a call without a deadline:
		// return once B committed past this record, or once it is clear
		// that this partition stays with A.
		for {
			if committed(t, addrs, "g", "in")[r.Partition] >= 2 {
				return nil
			}
			if bStarted.Load() {
				if bp := bAssigned(); len(bp) > 0 && !bp[r.Partition] {
					return nil
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := startMember(t, rebalanceOpts(addrs, WithHandler(slowA), DrainTimeout(200*time.Millisecond), WithMetrics(mustMetrics(t, regA)), h.hooks("A"))...)
	waitFor(t, 20*time.Second, "A slowly handling both first records", func() bool { return slowStarted.Load() == 2 })
	bStarted.Store(true)
	b := startMember(t, rebalanceOpts(addrs, WithHandler(func(ctx context.Context, r *kgo.Record) error { return nil }),
		WithMetrics(mustMetrics(t, regB)), h.hooks("B"))...)
	var x int32 = -1
	waitFor(t, 20*time.Second, "B got a partition", func() bool {
		for p := range bAssigned() {
			x = p
		}
		return x >= 0
	})
	y := 1 - x
	waitFor(t, 20*time.Second, "A's slow handler for X returned after B committed", func() bool {
		return h.count(func(e event) bool { return e.Member == "A" && e.Kind == evHandled && e.Partition == x && e.Offset == 0 }) == 1
	})
	// Give A's committer a reason to run after the late completion: a new
	// record on Y, which A still owns, committed by A.
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: y, Value: []byte("later")})
	waitFor(t, 20*time.Second, "A committed Y to its end", func() bool { return committed(t, addrs, "g", "in")[y] == perPart+1 })
	waitFor(t, 20*time.Second, "X committed to its end", func() bool { return committed(t, addrs, "g", "in")[x] == perPart })
	waitFor(t, 10*time.Second, "lag of X back to 0 in B's metrics", func() bool {
		return gaugeValue(t, regB, "ordercast_consumer_lag", strconv.Itoa(int(x))) == 0
	})
	b.stop()
	a.stop()
	if committed(t, addrs, "g", "in")[x] != perPart {
		t.Fatal("X's committed offset changed after B stopped")
	}
	ev := h.snapshot()
	checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
	checkBrokerCommits(t, ev)
	// A's late completion of X@0 was discarded.
	for _, e := range ev {
		if e.Member == "A" && e.Kind == evCompleted && e.Partition == x && e.Offset == 0 {
			t.Fatalf("A completed X@0 after its revoke (seq %d)", e.Seq)
		}
	}
}

// gaugeValue returns the value of the series of gauge name whose partition
// label is partition (-1 if there is none).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, partition string) float64 {
	t.Helper()
	if v, ok := promtest.Lookup(t, reg, name, "partition", partition); ok {
		return v
	}
	return -1
}

// S03: key order mode, numbers 1..N over 50 keys, the effects go to a sink
// that deduplicates by number (an inbox). B joins, then leaves. Every handler
// running on A when its revoke begins is held until the revoke is over, so
// its completion arrives after the revoke. Checks: the completed offsets of
// every revoked partition were committed inside the revoke (the commit at
// release-end equals the contiguous completed end); the late completions were
// discarded, not committed; every number reached the sink, once in effect and
// in key order; numbers applied twice are only records a release handed on
// uncommitted (in flight, or behind one in flight: commits are contiguous).
func TestS03_KeyOrderedWorkNotLostOnRevoke(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 4})
	const n, keys = 1500, 50
	var recs []*kgo.Record
	for i := range n {
		k := i % keys
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(k % 4), Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(strconv.Itoa(i))})
	}
	produce(t, addrs, recs...)
	h := newRecorder()
	var sinkMu sync.Mutex
	applied := map[int]int{}       // number -> raw applications
	perKey := map[string][]int{}   // key -> numbers in first-application order
	revoked := make(chan struct{}) // A's revoke ended
	var revokedOnce sync.Once
	var joining atomic.Bool // B is about to join
	var holdMu sync.Mutex
	held := map[int32]bool{}
	handler := func(member string) Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			hold := false
			if member == "A" && joining.Load() {
				holdMu.Lock()
				hold = !held[r.Partition]
				held[r.Partition] = true
				holdMu.Unlock()
			}
			if hold {
				// One record per partition is still running when the
				// revoke begins and returns only after it ended.
				<-revoked
			} else if err := sleepOrCancel(ctx, time.Millisecond); err != nil {
				return err
			}
			num, _ := strconv.Atoi(string(r.Value))
			sinkMu.Lock()
			defer sinkMu.Unlock()
			applied[num]++
			if applied[num] == 1 {
				perKey[string(r.Key)] = append(perKey[string(r.Key)], num)
			}
			return nil
		}
	}
	hooksA := h.hookSet("A")
	inner := hooksA.partitions
	hooksA.partitions = func(ev string, m map[string][]int32) {
		inner(ev, m)
		if ev == "release-end:revoked" && len(m) > 0 { // cooperative sessions end with an empty revoke
			revokedOnce.Do(func() { close(revoked) })
		}
	}
	pa, err := New(rebalanceOpts(addrs, WithOrdering(OrderKey), Concurrency(8), MaxInFlight(2000, 1<<20), DrainTimeout(100*time.Millisecond),
		WithHandler(handler("A")), withHooks(hooksA))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pa.Run(ctx) }()
	sinkCount := func() int {
		sinkMu.Lock()
		defer sinkMu.Unlock()
		return len(applied)
	}
	waitFor(t, 20*time.Second, "a quarter applied", func() bool { return sinkCount() >= n/4 })
	joining.Store(true)
	waitFor(t, 20*time.Second, "a record of every partition held on A", func() bool {
		holdMu.Lock()
		defer holdMu.Unlock()
		return len(held) == 4
	})
	b := startMember(t, rebalanceOpts(addrs, WithOrdering(OrderKey), Concurrency(8), MaxInFlight(2000, 1<<20), WithHandler(handler("B")), h.hooks("B"))...)
	waitFor(t, 20*time.Second, "B applied some", func() bool { return countKind(h.snapshot(), "B", evCompleted, "") >= 50 })
	b.stop()
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", endOffsets(t, addrs, "in"))
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ev := h.snapshot()
	logOffs := logOffsetsOf(t, addrs, "in")
	checkHistory(t, ev, logOffs, true)
	// Completed offsets were committed inside the revoke.
	var revokedParts []int32
	releaseEnd := map[int32]int64{}
	inFlightAtRevoke := map[string]bool{} // "partition@offset"
	running := map[string]bool{}
	revokeSeen := false
	for _, e := range ev {
		key := fmt.Sprintf("%d@%d", e.Partition, e.Offset)
		switch {
		case e.Member == "A" && e.Kind == evHandle:
			running[key] = true
		case e.Member == "A" && e.Kind == evHandled:
			delete(running, key)
		case e.Member == "A" && e.Kind == evReleaseStart && e.Why == "revoked" && !revokeSeen:
			revokeSeen = true
			for k := range running {
				inFlightAtRevoke[k] = true
			}
		}
		if e.Member == "A" && e.Kind == evReleaseEnd && e.Why == "revoked" {
			if _, ok := releaseEnd[e.Partition]; !ok {
				releaseEnd[e.Partition] = e.Seq
				revokedParts = append(revokedParts, e.Partition)
			}
		}
	}
	if len(revokedParts) == 0 {
		t.Fatal("A had nothing revoked: the scenario did not happen")
	}
	for _, part := range revokedParts {
		end := releaseEnd[part]
		done := map[int64]bool{}
		var lastCommit int64
		for _, e := range ev[:end] {
			if e.Partition != part {
				continue
			}
			if e.Kind == evCompleted {
				done[e.Offset] = true
			}
			if e.Kind == evCommitOK {
				lastCommit = e.Offset
			}
		}
		var want int64
		for _, o := range logOffs[tp{"in", part}] {
			if !done[o] {
				break
			}
			want = o + 1
		}
		if lastCommit != want {
			t.Errorf("in[%d]: committed %d when A's revoke ended, but the completed run ended at %d", part, lastCommit, want)
		}
	}
	// Late completions existed and were discarded (checkHistory: no
	// completion after a release; here: they happened at all).
	late := 0
	for _, e := range ev[releaseEnd[revokedParts[0]]:] {
		if e.Member == "A" && e.Kind == evHandled && e.Err == "" && slices.Contains(revokedParts, e.Partition) && inFlightAtRevoke[fmt.Sprintf("%d@%d", e.Partition, e.Offset)] {
			late++
		}
	}
	if late == 0 {
		t.Fatal("no handler completed after A's revoke: the late-completion path was not exercised")
	}
	sinkMu.Lock()
	defer sinkMu.Unlock()
	if len(applied) != n {
		t.Fatalf("%d of %d numbers reached the sink", len(applied), n)
	}
	for k, nums := range perKey {
		if !slices.IsSorted(nums) {
			t.Fatalf("key %s applied out of order: %v", k, nums)
		}
	}
	// Numbers applied twice are records a release handed on without
	// passing them: at or after the commit point of a revoke or shutdown
	// of a member that had started them.
	redeliverable := map[string]bool{}
	lastOK := map[string]int64{} // member/partition -> last accepted commit
	started := map[string][]int64{}
	offsetOf := map[int]string{}
	for _, e := range ev {
		mp := fmt.Sprintf("%s/%d", e.Member, e.Partition)
		switch e.Kind {
		case evHandle:
			num, _ := strconv.Atoi(e.Value)
			offsetOf[num] = fmt.Sprintf("%d@%d", e.Partition, e.Offset)
			started[mp] = append(started[mp], e.Offset)
		case evCommitOK:
			lastOK[fmt.Sprintf("%d", e.Partition)] = e.Offset
		case evReleaseEnd:
			for _, o := range started[mp] {
				if o >= lastOK[fmt.Sprintf("%d", e.Partition)] {
					redeliverable[fmt.Sprintf("%d@%d", e.Partition, o)] = true
				}
			}
			started[mp] = nil
		}
	}
	for num, c := range applied {
		if c > 1 && !redeliverable[offsetOf[num]] {
			t.Errorf("number %d (%s) applied %d times but no release handed it on uncommitted", num, offsetOf[num], c)
		}
	}
}

// S14: 3 partitions, a slow handler (700ms for the first record of each
// partition, longer than the 600ms session timeout, and not watching its
// context), a large prefetch. B joins while A handles. A's revoke drops the
// buffered records of the revoked partition at once (A starts none of them),
// lets only the current record finish and commits it, well within the
// rebalance timeout; nobody is kicked out of the group (no partition lost, A
// keeps its member id).
func TestS14_SlowHandlerVsRebalanceTimeout(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 3})
	const perPart = 20
	produceN(t, addrs, 3, perPart)
	h := newRecorder()
	handler := func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			time.Sleep(700 * time.Millisecond) // a slow call that does not watch ctx
			return nil
		}
		return sleepOrCancel(ctx, time.Millisecond)
	}
	const rebalanceTimeout = 3 * time.Second
	opts := func(name string) []Opt {
		return []Opt{Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(10 * time.Millisecond), SessionTimeout(600 * time.Millisecond),
			RebalanceTimeout(rebalanceTimeout), DrainTimeout(2 * time.Second), MaxInFlight(100000, 64<<20), Concurrency(3),
			WithHandler(handler), h.hooks(name)}
	}
	a := startMember(t, opts("A")...)
	waitFor(t, 20*time.Second, "A handling the first record of every partition", func() bool {
		return h.count(func(e event) bool { return e.Member == "A" && e.Kind == evHandle }) == 3
	})
	idBefore, _ := a.p.Client().GroupMetadata()
	b := startMember(t, opts("B")...)
	waitFor(t, 20*time.Second, "everything committed", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: perPart, {"in", 1}: perPart, {"in", 2}: perPart})
	})
	idAfter, _ := a.p.Client().GroupMetadata()
	b.stop()
	a.stop()
	ev := h.snapshot()
	rep := checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
	if len(rep.duplicates) > 0 {
		t.Fatalf("duplicates although the current record finished within the drain: %v", rep.duplicates)
	}
	if idBefore != idAfter || countKind(ev, "A", evReleaseStart, "lost")+countKind(ev, "B", evReleaseStart, "lost") > 0 {
		t.Fatalf("a member was kicked out (A's member id %s -> %s)", idBefore, idAfter)
	}
	revokes := 0
	for _, start := range ev {
		if start.Member != "A" || start.Kind != evReleaseStart || start.Why != "revoked" {
			continue
		}
		revokes++
		var end event
		finished, committedAt := 0, int64(-1)
		for _, e := range ev[start.Seq:] {
			if e.Member != "A" || e.Partition != start.Partition {
				continue
			}
			if e.Kind == evCompleted {
				finished++
			}
			if e.Kind == evCommitOK {
				committedAt = e.Offset
			}
			if e.Kind == evReleaseEnd {
				end = e
				break
			}
		}
		took := time.Duration(end.At - start.At)
		if finished > 1 || took >= rebalanceTimeout {
			t.Fatalf("revoke of in[%d]: %d records finished during it (want at most the current one), took %v (rebalance timeout %v)", start.Partition, finished, took, rebalanceTimeout)
		}
		if finished == 1 && committedAt != 1 {
			t.Fatalf("revoke of in[%d]: the current record finished but the commit inside the revoke was %d, want 1", start.Partition, committedAt)
		}
	}
	if revokes == 0 {
		t.Fatal("A had nothing revoked: the scenario did not happen")
	}
}
