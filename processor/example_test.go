package processor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
)

// A group member that handles every record of a topic. The embedded kfake
// broker stands in for Kafka; with a real cluster only Brokers changes.
func ExampleNew() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "greetings", "greeter.dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, v := range []string{"hello", "bonjour", "hallo"} {
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "greetings", Value: []byte(v)}).FirstErr(); err != nil {
			panic(err)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	handled := 0
	p, err := processor.New(
		processor.Brokers(brokers...),
		processor.Group("greeter"),
		processor.Topics("greetings"),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			// One partition, OrderPartition (the default): one record at a
			// time, in offset order.
			fmt.Printf("%s[%d]@%d: %s\n", r.Topic, r.Partition, r.Offset, r.Value)
			if handled++; handled == 3 {
				stop()
			}
			return nil
		}),
	)
	if err != nil {
		panic(err)
	}
	// Run returns once ctx is cancelled and the completed offsets are
	// committed.
	if err := p.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// greetings[0]@0: hello
	// greetings[0]@1: bonjour
	// greetings[0]@2: hallo
}

// Exactly-once consume-transform-produce: each input's output and the
// input's offset commit in one Kafka transaction, so a read_committed reader
// of the output sees every output exactly once, even across crashes and
// rebalances.
func ExampleNewTransactional() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "shouted", "shouter.dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, v := range []string{"kafka", "exactly", "once"} {
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "words", Value: []byte(v)}).FirstErr(); err != nil {
			panic(err)
		}
	}

	shout := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: "shouted", Key: r.Value, Value: []byte(strings.ToUpper(string(r.Value)) + "!")}}, nil
	}
	// The transactional id must be unique per member and stable across its
	// restarts: a restarted member then fences its predecessor.
	t, err := processor.NewTransactional("shouter-1", shout,
		processor.Brokers(brokers...), processor.Group("shouter"), processor.Topics("words"))
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- t.Run(ctx) }()

	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("shouted"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		panic(err)
	}
	defer reader.Close()
	for n := 0; n < 3; {
		reader.PollFetches(context.Background()).EachRecord(func(r *kgo.Record) {
			fmt.Printf("%s -> %s\n", r.Key, r.Value)
			n++
		})
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// kafka -> KAFKA!
	// exactly -> EXACTLY!
	// once -> ONCE!
}

// Retry topics and the dead-letter topic: a transient failure is retried in
// place (MaxAttempts), then from the group's retry topic after its delay,
// without holding up the partition; a permanent failure goes straight to the
// group's DLQ, with headers saying where it came from and why.
func ExampleRetryTopics() {
	const group = "billing"
	retry, dlq := processor.RetryTopicNames(group, 1)[0], processor.DLQTopic(group)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "invoices", retry, dlq))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, v := range []string{"invoice-1", "invoice-2 (flaky)", "invoice-3 (corrupt)"} {
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "invoices", Value: []byte(v)}).FirstErr(); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	attempts := map[string]int{}
	done := make(chan string, 3)
	p, err := processor.New(
		processor.Brokers(brokers...), processor.Group(group), processor.Topics("invoices"),
		processor.MaxAttempts(2), processor.Backoff(time.Millisecond, 10*time.Millisecond),
		processor.RetryTopics(100*time.Millisecond), // then the DLQ
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			v := string(r.Value)
			mu.Lock()
			defer mu.Unlock()
			attempts[v]++
			switch {
			case strings.Contains(v, "corrupt"):
				return processor.Permanent(errors.New("cannot parse the invoice"))
			case strings.Contains(v, "flaky") && attempts[v] <= 2: // both in-place attempts fail
				return errors.New("payment service unavailable")
			}
			done <- fmt.Sprintf("%s: done after %d attempt(s)", v, attempts[v])
			return nil
		}),
	)
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()

	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(dlq))
	if err != nil {
		panic(err)
	}
	defer reader.Close()
	var dead *kgo.Record
	for dead == nil {
		reader.PollFetches(context.Background()).EachRecord(func(r *kgo.Record) { dead = r })
	}
	headers := map[string]string{}
	for _, h := range dead.Headers {
		headers[h.Key] = string(h.Value)
	}
	fmt.Printf("%s: %s in the DLQ: %s error %q\n", dead.Value, dlq,
		headers[processor.HeaderErrorClass], headers[processor.HeaderErrorMessage])

	fmt.Println(<-done)
	fmt.Println(<-done)
	stop()
	if err := <-ran; err != nil {
		panic(err)
	}
	// Output:
	// invoice-3 (corrupt): billing.dlq in the DLQ: permanent error "permanent: cannot parse the invoice"
	// invoice-1: done after 1 attempt(s)
	// invoice-2 (flaky): done after 3 attempt(s)
}
