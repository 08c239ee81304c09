package processor

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// queueChild runs one queue-mode member (NewQueue, one share session,
// Concurrency 4) of group OC_GROUP on topic "in" until SIGTERM/SIGINT. It
// appends an evHandle event (with the delivery count) to OC_HISTORY when a
// handler call begins and an evApplied event when it ends, OC_HANDLER_SLEEP
// later. Its OC_KILL_AT-th handler call records evCrashIn instead and then
// SIGKILLs the process, or, with OC_FREEZE=1, blocks for good (the parent
// stops the process).
func queueChild() int {
	f, err := os.OpenFile(os.Getenv("OC_HISTORY"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	h := &recorder{file: f}
	killAt, err := strconv.ParseInt(os.Getenv("OC_KILL_AT"), 10, 64)
	if err != nil {
		panic(err)
	}
	sleep, err := time.ParseDuration(os.Getenv("OC_HANDLER_SLEEP"))
	if err != nil {
		panic(err)
	}
	freeze := os.Getenv("OC_FREEZE") == "1"
	const member = "child"
	var calls atomic.Int64
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Println("READY")
	q, err := NewQueue(Brokers(strings.Split(os.Getenv("OC_BROKERS"), ",")...), Group(os.Getenv("OC_GROUP")), Topics("in"),
		Concurrency(4), ShareSessions(1), HandlerTimeout(time.Hour), DrainTimeout(time.Second),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			e := event{Member: member, Kind: evHandle, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				Value: string(r.Value), Delivery: r.DeliveryCount()}
			if calls.Add(1) == killAt {
				e.Kind = evCrashIn
				h.add(e)
				if !freeze {
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				select {} // mid-record, for good
			}
			h.add(e)
			if err := sleepOrCancel(ctx, sleep); err != nil {
				return err
			}
			h.applied(member, r)
			return nil
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := q.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Run:", err)
		return 1
	}
	return 0
}

// TestQueueCrashRedelivers: a queue-mode member (a child process, one
// share session, Concurrency 4) dies on its 10th handler call, mid-record,
// with 200 records on a partition:
//
//   - kill: SIGKILL. The broker releases what the member held when it
//     sees the member's connections close (Kafka's share-session
//     disconnect listener; kfake does the same), at the latest when their
//     acquisition locks time out.
//   - freeze: SIGSTOP, and SIGKILL once its records came back. Its
//     connections stay open and it renews no lock: only the acquisition
//     lock's timeout (1 s on kfake, the broker's
//     group.share.record.lock.duration.ms; 15 s on Kafka, the group's
//     share.record.lock.duration.ms at the broker's smallest allowed,
//     group.share.min.record.lock.duration.ms) hands its records on. They
//     must come back while the member is stopped, and no sooner than a
//     quarter of the lock after the stop (the member renews every half
//     lock, so at least 3/8 of a lock is left).
//
// Each variant has a group of its own: on a real cluster the dead member
// stays in its group until the share session timeout (45 s), and later
// tests use group "g". A second member, started after the crash, takes
// over: every record is
// handled to its end (the child's effect, or the second member's handler
// returning nil, i.e. accepted) at least once; every record the dead member
// had begun and not finished, the one it died in included, reaches the
// second member on a delivery >= 2; and the broker's share backlog of the
// partition (brokerShareBacklog) reaches 0: every record acknowledged, none
// lost.
func TestQueueCrashRedelivers(t *testing.T) {
	for _, freeze := range []bool{false, true} {
		name := "kill"
		if freeze {
			name = "freeze"
		}
		t.Run(name, func(t *testing.T) {
			testkafka.Parallel(t)
			testQueueCrash(t, "crash-"+name, freeze)
		})
	}
}

func testQueueCrash(t *testing.T, group string, freeze bool) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	var addrs []string
	lock := time.Second
	topics := map[string]int32{"in": 1, DLQTopic(group): 1}
	if testkafka.Real() {
		lock = 15 * time.Second
		addrs = testkafka.Cluster(t, topics)
		setGroupConfig(t, addrs, group, "share.record.lock.duration.ms", strconv.Itoa(int(lock.Milliseconds())))
	} else {
		_, addrs = testkafka.Fake(t, topics, kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": strconv.Itoa(int(lock.Milliseconds())),
			"share.record.lock.sweep.interval.ms": "50",
		}))
	}
	const n = 200
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Value: val(i)})
	}
	produce(t, addrs, recs...)
	hist := filepath.Join(t.TempDir(), "history.jsonl")
	env := []string{"OC_BROKERS=" + strings.Join(addrs, ","), "OC_GROUP=" + group, "OC_HISTORY=" + hist, "OC_KILL_AT=10", "OC_HANDLER_SLEEP=20ms"}
	if freeze {
		env = append(env, "OC_FREEZE=1")
	}
	c := startChild(t, "queue", env...)
	var stoppedAt time.Time
	if freeze {
		waitFor(t, 60*time.Second, "the child in the handler it never leaves", func() bool {
			for _, e := range readHistory(t, hist) {
				if e.Kind == evCrashIn {
					return true
				}
			}
			return false
		})
		if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stoppedAt = time.Now()
	} else if ws := c.wait(t, 60*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child should have died of SIGKILL, got %v; output:\n%s", ws, c.out.String())
	}

	// What the child had begun and not finished when it stopped.
	ev := readHistory(t, hist)
	applied := map[string]bool{}
	for _, e := range ev {
		if e.Kind == evApplied {
			applied[e.Value] = true
		}
	}
	held := map[string]bool{}
	crashed := ""
	for _, e := range ev {
		if (e.Kind == evHandle || e.Kind == evCrashIn) && !applied[e.Value] {
			held[e.Value] = true
		}
		if e.Kind == evCrashIn {
			crashed = e.Value
		}
	}
	if crashed == "" {
		t.Fatalf("the child did not record the record it died in; output:\n%s", c.out.String())
	}

	type delivery struct {
		count int32
		at    time.Time
	}
	var mu sync.Mutex
	got := map[string][]delivery{}
	reg := prometheus.NewRegistry()
	startQueue(t, addrs, Group(group), WithMetrics(mustMetrics(t, reg)), Concurrency(4), WithHandler(func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		got[string(r.Value)] = append(got[string(r.Value)], delivery{r.DeliveryCount(), time.Now()})
		mu.Unlock()
		return nil
	}))
	// Lock expiry on Kafka, plus the second member's join.
	within := 60*time.Second + 2*lock
	waitFor(t, within, "the records the child held redelivered to the second member", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range held {
			if len(got[v]) == 0 {
				return false
			}
		}
		return true
	})
	if freeze {
		// Still stopped, its connections open: the lock timeout gave the records back.
		if c.cmd.ProcessState != nil {
			t.Fatalf("the child exited while stopped: %v", c.cmd.ProcessState)
		}
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the child should have died of SIGKILL, got %v", ws)
		}
	}
	mu.Lock()
	for v := range held {
		d := got[v][0]
		if d.count < 2 {
			t.Errorf("%s, held by the dead member, reached the second member on delivery %d, want >= 2", v, d.count)
		}
		if freeze && d.at.Sub(stoppedAt) < lock/4 {
			t.Errorf("%s came back %v after the stop, before its lock (%v) could have expired", v, d.at.Sub(stoppedAt), lock)
		}
	}
	mu.Unlock()

	waitFor(t, within, "every record handled at least once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			if v := string(val(i)); !applied[v] && len(got[v]) == 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, within, "every record acknowledged: the broker's share backlog at 0", func() bool {
		return brokerShareBacklog(t, addrs, group, "in", 0) == 0
	})
	if a := promtest.Sum(t, reg, "ordercast_consumer_share_records_accepted_total", "group", group, "topic", "in"); a < float64(len(held)) {
		t.Fatalf("the second member accepted %v records, want at least the %d the child held", a, len(held))
	}
	t.Logf("the child held %d records when it stopped (%s among them); applied %d; the second member handled %d",
		len(held), crashed, len(applied), len(got))
}

// brokerShareBacklog is the records of topic's partition that group has not
// acknowledged, as the broker reports it (DescribeShareGroupOffsets): its
// share lag where it reports one (KIP-1226), else the end offset minus the
// share-partition start offset (KIP-932); -1 when it reports neither. A
// broker persists the start offset lazily (Kafka moves it at its share
// coordinator's snapshots): only the share lag is exact at once.
func brokerShareBacklog(t *testing.T, addrs []string, group, topic string, partition int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Logf("describing share group offsets: %v", err)
		return -1
	}
	o, ok := res[group].Offsets.Lookup(topic, partition)
	switch {
	case !ok || o.Err != nil:
		return -1
	case o.Lag >= 0:
		return o.Lag
	case o.StartOffset < 0:
		return -1
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Logf("listing end offsets: %v", err)
		return -1
	}
	e, ok := ends.Lookup(topic, partition)
	if !ok || e.Err != nil {
		return -1
	}
	return e.Offset - o.StartOffset
}
