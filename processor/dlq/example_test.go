package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/dlq"
	"github.com/ordercast/ordercast/processor/processortest"
)

// must panics on err: the example's error handling.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// A handler rejects an invoice, which the processor dead-letters; the DLQ
// tools list it and show its value; once the handler is fixed, Replay writes
// it back to its topic, the group handles it once, and a second Replay is
// refused (the state topic marks it replayed). The embedded broker (package
// processortest) stands in for Kafka; with a real cluster only the brokers
// change.
func Example() {
	ctx := context.Background()
	kc, err := processortest.Start(map[string]int32{"invoices": 1, processor.DLQTopic("billing"): 1})
	must(err)
	defer kc.Close()
	must(kc.Produce(ctx, &kgo.Record{Topic: "invoices", Key: []byte("inv-2"), Value: []byte(`{"invoice":2,"total":-5}`)}))

	// The first handler refuses negative totals: a permanent error, so the
	// record goes to billing.dlq at once.
	run := func(handle processor.Handler) {
		rctx, stop := context.WithCancel(ctx)
		p, err := processor.New(
			processor.Brokers(kc.Brokers()...), processor.Group("billing"), processor.Topics("invoices"),
			processor.WithHandler(func(ctx context.Context, r *kgo.Record) error {
				err := handle(ctx, r)
				if err == nil {
					stop() // one record handled: stop, committing it
				}
				return err
			}),
			processor.OnDeadLetter(func(r *kgo.Record, reason error) {
				fmt.Printf("dead-lettered %s@%d: %v\n", r.Topic, r.Offset, reason)
				stop()
			}),
		)
		must(err)
		must(p.Run(rctx))
	}
	run(func(_ context.Context, r *kgo.Record) error {
		if strings.Contains(string(r.Value), `"total":-`) {
			return processor.Permanentf("negative total")
		}
		return nil
	})

	d, err := dlq.New("billing", kgo.SeedBrokers(kc.Brokers()...))
	must(err)
	defer d.Close()
	l, err := d.List(ctx, dlq.Selection{}, 0)
	must(err)
	for _, r := range l.Records {
		fmt.Printf("%s: %s from %s/%d/%d, key %s\n", r.ID, r.ErrorClass, r.OriginalTopic, r.OriginalPartition, r.OriginalOffset, r.Key)
	}
	rec, err := d.Show(ctx, 0, 0)
	must(err)
	pl := rec.Decode(ctx, nil) // dlq.Bytes: JSON, text or a hex dump
	fmt.Printf("%s value: %s\n", pl.Format, strings.Join(strings.Fields(string(pl.Decoded)), " "))

	// The fixed handler accepts it; Replay writes it back to invoices.
	res, err := d.Replay(ctx, dlq.ReplayOptions{To: dlq.TargetSource})
	must(err)
	fmt.Printf("replayed %s to %s\n", res.Replayed[0].From, res.Replayed[0].To)
	handled := 0
	run(func(_ context.Context, r *kgo.Record) error {
		handled++
		for _, h := range r.Headers {
			if h.Key == processor.HeaderReplayed {
				fmt.Printf("billed %s (a replay of %s)\n", r.Key, h.Value)
			}
		}
		return nil
	})

	_, err = d.Replay(ctx, dlq.ReplayOptions{})
	fmt.Println("replay again:", errors.Is(err, dlq.ErrAlreadyReplayed))
	fmt.Println("handled:", handled)
	// Output:
	// dead-lettered invoices@0: permanent: negative total
	// billing.dlq/0/0: permanent from invoices/0/0, key inv-2
	// json value: { "invoice": 2, "total": -5 }
	// replayed billing.dlq/0/0 to invoices/0/1
	// billed inv-2 (a replay of billing.dlq/0/0)
	// replay again: true
	// handled: 1
}
