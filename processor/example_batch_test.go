package processor_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/processortest"
)

// A batch handler that applies what it can and names the records that
// failed: the others complete, a failed record goes the way a Handler's
// error goes (here, a permanent one, to the DLQ), and the records behind it
// of its key are handled again after it.
func ExampleFailRecords() {
	kc, err := processortest.Start(map[string]int32{"transfers": 1})
	must(err)
	defer kc.Close()
	for _, v := range []string{"alice:+10", "bob:-999 (overdraft)", "carol:+5"} {
		k, _, _ := strings.Cut(v, ":")
		must(kc.Produce(context.Background(), &kgo.Record{Topic: "transfers", Key: []byte(k), Value: []byte(v)}))
	}

	ctx, stop := context.WithCancel(context.Background())
	applied := 0
	p, err := processor.New(
		processor.Brokers(kc.Brokers()...), processor.Group("ledger"), processor.Topics("transfers"),
		processor.CreateTopics(true), processor.WithOrdering(processor.OrderKey), processor.Concurrency(1),
		processor.WithBatchHandler(func(_ context.Context, recs []*kgo.Record) error {
			failed := map[int]error{}
			for i, r := range recs { // in one database transaction, in a service
				if strings.Contains(string(r.Value), "overdraft") {
					failed[i] = processor.Permanentf("refused: %s", r.Value)
					continue
				}
				applied++
			}
			if applied == 2 {
				stop()
			}
			if len(failed) > 0 {
				return processor.FailRecords(failed)
			}
			return nil
		}),
		processor.OnDeadLetter(func(r *kgo.Record, reason error) { fmt.Printf("dead-lettered %s: %v\n", r.Value, reason) }),
	)
	must(err)
	must(p.Run(ctx))
	fmt.Println("applied", applied)
	// Output:
	// dead-lettered bob:-999 (overdraft): permanent: refused: bob:-999 (overdraft)
	// applied 2
}
