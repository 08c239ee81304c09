package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// levelLog is a slog.Handler that keeps the messages logged at WARN or above
// (INFO too with info set) with their attributes, for tests that check what
// an operator sees. Safe for concurrent use.
type levelLog struct {
	info bool
	mu   sync.Mutex
	msgs []string // "LEVEL message key=value..."
}

func (l *levelLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= l.lowest() }
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *levelLog) WithGroup(string) slog.Handler                 { return l }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}

// lowest is the lowest level kept.
func (l *levelLog) lowest() slog.Level {
	if l.info {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// all returns the messages containing sub.
func (l *levelLog) all(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			out = append(out, m)
		}
	}
	return out
}

// find returns the first message containing every one of subs.
func (l *levelLog) find(subs ...string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, m := range l.msgs {
		for _, s := range subs {
			if !strings.Contains(m, s) {
				continue next
			}
		}
		return m, true
	}
	return "", false
}

func adminFor(t *testing.T, addrs []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func deleteTopic(t *testing.T, addrs []string, topic string) {
	t.Helper()
	adm := adminFor(t, addrs)
	resp, err := adm.DeleteTopics(context.Background(), topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
	waitFor(t, 30*time.Second, topic+" gone", func() bool {
		d, err := adm.ListTopics(context.Background(), topic)
		return err == nil && !d.Has(topic)
	})
}

// runErr starts r.Run and returns a channel with its result.
func runErr(r testkafka.Runner, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return done
}

func waitErr(t *testing.T, done <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("Run did not return within %v", within)
		return nil
	}
}

// The DLQ and the retry topics are checked before the member joins: a
// missing one is an error from Run naming it and how to create it (the
// source's partition count), in both modes, and nothing is consumed.
func TestMissingRuntimeTopicIsAnError(t *testing.T) {
	parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"in": 3})
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("x")})
	var handled sync.WaitGroup
	h := func(context.Context, *kgo.Record) error { handled.Add(1); return nil }
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), RetryTopics(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTransactional("tx", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
		Brokers(addrs...), Group("eos"), Topics("in"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		r     testkafka.Runner
		names []string
	}{
		{"plain", p, []string{"g.retry.1", "g.dlq"}},
		{"transactional", tp, []string{"eos.dlq"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := waitErr(t, runErr(c.r, context.Background()), 30*time.Second)
			var me *MissingTopicError
			if !errors.As(err, &me) || !errors.Is(err, ErrMissingTopic) {
				t.Fatalf("Run: %v, want a *MissingTopicError", err)
			}
			if strings.Join(me.Topics, ",") != strings.Join(c.names, ",") || me.Partitions != 3 {
				t.Fatalf("missing %v with %d partitions, want %v with 3", me.Topics, me.Partitions, c.names)
			}
			for _, s := range append(c.names, "--partitions 3", "CreateTopics(true)") {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not say %q", err, s)
				}
			}
		})
	}
	if off := committed(t, addrs, "g", "in"); len(off) != 0 {
		t.Fatalf("committed %v before the check passed", off)
	}
}

// Brokers that do not answer at start are logged at WARN, naming them, on
// the first failed attempt, not only when the start check gives up
// (topicCheckTimeout later).
func TestUnreachableBrokersWarnAtStart(t *testing.T) {
	parallel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	logs := &levelLog{}
	p, err := New(Brokers(addr), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }),
		Logger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := runErr(p, ctx)
	testkafka.WaitFor(t, 20*time.Second, "a WARN naming the unreachable brokers", func() bool {
		_, ok := logs.find("WARN", "brokers do not answer", addr)
		return ok
	})
	cancel()
	waitErr(t, errc, 30*time.Second)
}

// With CreateTopics(true) missing runtime topics are created on the first
// answer that lacks them, without the repeated checks that only tell a
// stale answer from a missing topic (creating a topic that exists after all
// is harmless): no "checking the runtime's topics again" is logged.
func TestCreateTopicsDoesNotWait(t *testing.T) {
	parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"in": 2})
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("x")})
	logs := &levelLog{info: true}
	var handled atomic.Int64
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), RetryTopics(time.Second), CreateTopics(true), Logger(slog.New(logs)),
		WithHandler(func(context.Context, *kgo.Record) error { handled.Add(1); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	defer stop()
	testkafka.WaitFor(t, 30*time.Second, "the record handled", func() bool { return handled.Load() == 1 })
	if again := logs.all("checking the runtime's topics again"); len(again) > 0 {
		t.Fatalf("the start checked the topics again before creating them: %v", again)
	}
	if created := logs.all("created the runtime's topics"); len(created) != 1 {
		t.Fatalf("logged %v, want one creation", created)
	}
}

// A source topic that does not exist while the runtime's own topics do is
// logged at WARN at start, naming it, in the plain and the queue mode: Kafka
// lets the member join and it would read nothing without a word.
func TestMissingSourceTopicWarned(t *testing.T) {
	parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"in": 1, "g.dlq": 1, "q.dlq": 1})
	nop := func(context.Context, *kgo.Record) error { return nil }
	for _, c := range []struct {
		name string
		mk   func(log *slog.Logger) (testkafka.Runner, error)
	}{
		{"New", func(log *slog.Logger) (testkafka.Runner, error) {
			return New(Brokers(addrs...), Group("g"), Topics("in", "invoicez"), WithHandler(nop), Logger(log))
		}},
		{"NewQueue", func(log *slog.Logger) (testkafka.Runner, error) {
			return NewQueue(Brokers(addrs...), Group("q"), Topics("in", "invoicez"), WithHandler(nop), Logger(log))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &levelLog{}
			r, err := c.mk(slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := runErr(r, ctx)
			testkafka.WaitFor(t, 30*time.Second, "a WARN naming the missing source topic", func() bool {
				_, ok := logs.find("WARN", "source topics do not exist", "invoicez")
				return ok
			})
			cancel()
			waitErr(t, errc, 30*time.Second)
		})
	}
}

// A source topic that does not exist is named in Run's error, with and
// without CreateTopics(true) (which creates only the topics the runtime
// writes to), in both modes; nothing is created.
func TestMissingSourceTopicIsNamed(t *testing.T) {
	parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"other": 1})
	for _, create := range []bool{false, true} {
		p, err := New(Brokers(addrs...), Group("g"), Topics("invoices"), WithHandler(func(context.Context, *kgo.Record) error { return nil }),
			RetryTopics(time.Second), CreateTopics(create))
		if err != nil {
			t.Fatal(err)
		}
		tp, err := NewTransactional("tx", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
			Brokers(addrs...), Group("eos"), Topics("invoices"), CreateTopics(create))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			r    testkafka.Runner
		}{{"plain", p}, {"transactional", tp}} {
			t.Run(fmt.Sprintf("%s/CreateTopics=%v", c.name, create), func(t *testing.T) {
				err := waitErr(t, runErr(c.r, context.Background()), 30*time.Second)
				var me *MissingTopicError
				if !errors.As(err, &me) || strings.Join(me.Sources, ",") != "invoices" {
					t.Fatalf("Run: %v, want a *MissingTopicError naming the source topic invoices", err)
				}
				if !strings.Contains(err.Error(), "source topic invoices does not exist") || !strings.Contains(err.Error(), "--topic invoices") {
					t.Fatalf("error %q does not name the missing source topic and how to create it", err)
				}
			})
		}
	}
	d, err := adminFor(t, addrs).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if names := d.Names(); strings.Join(names, ",") != "other" {
		t.Fatalf("topics %v after the failed starts, want only other", names)
	}
}

// With CreateTopics(true) the missing topics are created with the source's
// partition count, and the DLQ works at once.
func TestCreateTopicsCreatesMissing(t *testing.T) {
	parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"in": 3})
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte("bad")})
	h := func(context.Context, *kgo.Record) error { return Permanentf("no") }
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), RetryTopics(time.Second), CreateTopics(true))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	defer stop()
	dlq := readAll(t, addrs, "g.dlq", 1, 30*time.Second)
	if string(dlq[0].Value) != "bad" {
		t.Fatalf("DLQ holds %q", dlq[0].Value)
	}
	d, err := adminFor(t, addrs).ListTopics(context.Background(), "g.dlq", "g.retry.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"g.dlq", "g.retry.1"} {
		if n := len(d[name].Partitions); n != 3 {
			t.Fatalf("%s has %d partitions, want 3 (the source's)", name, n)
		}
	}
}

// In the plain mode a DLQ that cannot be written (here: deleted after the
// start check) holds the record's partition (its offset is not committed
// past the record) and says so: Health.Blocked names the partition, offset
// and DLQ, forward_failures_total counts, and the runtime logs at ERROR.
// Once the topic is back the record is written and the partition goes on.
func TestUnwritableDLQIsVisible(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	reg := prometheus.NewRegistry()
	logs := &levelLog{}
	h := func(_ context.Context, r *kgo.Record) error {
		if string(r.Value) == "bad" {
			return Permanentf("bad record")
		}
		return nil
	}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), WithMetrics(mustMetrics(t, reg)),
		Logger(slog.New(logs)), Backoff(10*time.Millisecond, 50*time.Millisecond), CommitInterval(20*time.Millisecond),
		ClientOpts(kgo.MetadataMinAge(20*time.Millisecond), kgo.UnknownTopicRetries(1)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	defer stop()
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("good")})
	waitFor(t, 30*time.Second, "offset 1 committed", func() bool { return committed(t, addrs, "g", "in")[0] == 1 })
	deleteTopic(t, addrs, "g.dlq")
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("bad")}, &kgo.Record{Topic: "in", Value: []byte("good")})

	waitFor(t, 30*time.Second, "Health.Blocked names the record and the DLQ", func() bool {
		b := p.Health().Blocked
		return len(b) == 1 && strings.Contains(b[0], "in[0]") && strings.Contains(b[0], "offset 1") && strings.Contains(b[0], "g.dlq")
	})
	if v, ok := promtest.Lookup(t, reg, "ordercast_consumer_forward_failures_total", "target", "g.dlq"); !ok || v < 1 {
		t.Fatalf("forward_failures_total{target=g.dlq} = %v (%v), want >= 1", v, ok)
	}
	if m, ok := logs.find("ERROR", "g.dlq", "offset=1"); !ok {
		t.Fatalf("no ERROR log naming the DLQ and the offset; logged %v", logs.msgs)
	} else {
		t.Logf("logged: %s", m)
	}
	if off := committed(t, addrs, "g", "in")[0]; off != 1 {
		t.Fatalf("committed %d past the record that is not dead-lettered", off)
	}

	resp, err := adminFor(t, addrs).CreateTopic(context.Background(), 1, int16(testkafka.ReplicationFactor(t)), nil, "g.dlq")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "offset 3 committed after the DLQ came back", func() bool { return committed(t, addrs, "g", "in")[0] == 3 })
	if b := p.Health().Blocked; len(b) != 0 {
		t.Fatalf("still blocked: %v", b)
	}
	if dlq := readAll(t, addrs, "g.dlq", 1, 10*time.Second); string(dlq[0].Value) != "bad" {
		t.Fatalf("DLQ holds %q", dlq[0].Value)
	}
}

// In the exactly-once mode a record that cannot be dead-lettered stops the
// stage with a *DeadLetterError naming the record and the DLQ, instead of
// aborting every transaction silently; nothing at or past it is committed.
func TestTxnUnwritableDLQStopsTheStage(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1, "out": 1})
	logs := &levelLog{}
	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Value) == "bad" {
			return nil, Permanentf("bad record")
		}
		return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
	}
	tp, err := NewTransactional("txn-dlq", h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond),
		Logger(slog.New(logs)), ClientOpts(kgo.MetadataMinAge(20*time.Millisecond), kgo.UnknownTopicRetries(1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runErr(tp, ctx)
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("good")})
	waitFor(t, 30*time.Second, "offset 1 committed", func() bool { return committed(t, addrs, "g", "in")[0] == 1 })
	deleteTopic(t, addrs, "g.dlq")
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("bad")}, &kgo.Record{Topic: "in", Value: []byte("good")})

	err = waitErr(t, done, 60*time.Second)
	var de *DeadLetterError
	if !errors.As(err, &de) {
		t.Fatalf("Run: %v, want a *DeadLetterError", err)
	}
	if de.Topic != "in" || de.Partition != 0 || de.Offset != 1 || de.DLQ != "g.dlq" {
		t.Fatalf("DeadLetterError names %s[%d]@%d -> %s, want in[0]@1 -> g.dlq", de.Topic, de.Partition, de.Offset, de.DLQ)
	}
	if !strings.Contains(err.Error(), "in[0]@1") || !strings.Contains(err.Error(), "g.dlq") {
		t.Fatalf("error %q does not name the record and the DLQ", err)
	}
	if _, ok := logs.find("ERROR", "g.dlq", "offset=1"); !ok {
		t.Fatalf("no ERROR log naming the record; logged %v", logs.msgs)
	}
	if off := committed(t, addrs, "g", "in")[0]; off != 1 {
		t.Fatalf("committed %d, want 1 (nothing at or past the record)", off)
	}
}

// A shutdown returns within DrainTimeout (plus the group leave) whatever the
// DLQ does: here the DLQ write of the transaction is stuck in franz-go's
// retries of a deleted topic (kgo.UnknownTopicRetries(-1): for ever; by
// default about 20s) when the context is cancelled.
func TestTxnShutdownWithStuckDLQ(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	handled := make(chan struct{}, 1)
	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil, Permanentf("bad record")
	}
	const drain = time.Second
	tp, err := NewTransactional("txn-stuck", h, Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20*time.Millisecond),
		DrainTimeout(drain), ClientOpts(kgo.UnknownTopicRetries(-1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runErr(tp, ctx)
	waitFor(t, 30*time.Second, "joined", func() bool { return tp.Health().Joined && len(tp.Health().Partitions) == 1 })
	deleteTopic(t, addrs, "g.dlq")
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("bad")})
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("record not handled")
	}
	start := time.Now()
	cancel()
	err = waitErr(t, done, 15*time.Second)
	took := time.Since(start)
	t.Logf("Run returned after %v: %v", took.Round(time.Millisecond), err)
	if took > drain+3*time.Second {
		t.Fatalf("Run took %v after cancel, want within DrainTimeout (%v) and the group leave", took, drain)
	}
}

// The same bound in the plain mode: a DLQ write stuck in franz-go's retries
// is cancelled after DrainTimeout, the record stays uncommitted.
func TestShutdownWithStuckDLQ(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	handled := make(chan struct{}, 1)
	h := func(context.Context, *kgo.Record) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return Permanentf("bad record")
	}
	const drain = time.Second
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(h), DrainTimeout(drain),
		ProducerOpts(kgo.UnknownTopicRetries(-1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runErr(p, ctx)
	waitFor(t, 30*time.Second, "joined", func() bool { return len(p.Health().Partitions) == 1 })
	deleteTopic(t, addrs, "g.dlq")
	testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("bad")})
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("record not handled")
	}
	start := time.Now()
	cancel()
	err = waitErr(t, done, 15*time.Second)
	took := time.Since(start)
	t.Logf("Run returned after %v: %v", took.Round(time.Millisecond), err)
	if err != nil || took > drain+3*time.Second {
		t.Fatalf("Run: %v after %v, want nil within DrainTimeout (%v) and the group leave", err, took, drain)
	}
	if off := committed(t, addrs, "g", "in")[0]; off != 0 {
		t.Fatalf("committed %d past the record that was not dead-lettered", off)
	}
}

// asksFor reports whether a Metadata request names topic.
func asksFor(r *kmsg.MetadataRequest, topic string) bool {
	return slices.ContainsFunc(r.Topics, func(t kmsg.MetadataRequestTopic) bool { return t.Topic != nil && *t.Topic == topic })
}

// missingTopicMetadata answers a Metadata request as a broker that has not
// caught up with the cluster's metadata would: every topic asked for unknown.
func missingTopicMetadata(req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// The start check of the runtime's topics waits out a cluster that is briefly
// unreachable or behind (found by the crash harness on a 3-node cluster: a
// service whose check met a connection dropped by a restarting broker, or a
// just-restarted broker's Metadata without the DLQ, stopped at start with
// "checking topics ...: broker closed the connection" or a MissingTopicError,
// and crash-looped while the broker was away). Each case fails with the old
// single-answer check.
func TestTopicCheckWaitsOutTransientFailures(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name string
		// answer is the fault for the n-th Metadata request naming the DLQ
		// (n from 1); handled false passes it to the broker.
		answer func(n int, req *kmsg.MetadataRequest) (kmsg.Response, error, bool)
	}{
		{"connection dropped twice", func(n int, _ *kmsg.MetadataRequest) (kmsg.Response, error, bool) {
			if n <= 2 {
				return nil, errors.New("injected: connection dropped"), true
			}
			return nil, nil, false
		}},
		{"topic missing in two answers", func(n int, req *kmsg.MetadataRequest) (kmsg.Response, error, bool) {
			if n <= topicCheckMisses-1 {
				return missingTopicMetadata(req), nil, true
			}
			return nil, nil, false
		}},
		// A topic created a moment ago: on a loaded machine Kafka 4.4
		// answered without it for over a second (three answers: 0.75 s).
		{"topic missing for 3 s of answers", func() func(n int, req *kmsg.MetadataRequest) (kmsg.Response, error, bool) {
			var first time.Time
			return func(n int, req *kmsg.MetadataRequest) (kmsg.Response, error, bool) {
				if n == 1 {
					first = time.Now()
				}
				if time.Since(first) < 3*time.Second {
					return missingTopicMetadata(req), nil, true
				}
				return nil, nil, false
			}
		}()},
		{"leader not available", func(n int, req *kmsg.MetadataRequest) (kmsg.Response, error, bool) {
			if n <= 2 {
				resp := missingTopicMetadata(req)
				for i := range resp.Topics {
					resp.Topics[i].ErrorCode = kerr.LeaderNotAvailable.Code
				}
				return resp, nil, true
			}
			return nil, nil, false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, addrs := testClusterC(t, map[string]int32{"in": 2})
			var mu sync.Mutex
			n := 0
			c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				r := req.(*kmsg.MetadataRequest)
				if !asksFor(r, "g.dlq") {
					return nil, nil, false
				}
				mu.Lock()
				n++
				k := n
				mu.Unlock()
				return tc.answer(k, r)
			})
			produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("x")})
			handled := make(chan struct{}, 1)
			p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error {
				select {
				case handled <- struct{}{}:
				default:
				}
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			errc := runErr(p, context.Background())
			select {
			case <-handled:
			case err := <-errc:
				t.Fatalf("Run stopped at start: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("no record handled within 30 s")
			}
			mu.Lock()
			asked := n
			mu.Unlock()
			if asked < 3 {
				t.Fatalf("the DLQ was asked about %d times, want the faulty answers and one more", asked)
			}
		})
	}
}

// A topic that stays missing is still an error, after topicCheckMisses
// answers over topicCheckSpan, and a definitive error (an authorization
// failure) is not retried.
func TestTopicCheckStillFailsOnDefinitiveAnswers(t *testing.T) {
	parallel(t)
	c, addrs := testkafka.Fake(t, map[string]int32{"in": 2})
	var mu sync.Mutex
	asked := 0
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.MetadataRequest)
		if asksFor(r, "g.dlq") {
			mu.Lock()
			asked++
			mu.Unlock()
		}
		return nil, nil, false
	})
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = waitErr(t, runErr(p, context.Background()), 30*time.Second)
	if !errors.Is(err, ErrMissingTopic) {
		t.Fatalf("Run: %v, want a *MissingTopicError", err)
	}
	if took := time.Since(start); took < 5*time.Second {
		t.Errorf("called missing after %v, want at least 5s of answers", took)
	}
	mu.Lock()
	if asked < topicCheckMisses || asked > 8 {
		t.Errorf("asked %d times, want %d to 8 (a backoff over 5s)", asked, topicCheckMisses)
	}
	mu.Unlock()

	c2, addrs2 := testkafka.Fake(t, map[string]int32{"in": 2, "g.dlq": 2})
	denied := 0
	c2.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c2.KeepControl()
		r := req.(*kmsg.MetadataRequest)
		if !asksFor(r, "g.dlq") {
			return nil, nil, false
		}
		mu.Lock()
		denied++
		mu.Unlock()
		resp := missingTopicMetadata(r)
		for i := range resp.Topics {
			resp.Topics[i].ErrorCode = kerr.TopicAuthorizationFailed.Code
		}
		return resp, nil, true
	})
	p2, err := New(Brokers(addrs2...), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	err = waitErr(t, runErr(p2, context.Background()), 30*time.Second)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("Run: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if denied != 1 {
		t.Errorf("a denied topic was asked about %d times, want 1 (not retried)", denied)
	}
}
