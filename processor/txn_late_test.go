package processor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// heldRequest is a request the network holds past the client's timeout and
// delivers late: the matched request sleeps in the cluster (the client times
// out, closes the connection and re-sends it on a new one, which the cluster
// answers normally) until release is closed; then the cluster applies the
// held copy, and its answer goes nowhere.
type heldRequest struct {
	key     kmsg.Key
	match   func(kmsg.Request) bool
	release chan struct{}

	mu      sync.Mutex
	state   int // 0 waiting, 1 holding, 2 delivered
	held    kmsg.Request
	applied error // the cluster's answer to the late copy
}

func (h *heldRequest) install(t *testing.T, c *kfake.Cluster, addrs []string) {
	t.Helper()
	c.ControlKey(int16(h.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		h.mu.Lock()
		state := h.state
		h.mu.Unlock()
		if state != 0 || !h.match(req) {
			if state == 2 {
				c.DropControl()
			}
			return nil, nil, false
		}
		h.mu.Lock()
		h.state, h.held = 1, req
		h.mu.Unlock()
		c.SleepControl(func() {
			<-h.release
			v := kversion.Stable()
			v.SetMaxKeyVersion(req.Key(), req.GetVersion())
			fwd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequestRetries(0), kgo.MaxVersions(v))
			var resp kmsg.Response
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err = fwd.Request(ctx, req)
				cancel()
				fwd.Close()
			}
			if err == nil {
				err = responseErr(resp)
			}
			h.mu.Lock()
			h.state, h.applied = 2, err
			h.mu.Unlock()
		})
		return nil, errLost, true
	})
}

func (h *heldRequest) holding() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == 1
}

func (h *heldRequest) delivered() (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == 2, h.applied
}

// TestTxnLateTxnOffsetCommit (S15, the exactly-once half): steady input on 2
// partitions, a transaction every 50ms. One TxnOffsetCommit is held by the
// network past the client's request timeout; the client re-sends it, the
// transaction and later ones commit; after the input stops and the group's
// offsets reached the end, the held copy is applied. The group's offsets
// must end at the end of the input without new input arriving, and every
// input has exactly one committed output.
//
// At KIP-890 part 2 the late copy carries the epoch of a transaction that
// ended (each EndTxn bumps it) and the broker refuses it (kfake:
// PRODUCER_FENCED; Kafka 4.x: the same, its coordinator checks the epoch).
// Below it (tv1), the epoch is not bumped per transaction; see the test's
// assertions for what kfake does then.
func TestTxnLateTxnOffsetCommit(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name  string
		tv1   bool
		inTxn bool // deliver it inside a later transaction, not between transactions
	}{{"kip890p2", false, false}, {"tv1", true, false}, {"kip890p2-in-txn", false, true}, {"tv1-in-txn", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, addrs := testClusterC(t, map[string]int32{"in": 2, "out": 2, "g.dlq": 1})
			held := &heldRequest{key: kmsg.TxnOffsetCommit, match: nth(5), release: make(chan struct{})}
			held.install(t, c, addrs)
			h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
				return []*kgo.Record{{Topic: "out", Partition: r.Partition, Key: r.Value, Value: r.Value}}, nil
			}
			opts := []kgo.Opt{kgo.RequestTimeoutOverhead(time.Second)}
			if tc.tv1 {
				opts = append(opts, tv1())
			}
			tp, err := NewTransactional("txn-late", h, Brokers(addrs...), Group("g"), Topics("in"),
				CommitInterval(50*time.Millisecond), MaxInFlight(50, 1<<20), Backoff(20*time.Millisecond, 100*time.Millisecond),
				TransactionTimeout(10*time.Second), ClientOpts(opts...))
			if err != nil {
				t.Fatal(err)
			}
			stop := testkafka.Run(t, tp)

			// Steady input until the commit is held and 2s more.
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			n := 0
			var heldSince time.Time
			for deadline := time.Now().Add(30 * time.Second); ; {
				if time.Now().After(deadline) {
					t.Fatal("no TxnOffsetCommit was held within 30s")
				}
				if heldSince.IsZero() && held.holding() {
					heldSince = time.Now()
				}
				if !heldSince.IsZero() && time.Since(heldSince) > 2*time.Second {
					break
				}
				if err := cl.ProduceSync(context.Background(),
					&kgo.Record{Topic: "in", Partition: 0, Value: val(n)},
					&kgo.Record{Topic: "in", Partition: 1, Value: val(n + 1)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				n += 2
				time.Sleep(5 * time.Millisecond) // pacing the input, not synchronising
			}
			ends := endOffsets(t, addrs, "in")
			waitFor(t, 30*time.Second, "committed offsets at the end of in before the late delivery", func() bool { return committedEquals(t, addrs, "g", ends) })
			if tc.inTxn {
				// Deliver the held copy inside the next transaction,
				// after its own TxnOffsetCommit and before its
				// EndTxn(commit): one last input on partition 0.
				c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
					if !req.(*kmsg.EndTxnRequest).Commit {
						c.KeepControl()
						return nil, nil, false
					}
					c.DropControl()
					c.SleepControl(func() {
						close(held.release)
						for ok, _ := held.delivered(); !ok; ok, _ = held.delivered() {
							time.Sleep(5 * time.Millisecond)
						}
					})
					return nil, nil, false
				})
				produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: val(n)})
				n++
				ends = endOffsets(t, addrs, "in")
			} else {
				close(held.release)
			}
			waitFor(t, 15*time.Second, "the held TxnOffsetCommit delivered", func() bool { ok, _ := held.delivered(); return ok })
			_, applied := held.delivered()
			t.Logf("the late TxnOffsetCommit was answered %v", applied)
			waitFor(t, 15*time.Second, "committed offsets back at the end of in without new input", func() bool { return committedEquals(t, addrs, "g", ends) })
			stop()
			out := readCommitted(t, addrs, "out", n+1, 3*time.Second)
			seen := map[string]int{}
			for _, r := range out {
				seen[string(r.Value)]++
			}
			for i := range n {
				if seen[string(val(i))] != 1 {
					t.Fatalf("input %s: %d committed outputs, want 1", val(i), seen[string(val(i))])
				}
			}
		})
	}
}
