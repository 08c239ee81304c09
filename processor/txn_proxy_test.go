package processor

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/faultproxy"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// logCounter is a slog.Handler that counts records by message, for tests
// that report which path the runtime took. Safe for concurrent use.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCounter) WithGroup(string) slog.Handler            { return l }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[r.Message]++
	return nil
}

// count returns how many records had a message starting with prefix.
func (l *logCounter) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for m, k := range l.n {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// nthOf matches the nth request (1-based) with API key k that the proxy
// reads while the fault is armed.
func nthOf(k kmsg.Key, n int) faultproxy.Match {
	var seen atomic.Int64
	return func(r faultproxy.Request) bool {
		return r.APIKey == int16(k) && seen.Add(1) == int64(n)
	}
}

// txnKeys are the API keys of the transaction protocol, for the path logs.
var txnKeys = []kmsg.Key{kmsg.InitProducerID, kmsg.Produce, kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn,
	kmsg.TxnOffsetCommit, kmsg.EndTxn, kmsg.OffsetFetch}

// seenTxn formats the proxy's request counts of txnKeys.
func seenTxn(p *faultproxy.Proxy) string {
	seen := p.SeenAll()
	var parts []string
	for _, k := range txnKeys {
		parts = append(parts, fmt.Sprintf("%s=%d", k.Name(), seen[int16(k)]))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// proxyRun is what runThroughProxy reports: the member, the proxy, its log
// counts.
type proxyRun struct {
	tp    *TxnProcessor
	proxy *faultproxy.Proxy
	fault *faultproxy.Fault
	logs  *logCounter
}

// runThroughProxy runs one exactly-once member over 4 partitions of n
// pre-produced inputs, ~50 records per transaction, every connection of its
// client through the fault proxy (request timeout overhead 2s, produce
// timeout 2s, transaction timeout 10s). arm is called with the proxy before
// Run (a fault matching a later request, e.g. nthOf) or from the handler
// (see TestTxnProxyLostResponses' abort case, which stores it in late); it
// returns the fault, which must match and complete. It then checks that the group's committed
// offsets end at the end of the input and that a read_committed reader sees
// every input's output exactly once, and logs the path the member took.
func runThroughProxy(t *testing.T, arm func(p *faultproxy.Proxy) *faultproxy.Fault, late *atomic.Pointer[faultproxy.Fault], h TxnHandler, clientOpts ...kgo.Opt) proxyRun {
	t.Helper()
	addrs := testkafka.Cluster(t, map[string]int32{"in": 4, "out": 4, "g.dlq": 1})
	const n = 1000
	produceSpread(t, addrs, "in", 4, n)
	ends := endOffsets(t, addrs, "in")
	proxy, dial := testkafka.Proxy(t)
	if h == nil {
		h = func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
			return []*kgo.Record{{Topic: "out", Partition: r.Partition, Key: r.Value, Value: r.Value}}, nil
		}
	}
	logs := &logCounter{}
	opts := append([]kgo.Opt{dial, kgo.RequestTimeoutOverhead(2 * time.Second), kgo.ProduceRequestTimeout(2 * time.Second),
		kgo.FetchMaxPartitionBytes(200)}, clientOpts...)
	tp, err := NewTransactional("txn-proxy", h, Brokers(addrs...), Group("g"), Topics("in"),
		CommitInterval(50*time.Millisecond), MaxInFlight(50, 1<<20), Backoff(20*time.Millisecond, 100*time.Millisecond),
		TransactionTimeout(10*time.Second), Logger(slog.New(logs)), ClientOpts(opts...))
	if err != nil {
		t.Fatal(err)
	}
	var f *faultproxy.Fault
	if arm != nil {
		f = arm(proxy)
	}
	start := time.Now()
	stop := testkafka.Run(t, tp)
	waitFor(t, 90*time.Second, "committed offsets at the end of in", func() bool { return committedEquals(t, addrs, "g", ends) })
	took := time.Since(start)
	if f == nil && late != nil {
		f = late.Load()
	}
	if f == nil {
		t.Fatal("no fault was armed")
	}
	select {
	case <-f.Matched():
	default:
		t.Fatal("the fault never matched a request")
	}
	select {
	case <-f.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the fault never happened (the held request was not delivered, the dropped response never came)")
	}
	req := f.Request()
	// A held copy may land after the offsets reached the end: they must
	// stay there (or come back) without new input.
	waitFor(t, 30*time.Second, "committed offsets at the end of in after the fault completed", func() bool { return committedEquals(t, addrs, "g", ends) })
	stop()
	checkExactlyOnce(t, addrs, "out", n)
	committed, aborted := tp.Stats()
	broker := "kfake"
	if testkafka.Real() {
		broker = "kafka"
	}
	t.Logf("%s: fault on %s v%d (client left: %v); %d inputs in %v; transactions committed=%d aborted=%d; "+
		"settled-as-committed=%d aborted-logs=%d session-restarts=%d stale-repairs=%d; requests: %s",
		broker, kmsg.Key(req.APIKey).Name(), req.Version, f.ClientLeft(), n, took.Round(time.Millisecond), committed, aborted,
		logs.count("transaction reported not committed, but the broker holds"), logs.count("transaction aborted"),
		logs.count("transactional session failed"), logs.count("the group's committed offset is behind"), seenTxn(proxy))
	return proxyRun{tp, proxy, f, logs}
}

// TestS16_UnknownOutcomeThroughProxy is S16 on either broker (Apache Kafka
// when ORDERCAST_TEST_BROKERS is set), with the network losing the response:
// the proxy forwards the member's third EndTxn(commit), the broker commits,
// and the proxy swallows the answer (and everything after it on that
// connection). The client times out after its 2s request timeout and
// re-sends the EndTxn on a new connection. Every input has exactly one
// read_committed output and the group's offsets end at the end of the input
// (lag 0).
//
// Which path each broker takes (logged): both kfake and Kafka 4.4 (TV2)
// answer the retried EndTxn(commit) as a success (the coordinator replays
// the completed commit for the producer's previous epoch), so End reports
// committed and the runtime goes on; InitProducerID is sent once. The path
// where the retry is answered with an error and End reports "not
// committed" (settle) is only reachable with a broker control:
// TestTxnUnknownOutcome.
func TestS16_UnknownOutcomeThroughProxy(t *testing.T) {
	parallel(t)
	r := runThroughProxy(t, func(p *faultproxy.Proxy) *faultproxy.Fault {
		return p.DropResponse(nthOf(kmsg.EndTxn, 3))
	}, nil, nil)
	if got := r.proxy.Seen(int16(kmsg.EndTxn)); got < 2 {
		t.Fatalf("EndTxn seen %d times", got)
	}
}

// TestTxnProxyLostResponses: the requests of the transaction protocol whose
// response a network can lose, on either broker through the fault proxy
// (the rows of docs/guarantees.md's exactly-once table a real broker can be driven into; the
// retry's answer is the broker's own). tv1 pins the client below KIP-890
// part 2 (EndTxn v4), so that it sends AddPartitionsToTxn and
// AddOffsetsToTxn: a TV2 client does not send them (the test checks it
// with the proxy's counters), on kfake and on Kafka 4.4 alike. Each case
// checks exactly-once output and the final offsets.
func TestTxnProxyLostResponses(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name  string
		key   kmsg.Key
		nth   int
		hold  time.Duration // > 0: hold the request this long (past the 2s timeout) and deliver it late
		abort bool          // the fault is on an EndTxn(abort): the 3rd transaction fails one output
		inTxn bool          // deliver the held request inside a later transaction (see below)
		tv1   bool
	}{
		{name: "txn-offset-commit", key: kmsg.TxnOffsetCommit, nth: 3},
		{name: "produce", key: kmsg.Produce, nth: 3},
		{name: "end-txn-abort", key: kmsg.EndTxn, abort: true},
		{name: "txn-offset-commit-held", key: kmsg.TxnOffsetCommit, nth: 5, hold: 6 * time.Second},
		{name: "tv1-end-txn-commit", key: kmsg.EndTxn, nth: 3, tv1: true},
		{name: "tv1-txn-offset-commit", key: kmsg.TxnOffsetCommit, nth: 3, tv1: true},
		{name: "tv1-produce", key: kmsg.Produce, nth: 3, tv1: true},
		{name: "tv1-add-partitions-to-txn", key: kmsg.AddPartitionsToTxn, nth: 3, tv1: true},
		{name: "tv1-add-offsets-to-txn", key: kmsg.AddOffsetsToTxn, nth: 3, tv1: true},
		{name: "tv1-end-txn-abort", key: kmsg.EndTxn, abort: true, tv1: true},
		{name: "tv1-txn-offset-commit-held", key: kmsg.TxnOffsetCommit, nth: 5, hold: 6 * time.Second, tv1: true},
		{name: "txn-offset-commit-held-in-txn", key: kmsg.TxnOffsetCommit, nth: 5, hold: 6 * time.Second, inTxn: true},
		{name: "tv1-txn-offset-commit-held-in-txn", key: kmsg.TxnOffsetCommit, nth: 5, hold: 6 * time.Second, inTxn: true, tv1: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallel(t)
			// armed: a fault armed from inside the handler (the abort
			// case); endHeld: the EndTxn hold of the in-txn cases.
			var armed, endHeld atomic.Pointer[faultproxy.Fault]
			var opts []kgo.Opt
			if tc.tv1 {
				opts = append(opts, tv1())
			}
			var arm func(p *faultproxy.Proxy) *faultproxy.Fault
			var h TxnHandler
			if tc.abort {
				// The first time input 150 is transformed, one of its
				// outputs is over the producer's size limit: franz-go
				// fails it at once (nothing reaches the broker), so the transaction
				// aborts; its EndTxn(abort) is the next EndTxn the
				// member sends, and loses its response. Every input
				// is transformed again, once, afterwards.
				var proxy atomic.Pointer[faultproxy.Proxy]
				var failed atomic.Bool
				arm = func(p *faultproxy.Proxy) *faultproxy.Fault { proxy.Store(p); return nil }
				h = func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					out := []*kgo.Record{{Topic: "out", Partition: r.Partition, Key: r.Value, Value: r.Value}}
					if string(r.Value) == string(val(150)) && failed.CompareAndSwap(false, true) {
						armed.Store(proxy.Load().DropResponse(faultproxy.Keys(int16(kmsg.EndTxn))))
						out = append(out, &kgo.Record{Topic: "out", Partition: r.Partition, Value: make([]byte, 2<<20)})
					}
					return out, nil
				}
			} else if tc.inTxn {
				// The held TxnOffsetCommit (A) lands inside a later
				// transaction, after that transaction's own
				// TxnOffsetCommit (B) and before its EndTxn: 1s
				// before A is due, the next EndTxn is held for 2s
				// (within the 3s request timeout, so the client
				// waits for it). Below KIP-890 part 2 the broker
				// may then take A's older offsets in place of B's
				// and commit them. The handler takes 10ms a record,
				// so the input lasts past A's delivery.
				opts = append(opts, kgo.RequestTimeoutOverhead(3*time.Second))
				h = func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
					if err := sleepOrCancel(ctx, 10*time.Millisecond); err != nil {
						return nil, err
					}
					return []*kgo.Record{{Topic: "out", Partition: r.Partition, Key: r.Value, Value: r.Value}}, nil
				}
				arm = func(p *faultproxy.Proxy) *faultproxy.Fault {
					held := p.HoldRequest(nthOf(tc.key, tc.nth), tc.hold)
					go func() {
						select {
						case <-held.Matched():
						case <-time.After(60 * time.Second):
							return
						}
						time.Sleep(tc.hold - time.Second) // scheduling the second fault, not synchronising
						endHeld.Store(p.HoldRequest(faultproxy.Keys(int16(kmsg.EndTxn)), 2*time.Second))
					}()
					return held
				}
			} else if tc.hold > 0 {
				arm = func(p *faultproxy.Proxy) *faultproxy.Fault { return p.HoldRequest(nthOf(tc.key, tc.nth), tc.hold) }
			} else {
				arm = func(p *faultproxy.Proxy) *faultproxy.Fault { return p.DropResponse(nthOf(tc.key, tc.nth)) }
			}
			r := runThroughProxy(t, arm, &armed, h, opts...)
			if tc.hold > 0 && !r.fault.ClientLeft() {
				t.Fatal("the client did not give up on the held request: it was not delivered late")
			}
			if e := endHeld.Load(); tc.inTxn && e != nil {
				select {
				case <-e.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the EndTxn after the late TxnOffsetCommit was never held")
				}
				t.Logf("EndTxn held %v", e.Request())
			} else if tc.inTxn {
				t.Fatal("the EndTxn hold was not armed before the input ended")
			}
			if _, aborted := r.tp.Stats(); tc.abort && aborted == 0 {
				t.Fatal("no transaction aborted: the output over the size limit did not fail its transaction")
			}
			adds := r.proxy.Seen(int16(kmsg.AddPartitionsToTxn)) + r.proxy.Seen(int16(kmsg.AddOffsetsToTxn))
			if !tc.tv1 && adds != 0 {
				t.Errorf("a TV2 client sent %d AddPartitionsToTxn/AddOffsetsToTxn", adds)
			}
			if tc.tv1 && adds == 0 {
				t.Errorf("a TV1 client sent no AddPartitionsToTxn/AddOffsetsToTxn: tv1() did not take")
			}
		})
	}
}
