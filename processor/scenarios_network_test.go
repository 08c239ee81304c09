package processor

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// Scenario tests for network faults: docs/scenarios.md S19. Every client of the
// processor (consumer and retry/DLQ producer) is routed through the fault
// proxy (internal/faultproxy), on the embedded broker and on a real cluster
// alike; the test's own producer and admin clients are not.

// S19 "the network fails, not the process": steady input on 3 partitions
// while, one after the other, every frame is delayed 500ms each way for 2s,
// every connection is reset once, and the group coordinator's responses are
// withheld (its requests still reach it and are applied: a half-open
// connection) for longer than the client's request timeout, so requests time
// out, new connections hang and heartbeats go unanswered.
//
// Scaled time: the scenario's 40s withholding against Kafka's default 45s
// session timeout and franz-go's 10s request timeout becomes 8s against a
// 9s session timeout and a 2s RequestTimeoutOverhead (the same proportions),
// so the test takes about half a minute.
//
// Checks: nothing lost (every record applied); nothing applied twice in
// effect (a record is applied again only after a release of its partition
// handed it on uncommitted: never twice within one ownership, so an inbox
// absorbs every repeat), and the history's invariants (checkHistory: no
// commit passes an unfinished record or moves backwards, no record is
// handled after a commit passed it); the member recovers and the lag returns
// to 0 without new input; the final commit is not behind any applied record
// and stays there once the member stopped and the proxy closed (no late
// request lands below it); Health.Unreachable names the coordinator while
// it is withheld, and nothing before the faults and after recovery.
func TestS19_NetworkFails(t *testing.T) {
	parallel(t)
	const (
		partitions = 3
		session    = 9 * time.Second
		reqTimeout = 2 * time.Second // kgo.RequestTimeoutOverhead
		withhold   = 8 * time.Second
		latency    = 500 * time.Millisecond
		latencyFor = 2 * time.Second
	)
	addrs := testCluster(t, map[string]int32{"in": partitions})
	proxy, dial := testkafka.Proxy(t)
	h := newRecorder()

	var mu sync.Mutex
	applied := map[tp]map[int64]int{} // raw applications per record
	var nApplied atomic.Int64
	handler := func(ctx context.Context, r *kgo.Record) error {
		h.applied("A", r)
		mu.Lock()
		k := tp{r.Topic, r.Partition}
		if applied[k] == nil {
			applied[k] = map[int64]int{}
		}
		applied[k][r.Offset]++
		mu.Unlock()
		nApplied.Add(1)
		return nil
	}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(handler), h.hooks("A"),
		CommitInterval(100*time.Millisecond), SessionTimeout(session), RebalanceTimeout(20*time.Second),
		Backoff(10*time.Millisecond, 100*time.Millisecond),
		ClientOpts(dial, kgo.RequestTimeoutOverhead(reqTimeout)))
	if err != nil {
		t.Fatal(err)
	}

	// Steady input, not through the proxy: a record every 5ms, round-robin.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	stopInput := make(chan struct{})
	var inputWG sync.WaitGroup
	inputWG.Add(1)
	go func() {
		defer inputWG.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopInput:
				return
			case <-tick.C:
			}
			rec := &kgo.Record{Topic: "in", Partition: int32(i % partitions), Value: val(i)}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
		}
	}()
	var stopOnce sync.Once
	endInput := func() { stopOnce.Do(func() { close(stopInput); inputWG.Wait() }) }
	defer endInput()

	start := time.Now()
	phase := func(name string) {
		t.Logf("%6.2fs %s (applied %d, requests %v)", time.Since(start).Seconds(), name, nApplied.Load(), proxy.Seen(int16(kmsg.OffsetCommit)))
	}
	progress := func(what string, more int64) {
		t.Helper()
		from := nApplied.Load()
		waitFor(t, 30*time.Second, what, func() bool { return nApplied.Load() >= from+more })
	}
	stop := testkafka.Run(t, p)
	progress("steady processing", 200)
	if u := p.Health().Unreachable; len(u) != 0 {
		t.Fatalf("brokers %v unreachable before any fault", u)
	}
	phase("steady")

	proxy.SetLatency("", latency)
	time.Sleep(latencyFor) // the fault's duration, not a synchronisation
	proxy.SetLatency("", 0)
	progress("processing after the latency", 100)
	phase("latency over")

	if n := proxy.Reset(""); n == 0 {
		t.Fatal("no connection to reset: the processor's clients are not routed through the proxy")
	}
	progress("processing after the resets", 100)
	phase("resets over")

	coord := coordinatorOf(t, addrs, "g")
	seenBefore := proxy.SeenAll()
	withheldAt := time.Now()
	proxy.Withhold(coord, withhold)
	var reported time.Duration
	waitFor(t, withhold, "health to report the withheld coordinator "+coord+" unreachable", func() bool {
		if slices.ContainsFunc(p.Health().Unreachable, func(a string) bool { return sameAddr(a, coord) }) {
			reported = time.Since(withheldAt)
			return true
		}
		return false
	})
	waitFor(t, withhold+time.Second, "the withholding to end", func() bool { return !proxy.Withheld(coord) })
	seenDuring := proxy.SeenAll()
	if seenDuring[int16(kmsg.ApiVersions)] <= seenBefore[int16(kmsg.ApiVersions)] {
		t.Errorf("no new connection while withheld (ApiVersions %d -> %d): no request timed out", seenBefore[int16(kmsg.ApiVersions)], seenDuring[int16(kmsg.ApiVersions)])
	}
	phase("withholding over")
	waitFor(t, 3*session, "health to report every broker reachable again", func() bool { return len(p.Health().Unreachable) == 0 })
	recovered := time.Since(withheldAt) - withhold
	progress("processing after the withholding", 100)
	phase("recovered")

	endInput()
	ends := endOffsets(t, addrs, "in")
	waitFor(t, 60*time.Second, "lag 0: everything committed", func() bool { return committedEquals(t, addrs, "g", ends) })
	drained := time.Since(start)
	phase("lag 0")
	stop()
	proxy.Close()
	if !committedEquals(t, addrs, "g", ends) {
		t.Fatalf("committed %v after the member stopped, want the end offsets %v", committed(t, addrs, "g", "in"), ends)
	}

	ev := h.snapshot()
	logOffs := logOffsetsOf(t, addrs, "in")
	checkHistory(t, ev, logOffs, true)
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for k, offs := range logOffs {
		for _, o := range offs {
			switch n := applied[k][o]; {
			case n == 0:
				t.Errorf("lost: %s@%d never applied", k, o)
			case n > 1:
				twice++
				if !releasedBetweenApplies(ev, k, o) {
					t.Errorf("%s@%d applied %d times within one ownership of the partition", k, o, n)
				}
			}
		}
	}
	releases := map[string]int{}
	for _, e := range ev {
		if e.Kind == evReleaseStart && e.Why != "shutdown" {
			releases[e.Why]++
		}
	}
	t.Logf("unreachable reported %v into the %v withholding; reachable %v after it; lag 0 after %v; %d records, %d applied again after a release; partition releases %v; proxy: %d resets, requests %v",
		reported.Round(time.Millisecond), withhold, recovered.Round(time.Millisecond), drained.Round(time.Millisecond),
		sumLen(logOffs), twice, releases, proxy.Resets(), keyNames(proxy.SeenAll()))
}

// coordinatorOf returns the address ("host:port") of group's coordinator,
// asked without the proxy.
func coordinatorOf(t *testing.T, addrs []string, group string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp := kadm.NewClient(cl).FindGroupCoordinators(context.Background(), group)
	c, ok := resp[group]
	if !ok || c.Err != nil {
		t.Fatalf("coordinator of %s: %v", group, c.Err)
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}

// sameAddr reports whether two broker addresses are the same, taking
// localhost as 127.0.0.1 (as the proxy does).
func sameAddr(a, b string) bool {
	norm := func(s string) string {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return s
		}
		if strings.EqualFold(host, "localhost") {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
	return norm(a) == norm(b)
}

// releasedBetweenApplies reports whether, between the first and the last
// time the record k@o was applied, a release of k began: the only way the
// runtime hands a record on to be handled again.
func releasedBetweenApplies(ev []event, k tp, o int64) bool {
	first, last := int64(-1), int64(-1)
	for _, e := range ev {
		if e.Kind == evApplied && e.tp() == k && e.Offset == o {
			if first < 0 {
				first = e.Seq
			}
			last = e.Seq
		}
	}
	for _, e := range ev {
		if e.Kind == evReleaseStart && e.tp() == k && e.Seq > first && e.Seq < last {
			return true
		}
	}
	return false
}

func sumLen(m map[tp][]int64) int {
	n := 0
	for _, offs := range m {
		n += len(offs)
	}
	return n
}

// keyNames renders per-API-key request counts with the keys' names.
func keyNames(m map[int16]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, n := range m {
		out[kmsg.NameForKey(k)] = n
	}
	return out
}
