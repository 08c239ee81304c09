package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// The README's example of the runtime in one's own service is the function
// billing below, word for word: keep the two the same.

type invoice struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// charge stands for the call to a payment provider; an error it returns is retried.
func charge(_ context.Context, inv invoice) error {
	fmt.Printf("charged %s %d cents\n", inv.Customer, inv.Cents)
	return nil
}

// billing consumes invoices until ctx ends (SIGTERM, in a service).
func billing(ctx context.Context, brokers ...string) error {
	p, err := processor.New(
		processor.Brokers(brokers...),
		processor.Group("billing"),
		processor.Topics("invoices"),
		processor.WithOrdering(processor.OrderKey),         // one invoice of a customer (the key) at a time
		processor.RetryTopics(10*time.Second, time.Minute), // billing.retry.1, billing.retry.2, then billing.dlq
		processor.CreateTopics(true),                       // create those three if missing
		processor.WithHandler(func(ctx context.Context, r *kgo.Record) error {
			var inv invoice
			if err := json.Unmarshal(r.Value, &inv); err != nil {
				return processor.Permanent(err) // no retry can help: straight to billing.dlq
			}
			return charge(ctx, inv) // an error is retried in place, then from the retry topics
		}),
	)
	if err != nil {
		return err
	}
	return p.Run(ctx) // nil once ctx ends: the records in flight finished and were committed
}

// The README's service on the embedded broker: two invoices charged, one
// that cannot be decoded dead-lettered, and a clean stop once all three are
// committed.
func ExampleNew() {
	kc, err := processortest.Start(map[string]int32{"invoices": 1})
	must(err)
	defer kc.Close()
	bg := context.Background()
	for _, v := range []string{`{"customer":"17850","cents":1770}`, `not json`, `{"customer":"17850","cents":500}`} {
		must(kc.Produce(bg, &kgo.Record{Topic: "invoices", Key: []byte("17850"), Value: []byte(v)}))
	}

	ctx, sigterm := context.WithCancel(bg) // in a service: signal.NotifyContext(bg, syscall.SIGTERM, os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- billing(ctx, kc.Brokers()...) }()

	wait, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	must(kc.WaitCommitted(wait, "billing", "invoices", 3))
	dead, err := kc.Consume(wait, "billing.dlq", 1)
	must(err)
	fmt.Printf("billing.dlq holds %q\n", dead[0].Value)
	sigterm()
	fmt.Println("stopped:", <-done)
	// Output:
	// charged 17850 1770 cents
	// charged 17850 500 cents
	// billing.dlq holds "not json"
	// stopped: <nil>
}
