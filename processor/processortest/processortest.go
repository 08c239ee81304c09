// Package processortest runs an embedded Kafka broker for the tests of
// services built on package processor: franz-go's kfake, in process, with
// the topics a test asks for, and helpers to produce, consume and read a
// group's committed offsets. Nothing is dialled but the embedded broker;
// each Cluster is independent, so tests using one each may run in parallel.
//
//	func TestBilling(t *testing.T) {
//		kc := processortest.New(t, map[string]int32{"invoices": 3, "billing.dlq": 3})
//		p, err := processor.New(processor.Brokers(kc.Brokers()...), processor.Group("billing"), ...)
//		...
//		stop := processortest.Run(t, p)
//		defer stop()
//		kc.Produce(ctx, &kgo.Record{Topic: "invoices", Key: []byte("a"), Value: []byte("...")})
//		kc.WaitCommitted(ctx, "billing", "invoices", 1)
//	}
//
// kfake implements the Kafka protocol (groups, KIP-848 consumer groups,
// share groups for NewQueue (KIP-932, without the broker's share-group
// DLQ of KIP-1191), transactions, read_committed) but is not Kafka: for timing-sensitive
// behaviour, run the same tests against a real cluster too (pass its
// addresses instead of Brokers()).
package processortest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is an embedded one-broker Kafka cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	fake *kfake.Cluster
	cl   *kgo.Client // producer and admin client
	adm  *kadm.Client
}

// Start starts an embedded broker holding topics (name -> partitions,
// replication factor 1). opts are passed to kfake.NewCluster after the
// defaults (one broker, group.min.session.timeout.ms 100ms so tests may use
// short session timeouts). The caller must Close it.
func Start(topics map[string]int32, opts ...kfake.Opt) (*Cluster, error) {
	o := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	for name, n := range topics {
		o = append(o, kfake.SeedTopics(n, name))
	}
	fake, err := kfake.NewCluster(append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("processortest: start kfake: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		fake.Close()
		return nil, fmt.Errorf("processortest: client: %w", err)
	}
	return &Cluster{fake: fake, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// New is Start for a test: it fails t on error and closes the cluster when
// the test ends (t.Cleanup).
func New(t testing.TB, topics map[string]int32, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c, err := Start(topics, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Brokers returns the seed addresses ("127.0.0.1:port") to give to
// processor.Brokers or kgo.SeedBrokers.
func (c *Cluster) Brokers() []string { return c.fake.ListenAddrs() }

// Fake returns the kfake cluster, for its fault injection (ControlKey,
// KeepControl...).
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// CreateTopic creates a topic with the given partitions. It is an error if
// the topic exists.
func (c *Cluster) CreateTopic(ctx context.Context, name string, partitions int32) error {
	resp, err := c.adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("processortest: create %s: %w", name, err)
	}
	return nil
}

// Produce writes recs and waits until every one is acknowledged. Records go
// to partitions by franz-go's default partitioner (murmur2 of the key, as
// Kafka's Java client; records without a key stick to one partition per
// batch); Record.Partition is ignored. It returns the first error.
//
// Each record's Context is set to ctx first: franz-go keeps the context of
// the first Produce call in Record.Context and uses it in every later one,
// so a record produced again after that context ended would otherwise fail
// with "context canceled". As with franz-go, the records are modified
// (Partition, Offset, Timestamp) and must not be produced concurrently by
// two calls.
func (c *Cluster) Produce(ctx context.Context, recs ...*kgo.Record) error {
	for _, r := range recs {
		r.Context = ctx
	}
	if err := c.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("processortest: produce: %w", err)
	}
	return nil
}

// Consume reads topic from its start, read_committed (records of aborted
// or open transactions are not returned), until it has n records or ctx
// ends; it returns the records in the order fetched (offset order within a
// partition) and, when ctx ended first, the records read so far with
// ctx's error. It joins no group and commits nothing.
func (c *Cluster) Consume(ctx context.Context, topic string, n int) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("processortest: consumer: %w", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("processortest: %d of %d records of %s: %w", len(out), n, topic, err)
		}
		fs.EachError(func(_ string, _ int32, e error) {
			if err == nil && !errors.Is(e, kerr.UnknownTopicOrPartition) {
				err = e
			}
		})
		if err != nil {
			return out, fmt.Errorf("processortest: consume %s: %w", topic, err)
		}
		out = append(out, fs.Records()...)
	}
	return out, nil
}

// Committed returns the group's committed offsets of topic (partition ->
// the offset of the next record to consume); partitions without a commit
// are absent, and a group unknown to the broker has none.
func (c *Cluster) Committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := c.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil // no commit yet
	}
	if err != nil {
		return nil, fmt.Errorf("processortest: offsets of %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// WaitCommitted waits until the group's committed offsets of topic add up
// to at least n over its partitions (with every partition starting at 0:
// n records committed), polling every 10ms, or until ctx ends.
func (c *Cluster) WaitCommitted(ctx context.Context, group, topic string, n int64) error {
	for {
		offs, err := c.Committed(ctx, group, topic)
		var sum int64
		for _, o := range offs {
			sum += o
		}
		if err == nil && sum >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processortest: group %s committed %d of %d records of %s (last error %v): %w", group, sum, n, topic, err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close stops the broker and the cluster's client.
func (c *Cluster) Close() {
	c.cl.Close()
	c.fake.Close()
}

// Runner is anything with a blocking Run(ctx) that returns once ctx is
// cancelled: *processor.Processor and *processor.TxnProcessor.
type Runner interface {
	Run(ctx context.Context) error
}

// Run starts r.Run on a goroutine and returns stop, which cancels its
// context (as a SIGTERM handler would) and waits for Run to return, at most
// 30s; it fails t if Run returned an error or did not return. stop is
// idempotent and also runs when the test ends.
func Run(t testing.TB, r Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { wait(t, cancel, done) }) }
	t.Cleanup(stop)
	return stop
}

func wait(t testing.TB, cancel context.CancelFunc, done <-chan error) {
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("processortest: Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("processortest: Run did not return within 30s of its context's cancellation")
	}
}
