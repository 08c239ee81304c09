package processor

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnUnproducibleOutputs: an output that can never be produced (nil,
// no topic, a missing topic, a value over the producer's size limit)
// fails an attempt of its input, and after MaxAttempts the input is
// dead-lettered with the reason: the records around it commit their
// outputs, and the stage neither aborts for ever nor outlives its context
// at shutdown. nil and no topic are caught before producing (no
// transaction aborts); the others abort MaxAttempts transactions. The same
// with the outputs from a TxnBatchHandler.
func TestTxnUnproducibleOutputs(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		aborts       bool
		out          func() *kgo.Record
	}{
		{"nil", "output 1 of 1 is nil", false, func() *kgo.Record { return nil }},
		{"no topic", "output 1 of 1 has no Topic", false, func() *kgo.Record { return &kgo.Record{Value: []byte("x")} }},
		{"missing topic", `output to "nowhere" could not be produced`, true, func() *kgo.Record { return &kgo.Record{Topic: "nowhere", Value: []byte("x")} }},
		{"too large", `output to "out" could not be produced`, true, func() *kgo.Record { return &kgo.Record{Topic: "out", Value: bytes.Repeat([]byte("x"), 2<<20)} }},
	} {
		for _, batched := range []bool{false, true} {
			name := c.name
			if batched {
				name += " batched"
			}
			t.Run(name, func(t *testing.T) {
				parallel(t)
				addrs := testCluster(t, map[string]int32{"in": 1, "out": 1})
				h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					if string(r.Value) == "bad" {
						return []*kgo.Record{c.out()}, nil
					}
					return []*kgo.Record{{Topic: "out", Value: r.Value}}, nil
				}
				opts := []TxnOpt{Brokers(addrs...), Group("g"), Topics("in"), CommitInterval(20 * time.Millisecond), DrainTimeout(time.Second),
					MaxAttempts(2), Backoff(10*time.Millisecond, 20*time.Millisecond), ClientOpts(kgo.UnknownTopicRetries(1))}
				if batched {
					// The same outputs from a TxnBatchHandler: a batch with
					// an output that cannot be produced at all fails as a
					// whole (its records then run alone); one whose output
					// the broker refuses aborts, and its input runs alone
					// from then on, to the DLQ after MaxAttempts aborts.
					opts = append(opts, WithTxnBatchHandler(func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
						outs := make([][]*kgo.Record, len(recs))
						for i, r := range recs {
							outs[i], _ = h(ctx, r)
						}
						return outs, nil
					}))
				}
				tp, err := NewTransactional("tx-"+strings.ReplaceAll(name, " ", "-"), h, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- tp.Run(ctx) }()
				produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("ok1")}, &kgo.Record{Topic: "in", Value: []byte("bad")}, &kgo.Record{Topic: "in", Value: []byte("ok2")})
				dlq := readCommitted(t, addrs, "g.dlq", 1, 60*time.Second)
				if len(dlq) != 1 || string(dlq[0].Value) != "bad" {
					t.Fatalf("DLQ: %d records, want the bad input alone", len(dlq))
				}
				hs := headerMap(dlq[0])
				if !strings.Contains(hs[HeaderErrorMessage], c.reason) {
					t.Errorf("DLQ record: %s %q, want it to say %q", HeaderErrorMessage, hs[HeaderErrorMessage], c.reason)
				}
				out := readCommitted(t, addrs, "out", 2, 30*time.Second)
				if len(out) != 2 || string(out[0].Value) != "ok1" || string(out[1].Value) != "ok2" {
					t.Fatalf("out: %d records, want ok1 and ok2", len(out))
				}
				waitFor(t, 30*time.Second, "the inputs committed", func() bool { return committed(t, addrs, "g", "in")[0] == 3 })
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("Run: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Run did not return within 10 s of its context's end")
				}
				switch _, aborted := tp.Stats(); {
				case c.aborts && aborted < 2:
					t.Errorf("%d transactions aborted, want MaxAttempts (2) at least", aborted)
				case !c.aborts && aborted != 0:
					t.Errorf("%d transactions aborted, want none (caught before producing)", aborted)
				}
				if err := tp.Run(context.Background()); !errors.Is(err, ErrClosed) {
					t.Errorf("second Run: %v, want ErrClosed", err)
				}
			})
		}
	}
}

// TestTxnTransactionTimeoutOverBrokerMax: a TransactionTimeout the brokers
// refuse (over transaction.max.timeout.ms) ends Run with an error naming the
// option, instead of a session restarted for ever.
func TestTxnTransactionTimeoutOverBrokerMax(t *testing.T) {
	parallel(t)
	addrs := testCluster(t, map[string]int32{"in": 1})
	tp, err := NewTransactional("tx-tto", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
		Brokers(addrs...), Group("g"), Topics("in"), TransactionTimeout(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("a")})
	err = tp.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "TransactionTimeout 2h0m0s: refused by the brokers") {
		t.Fatalf("Run: %v, want the TransactionTimeout refusal", err)
	}
}
