package middleware_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/middleware"
	"github.com/ordercast/ordercast/processor/processortest"
)

// A handler written once for a typed value, with recovery and logging
// around it: a record that does not decode and one whose handler panics
// both go to the DLQ at once, the panic's stack in a header of its own.
func Example() {
	kc, err := processortest.Start(map[string]int32{"invoices": 1, "billing.dlq": 1})
	if err != nil {
		panic(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []string{`{"cents": 500}`, `not json`, `{"cents": -1}`} {
		if err := kc.Produce(ctx, &kgo.Record{Topic: "invoices", Value: []byte(v)}); err != nil {
			panic(err)
		}
	}

	// Log lines without times, so that the output below is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "duration" || a.Key == "error" {
			return slog.Attr{}
		}
		return a
	}}))
	handle := func(_ context.Context, _ *kgo.Record, inv invoice) error {
		if inv.Cents < 0 {
			panic("negative amount") // a bug: no retry helps
		}
		fmt.Println("charged", inv.Cents)
		return nil
	}
	// Log outermost, so that it logs what Recover made of a panic.
	h := middleware.Chain(middleware.Decode(middleware.JSON[invoice], handle), middleware.Log(logger), middleware.Recover())

	p, err := processor.New(processor.Brokers(kc.Brokers()...), processor.Group("billing"), processor.Topics("invoices"),
		processor.Concurrency(1), processor.WithHandler(h))
	if err != nil {
		panic(err)
	}
	stop := make(chan error, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	go func() { stop <- p.Run(runCtx) }()
	dead, err := kc.Consume(ctx, "billing.dlq", 2)
	stopRun()
	if err := <-stop; err != nil {
		panic(err)
	}
	if err != nil {
		panic(err)
	}
	for _, r := range dead {
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		fmt.Printf("dead-lettered %s: %s, stack in header: %v\n", r.Value, hs[processor.HeaderErrorClass],
			strings.Contains(hs[processor.HeaderErrorStack], "panic"))
	}
	// Output:
	// charged 500
	// level=WARN msg="handler failed" topic=invoices partition=0 offset=1 key="" error_class=permanent
	// level=WARN msg="handler failed" topic=invoices partition=0 offset=2 key="" error_class=permanent
	// dead-lettered not json: permanent, stack in header: false
	// dead-lettered {"cents": -1}: permanent, stack in header: true
}
