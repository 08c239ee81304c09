package processor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// Each topic its own handler: HandleTopic for the topics that have one,
// WithHandler for the rest. New refuses a topic left without a handler.
func ExampleHandleTopic() {
	kc, err := processortest.Start(map[string]int32{"orders": 1, "refunds": 1, "audit": 1, "shop.dlq": 1})
	must(err)
	defer kc.Close()
	for _, r := range []*kgo.Record{
		{Topic: "orders", Value: []byte("order 1")},
		{Topic: "refunds", Value: []byte("refund 1")},
		{Topic: "audit", Value: []byte("login")},
	} {
		must(kc.Produce(context.Background(), r))
	}

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var lines []string
	note := func(who string) processor.Handler {
		return func(_ context.Context, r *kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, fmt.Sprintf("%s: %s", who, r.Value))
			if len(lines) == 3 {
				stop()
			}
			return nil
		}
	}
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group("shop"), processor.Topics("orders", "refunds", "audit"),
		processor.HandleTopic("orders", note("orders handler")),
		processor.HandleTopic("refunds", note("refunds handler")),
		processor.WithHandler(note("the other topics' handler")),
	)
	must(err)
	must(p.Run(ctx))
	slices.Sort(lines) // the topics are handled in parallel
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// orders handler: order 1
	// refunds handler: refund 1
	// the other topics' handler: login
}

// Pause stops the handling of a partition (here from its own handler, as a
// service would when a downstream system asks it to wait) until Resume; the
// records after it wait, the other partitions go on.
func ExampleProcessor_Pause() {
	kc, err := processortest.Start(map[string]int32{"jobs": 1, "worker.dlq": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"a", "wait", "b", "c"} {
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "jobs", Value: []byte(v)}))
	}

	ctx, stop := context.WithCancel(context.Background())
	paused := make(chan struct{})
	var p *processor.Processor
	p, err = processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group("worker"), processor.Topics("jobs"),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			fmt.Println("handled", string(r.Value))
			switch string(r.Value) {
			case "wait":
				must(p.Pause(r.Topic, r.Partition))
				close(paused)
			case "c":
				stop()
			}
			return nil
		}),
	)
	must(err)
	go func() {
		<-paused
		fmt.Println("paused:", p.Health().PausedPartitions)
		must(p.Resume("jobs", 0))
	}()
	must(p.Run(ctx))
	// Output:
	// handled a
	// handled wait
	// paused: [jobs[0]]
	// handled b
	// handled c
}
