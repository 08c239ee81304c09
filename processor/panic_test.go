package processor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestPanicStackInDeadLetterEveryMode: a handler panic is a *PanicError in
// every mode (per-record, batch, exactly-once, queue): its DLQ record (a
// batch falls back to one record at a time, so the record's own call)
// carries "handler panic: <value>" in HeaderErrorMessage and the goroutine
// stack in HeaderErrorStack, never the stack in the message.
func TestPanicStackInDeadLetterEveryMode(t *testing.T) {
	boom := func(v []byte) {
		if string(v) == "poison" {
			panic("boom")
		}
	}
	for _, c := range []struct {
		name, msg string
		start     func(t *testing.T, addrs []string) testkafka.Runner
	}{
		{"record", "handler panic: boom", func(t *testing.T, addrs []string) testkafka.Runner {
			return mustNew(t, Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(1),
				WithHandler(func(_ context.Context, r *kgo.Record) error { boom(r.Value); return nil }))
		}},
		{"batch", "handler panic: boom", func(t *testing.T, addrs []string) testkafka.Runner {
			return mustNew(t, Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(1),
				WithBatchHandler(func(_ context.Context, recs []*kgo.Record) error {
					for _, r := range recs {
						boom(r.Value)
					}
					return nil
				}))
		}},
		{"exactly-once", "handler panic: boom", func(t *testing.T, addrs []string) testkafka.Runner {
			p, err := NewTransactional("tx", func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
				boom(r.Value)
				return nil, nil
			}, Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(1), CommitInterval(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"queue", "handler panic: boom", func(t *testing.T, addrs []string) testkafka.Runner {
			p, err := NewQueue(Brokers(addrs...), Group("g"), Topics("in"), MaxDeliveries(1),
				WithHandler(func(_ context.Context, r *kgo.Record) error { boom(r.Value); return nil }))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parallel(t)
			addrs := testCluster(t, map[string]int32{"in": 1})
			testkafka.Run(t, c.start(t, addrs))
			produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("fine")}, &kgo.Record{Topic: "in", Value: []byte("poison")})
			dlq := readAll(t, addrs, "g.dlq", 1, 30*time.Second)
			if len(dlq) != 1 || string(dlq[0].Value) != "poison" {
				t.Fatalf("DLQ holds %d records, want the poison alone", len(dlq))
			}
			hs := headerMap(dlq[0])
			if got := hs[HeaderErrorMessage]; got != c.msg {
				t.Errorf("%s = %q, want %q", HeaderErrorMessage, got, c.msg)
			}
			if st := hs[HeaderErrorStack]; !strings.HasPrefix(st, "goroutine ") || !strings.Contains(st, "panic") {
				t.Errorf("%s = %.200q, want the panicking goroutine's stack", HeaderErrorStack, st)
			}
		})
	}
}

func mustNew(t *testing.T, opts ...Opt) *Processor {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
