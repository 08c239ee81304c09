package processor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// deadCall is one OnDeadLetter call and what the cluster showed during it.
type deadCall struct {
	topic     string
	offset    int64
	permanent bool
	dlqEnd    int64 // the DLQ's high watermark during the call
	committed int64 // the group's committed offset of "in" partition 0
}

func recordDead(t *testing.T, addrs []string, mu *sync.Mutex, calls *[]deadCall) func(*kgo.Record, error) {
	return func(r *kgo.Record, reason error) {
		ends, err := adminFor(t, addrs).ListEndOffsets(context.Background(), "g.dlq")
		end, _ := ends.Lookup("g.dlq", 0)
		if err != nil {
			t.Errorf("end offsets: %v", err)
		}
		c := deadCall{topic: r.Topic, offset: r.Offset, permanent: IsPermanent(reason), dlqEnd: end.Offset}
		c.committed = committed(t, addrs, "g", "in")[0]
		mu.Lock()
		*calls = append(*calls, c)
		mu.Unlock()
	}
}

// OnDeadLetter is called once per dead-lettered record, with the record and
// the reason. New: after the DLQ write was acknowledged and before the
// record's offset is committed. NewTransactional: after the transaction
// holding the DLQ write committed (its offset committed with it).
func TestOnDeadLetter(t *testing.T) {
	for _, mode := range []string{"plain", "transactional"} {
		t.Run(mode, func(t *testing.T) {
			addrs := testCluster(t, map[string]int32{"in": 1})
			var mu sync.Mutex
			var calls []deadCall
			var logs syncBuffer
			bad := func(r *kgo.Record) bool { return string(r.Value) == "bad" }
			common := []Opt{Brokers(addrs...), Group("g"), Topics("in"), MaxAttempts(2), Backoff(time.Millisecond, time.Millisecond),
				CommitInterval(20 * time.Millisecond), OnDeadLetter(recordDead(t, addrs, &mu, &calls)),
				Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))}
			var r testkafka.Runner
			if mode == "plain" {
				p, err := New(append(common, WithHandler(func(_ context.Context, r *kgo.Record) error {
					if bad(r) {
						return context.DeadlineExceeded // transient: retried, then dead-lettered
					}
					return nil
				}))...)
				if err != nil {
					t.Fatal(err)
				}
				r = p
			} else {
				tp, err := NewTransactional("txn-cb", func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					if bad(r) {
						return nil, Permanentf("bad")
					}
					return nil, nil
				}, mustTxnOpts(t, common)...)
				if err != nil {
					t.Fatal(err)
				}
				r = tp
			}
			stop := testkafka.Run(t, r)
			defer stop()
			testkafka.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte("ok")}, &kgo.Record{Topic: "in", Value: []byte("bad")},
				&kgo.Record{Topic: "in", Value: []byte("ok")})
			waitFor(t, 30*time.Second, "offset 3 committed", func() bool { return committed(t, addrs, "g", "in")[0] == 3 })
			stop()
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != 1 {
				t.Fatalf("OnDeadLetter called %d times, want 1: %+v", len(calls), calls)
			}
			c := calls[0]
			if c.topic != "in" || c.offset != 1 || c.permanent != (mode != "plain") || c.dlqEnd < 1 {
				t.Fatalf("call %+v: want in@1, permanent=%v, the DLQ record written", c, mode != "plain")
			}
			if mode == "plain" && c.committed > 1 {
				t.Fatalf("committed %d before OnDeadLetter returned, want <= 1", c.committed)
			}
			if mode != "plain" && c.committed < 2 {
				t.Fatalf("committed %d when OnDeadLetter ran, want >= 2 (after the transaction)", c.committed)
			}
			// One log line names the record and the DLQ record written.
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `msg="record dead-lettered"`) {
					if line != "" {
						t.Fatalf("two dead-letter log lines:\n%s", logs.String())
					}
					line = l
				}
			}
			for _, want := range []string{"group=g", "topic=in", "partition=0", "offset=1", "dlq_topic=g.dlq", "dlq_partition=0", "dlq_offset="} {
				if !strings.Contains(line, want) {
					t.Errorf("dead-letter log line %q lacks %s", line, want)
				}
			}
		})
	}
}
