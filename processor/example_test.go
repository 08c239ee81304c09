package processor_test

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// must panics on err: the examples' error handling.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// A group member that handles every record of a topic, in key order, and
// stops on SIGTERM: Run returns once the context ends, after the records in
// flight finished and what completed was committed. The embedded broker
// (package processortest) stands in for Kafka; with a real cluster only
// Brokers changes.
func Example() {
	kc, err := processortest.Start(map[string]int32{"greetings": 1, "greeter.dlq": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"hello", "bonjour", "hallo"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "greetings", Key: []byte("en"), Value: []byte(v)}))
	}

	// In a service: ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt).
	// Here the parent is cancelled by the handler after three records, as
	// a SIGTERM would.
	parent, sigterm := context.WithCancel(context.Background())
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM)
	defer stop()
	handled := 0
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...),
		processor.Group("greeter"),
		processor.Topics("greetings"),
		processor.WithOrdering(processor.OrderKey), // records of one key one at a time, in offset order
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			fmt.Printf("%s[%d]@%d %s: %s\n", r.Topic, r.Partition, r.Offset, r.Key, r.Value)
			if handled++; handled == 3 {
				sigterm()
			}
			return nil
		}),
	)
	must(err)
	must(p.Run(ctx)) // nil after a shutdown by ctx
	offs, err := kc.Committed(context.Background(), "greeter", "greetings")
	must(err)
	fmt.Println("committed:", offs[0])
	// Output:
	// greetings[0]@0 en: hello
	// greetings[0]@1 en: bonjour
	// greetings[0]@2 en: hallo
	// committed: 3
}

// A permanent error sends the record to the DLQ at once (a transient one
// after MaxAttempts); OnDeadLetter is called once it is written, and the
// partition goes on. CreateTopics(true) creates the missing DLQ at start,
// with the source topic's partitions.
func ExampleOnDeadLetter() {
	kc, err := processortest.Start(map[string]int32{"invoices": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"invoice-1", "invoice-2 (corrupt)", "invoice-3"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "invoices", Value: []byte(v)}))
	}

	ctx, stop := context.WithCancel(context.Background())
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group("billing"), processor.Topics("invoices"),
		processor.CreateTopics(true),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if strings.Contains(string(r.Value), "corrupt") {
				return processor.Permanentf("cannot parse %q", r.Value)
			}
			fmt.Printf("billed %s\n", r.Value)
			if string(r.Value) == "invoice-3" {
				stop()
			}
			return nil
		}),
		processor.OnDeadLetter(func(r *kgo.Record, reason error) {
			fmt.Printf("dead-lettered %s@%d (%s): %v\n", r.Topic, r.Offset, processor.ErrorClass(reason), reason)
		}),
	)
	must(err)
	must(p.Run(ctx))

	dead, err := kc.Consume(context.Background(), processor.DLQTopic("billing"), 1)
	must(err)
	headers := map[string]string{}
	for _, h := range dead[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	fmt.Printf("%s holds %s from %s@%s\n", dead[0].Topic, dead[0].Value,
		headers[processor.HeaderOriginalTopic], headers[processor.HeaderOriginalOffset])
	// Output:
	// billed invoice-1
	// dead-lettered invoices@1 (permanent): permanent: cannot parse "invoice-2 (corrupt)"
	// billed invoice-3
	// billing.dlq holds invoice-2 (corrupt) from invoices@1
}

// Retry topics and the dead-letter topic: a transient failure is retried in
// place (MaxAttempts), then from the group's retry topic after its delay,
// without holding up the partition; a permanent failure goes straight to the
// group's DLQ, with headers saying where it came from and why.
func ExampleRetryTopics() {
	const group = "billing"
	retry, dlq := processor.RetryTopicNames(group, 1)[0], processor.DLQTopic(group)
	kc, err := processortest.Start(map[string]int32{"invoices": 1, retry: 1, dlq: 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"invoice-1", "invoice-2 (flaky)", "invoice-3 (corrupt)"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "invoices", Value: []byte(v)}))
	}

	var mu sync.Mutex
	attempts := map[string]int{}
	done := make(chan string, 3)
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group(group), processor.Topics("invoices"),
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
	must(err)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()

	dead, err := kc.Consume(context.Background(), dlq, 1)
	must(err)
	headers := map[string]string{}
	for _, h := range dead[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	fmt.Printf("%s: %s in the DLQ: %s error %q\n", dead[0].Value, dlq,
		headers[processor.HeaderErrorClass], headers[processor.HeaderErrorMessage])

	fmt.Println(<-done)
	fmt.Println(<-done)
	stop()
	must(<-ran)
	// Output:
	// invoice-3 (corrupt): billing.dlq in the DLQ: permanent error "permanent: cannot parse the invoice"
	// invoice-1: done after 1 attempt(s)
	// invoice-2 (flaky): done after 3 attempt(s)
}

// The runtime's Prometheus metrics: one Metrics per process (and registry),
// given to every processor. Serve reg with promhttp.HandlerFor in a service.
// Per-partition gauges (committed_offset, lag) are removed when the member
// releases the partition, so after Run only the counters remain.
func ExampleNewMetrics() {
	kc, err := processortest.Start(map[string]int32{"events": 1, "audit.dlq": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"a", "b", "bad", "c"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "events", Value: []byte(v)}))
	}

	reg := prometheus.NewRegistry()
	metrics, err := processor.NewMetrics(reg) // names start with processor.DefaultMetricsNamespace
	must(err)
	ctx, stop := context.WithCancel(context.Background())
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group("audit"), processor.Topics("events"),
		processor.WithMetrics(metrics),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if string(r.Value) == "bad" {
				return processor.Permanentf("rejected")
			}
			if string(r.Value) == "c" {
				stop()
			}
			return nil
		}),
	)
	must(err)
	must(p.Run(ctx))

	families, err := reg.Gather()
	must(err)
	for _, f := range families {
		switch name := f.GetName(); name {
		case "ordercast_consumer_records_consumed_total", "ordercast_consumer_records_processed_total", "ordercast_consumer_records_dead_lettered_total":
			for _, m := range f.GetMetric() {
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				fmt.Printf("%s %v\n", name, v)
			}
		}
	}
	// Output:
	// ordercast_consumer_records_consumed_total 4
	// ordercast_consumer_records_dead_lettered_total 1
	// ordercast_consumer_records_processed_total 3
}

// Exactly-once consume-transform-produce: each input's output and the
// input's offset commit in one Kafka transaction, so a read_committed reader
// of the output sees every output exactly once, even across crashes and
// rebalances. A record the handler rejects goes to the DLQ in the same
// transaction.
func ExampleNewTransactional() {
	kc, err := processortest.Start(map[string]int32{"words": 1, "shouted": 1, "shouter.dlq": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"kafka", "exactly", "", "once"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "words", Value: []byte(v)}))
	}

	shout := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if len(r.Value) == 0 {
			return nil, processor.Permanentf("nothing to shout")
		}
		return []*kgo.Record{{Topic: "shouted", Key: r.Value, Value: []byte(strings.ToUpper(string(r.Value)) + "!")}}, nil
	}
	// The transactional id must be unique per member and stable across its
	// restarts: a restarted member then fences its predecessor.
	t, err := processor.NewTransactional("shouter-1", shout,
		processor.Brokers(kc.Brokers()...), processor.Group("shouter"), processor.Topics("words"))
	must(err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- t.Run(ctx) }()

	out, err := kc.Consume(context.Background(), "shouted", 3) // read_committed
	must(err)
	for _, r := range out {
		fmt.Printf("%s -> %s\n", r.Key, r.Value)
	}
	dead, err := kc.Consume(context.Background(), "shouter.dlq", 1)
	must(err)
	fmt.Printf("dead-lettered offset %d\n", dead[0].Offset)
	stop()
	must(<-done)
	// Output:
	// kafka -> KAFKA!
	// exactly -> EXACTLY!
	// once -> ONCE!
	// dead-lettered offset 0
}
