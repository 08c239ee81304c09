package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// lostResponse is a response the network loses: the cluster applies one
// matching request, then closes the client's connection instead of
// answering, so the client sees a dead connection and retries. The retry is
// answered with retryErr (nil: the cluster answers it normally, as a broker
// answers a duplicate).
type lostResponse struct {
	key      kmsg.Key
	match    func(kmsg.Request) bool // which request loses its response; nil: the first of key
	retryErr *kerr.Error             // the answer to the client's next request of key; nil: let it through

	mu       sync.Mutex
	state    int // 0 waiting, 1 forwarding the matched request, 2 waiting for the retry, 3 done
	applied  error
	answered bool
}

// errLost closes the client's connection from a control: the response is lost.
var errLost = errors.New("test: response lost in the network")

// install adds the control to c. addrs are the cluster's listeners: the
// matched request is applied by re-sending it on a connection of our own
// while the client's request sleeps (a control cannot run the cluster's
// handler itself).
func (l *lostResponse) install(t *testing.T, c *kfake.Cluster, addrs []string) {
	t.Helper()
	c.ControlKey(int16(l.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		l.mu.Lock()
		state := l.state
		l.mu.Unlock()
		switch state {
		case 0:
			if l.match != nil && !l.match(req) {
				return nil, nil, false
			}
			l.mu.Lock()
			l.state = 1
			l.mu.Unlock()
			c.SleepControl(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				// At the client's version: kgo would send its highest,
				// with fields the client's request did not fill.
				v := kversion.Stable()
				v.SetMaxKeyVersion(req.Key(), req.GetVersion())
				fwd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequestRetries(0), kgo.MaxVersions(v))
				var resp kmsg.Response
				if err == nil {
					resp, err = fwd.Request(ctx, req)
					fwd.Close()
				}
				if err == nil {
					err = responseErr(resp)
				}
				l.mu.Lock()
				l.applied, l.state = err, 2
				l.mu.Unlock()
			})
			return nil, errLost, true
		case 1:
			return nil, nil, false // our own re-sent copy: the cluster applies it
		case 2:
			l.mu.Lock()
			l.state, l.answered = 3, true
			l.mu.Unlock()
			c.DropControl()
			if l.retryErr == nil {
				return nil, nil, false
			}
			return errorResponse(req, l.retryErr), nil, true
		}
		c.DropControl()
		return nil, nil, false
	})
}

// fired reports whether the response was lost and the retry answered; it
// fails the test if the lost request was not applied.
func (l *lostResponse) fired(t *testing.T) bool {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state >= 2 && l.applied != nil {
		t.Fatalf("the cluster refused the %v whose response was to be lost: %v", l.key, l.applied)
	}
	return l.answered
}

// responseErr returns the first error code in resp (the top-level one for
// EndTxn, AddOffsetsToTxn and InitProducerID, per partition for the others).
func responseErr(resp kmsg.Response) error {
	switch r := resp.(type) {
	case *kmsg.EndTxnResponse:
		return kerr.ErrorForCode(r.ErrorCode)
	case *kmsg.AddOffsetsToTxnResponse:
		return kerr.ErrorForCode(r.ErrorCode)
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return err
				}
			}
		}
	case *kmsg.AddPartitionsToTxnResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return err
				}
			}
		}
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// errorResponse answers req with e (top-level, or on every partition).
func errorResponse(req kmsg.Request, e *kerr.Error) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.EndTxnRequest:
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = e.Code
		return resp
	case *kmsg.AddOffsetsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = e.Code
		return resp
	case *kmsg.TxnOffsetCommitRequest:
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, e.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	case *kmsg.AddPartitionsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p, e.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
	panic("errorResponse: unsupported request")
}

// tv1 pins the client below KIP-890 part 2 (EndTxn v4): each transaction
// adds its partitions with AddPartitionsToTxn and its group with
// AddOffsetsToTxn, and the producer epoch is not bumped per transaction.
func tv1() kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	return kgo.MaxVersions(v)
}

// nthCommit matches the nth EndTxn(commit) request (1-based).
func nthCommit(n int) func(kmsg.Request) bool {
	var mu sync.Mutex
	seen := 0
	return func(r kmsg.Request) bool {
		if !r.(*kmsg.EndTxnRequest).Commit {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		seen++
		return seen == n
	}
}

// nth matches the nth request it is asked about (1-based).
func nth(n int) func(kmsg.Request) bool {
	var mu sync.Mutex
	seen := 0
	return func(kmsg.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		seen++
		return seen == n
	}
}

// runLostResponse runs one exactly-once member over 4 partitions of n
// inputs, ~50 records per transaction, with l installed, and checks that a
// read_committed reader sees every input's output exactly once and that the
// group's committed offsets end at the end of the input.
func runLostResponse(t *testing.T, l *lostResponse, clientOpts ...kgo.Opt) *TxnProcessor {
	t.Helper()
	c, addrs := testClusterC(t, map[string]int32{"in": 4, "out": 4, "g.dlq": 1})
	const n = 1000
	produceSpread(t, addrs, "in", 4, n)
	ends := endOffsets(t, addrs, "in")
	l.install(t, c, addrs)
	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: "out", Partition: r.Partition, Key: r.Value, Value: r.Value}}, nil
	}
	tp, err := NewTransactional("txn-lost", h, Brokers(addrs...), Group("g"), Topics("in"),
		CommitInterval(50*time.Millisecond), MaxInFlight(50, 1<<20), Backoff(20*time.Millisecond, 100*time.Millisecond),
		TransactionTimeout(10*time.Second), ClientOpts(append(clientOpts, kgo.FetchMaxPartitionBytes(200))...))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, tp)
	waitFor(t, 60*time.Second, "committed offsets at the end of in", func() bool { return committedEquals(t, addrs, "g", ends) })
	if !l.fired(t) {
		t.Fatalf("the %v response was never lost (the control did not fire)", l.key)
	}
	stop()
	checkExactlyOnce(t, addrs, "out", n)
	return tp
}

// produceSpread writes n inputs val(0..n-1) to topic, input i to partition
// i%partitions, one small batch per partition per round: with a small
// FetchMaxPartitionBytes each poll returns records of every partition, so
// every transaction spans them all.
func produceSpread(t *testing.T, addrs []string, topic string, partitions, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < n; i += partitions {
		var round []*kgo.Record
		for j := i; j < min(n, i+partitions); j++ {
			round = append(round, &kgo.Record{Topic: topic, Partition: int32(j % partitions), Value: val(j)})
		}
		if err := cl.ProduceSync(context.Background(), round...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

// checkExactlyOnce fails the test unless topic holds, for read_committed
// readers, exactly one output per input val(0..n-1); it reads for the full
// 3s so that a late duplicate is seen.
func checkExactlyOnce(t *testing.T, addrs []string, topic string, n int) {
	t.Helper()
	out := readCommitted(t, addrs, topic, n+1, 3*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	var bad []string
	for i := range n {
		if k := seen[string(val(i))]; k != 1 {
			bad = append(bad, fmt.Sprintf("%s×%d", val(i), k))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d inputs without exactly one committed output (of %d outputs): %v", len(bad), len(out), head(bad, 20))
	}
}

// TestTxnUnknownOutcome (S16): the response to one EndTxn(commit) is lost
// after the broker committed; the client's retry is answered with an error.
// franz-go's End then reports "not committed" (UNKNOWN_SERVER_ERROR and
// TRANSACTION_ABORTABLE are retried as an abort, which the already committed
// transaction ignores) or returns the error. Either way the runtime must
// resume from the offsets the broker holds: a reader with read_committed
// sees every input's output exactly once. Without the settling in txn.go
// the two "not committed" cases re-transform the committed transaction's
// ~50 inputs (it rewound to the offsets franz-go had cached).
func TestTxnUnknownOutcome(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name     string
		retryErr *kerr.Error
		tv1      bool
	}{
		{"retry-unknown-server-error", kerr.UnknownServerError, false},
		{"retry-transaction-abortable", kerr.TransactionAbortable, false},
		{"retry-invalid-txn-state", kerr.InvalidTxnState, false},
		{"retry-answered", nil, false},
		{"tv1-retry-unknown-server-error", kerr.UnknownServerError, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallel(t)
			var opts []kgo.Opt
			if tc.tv1 {
				opts = append(opts, tv1())
			}
			runLostResponse(t, &lostResponse{key: kmsg.EndTxn, match: nthCommit(3), retryErr: tc.retryErr}, opts...)
		})
	}
}

// TestTxnLostResponses: the response to one request of the transaction
// protocol is lost after the broker applied it, and the client's retry is
// answered normally (as a broker answers a duplicate) or with an error. Every
// input still has exactly one committed output, and the group's offsets end
// at the end of the input. tv1 runs below KIP-890 part 2, where the client
// sends AddPartitionsToTxn and AddOffsetsToTxn and the epoch is not bumped per
// transaction.
func TestTxnLostResponses(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name     string
		key      kmsg.Key
		retryErr *kerr.Error
		tv1      bool
	}{
		{"txn-offset-commit", kmsg.TxnOffsetCommit, nil, false},
		{"txn-offset-commit-retry-unknown-server-error", kmsg.TxnOffsetCommit, kerr.UnknownServerError, false},
		{"txn-offset-commit-retry-illegal-generation", kmsg.TxnOffsetCommit, kerr.IllegalGeneration, false},
		{"tv1-txn-offset-commit", kmsg.TxnOffsetCommit, nil, true},
		{"produce", kmsg.Produce, nil, false},
		{"tv1-produce", kmsg.Produce, nil, true},
		{"tv1-add-partitions-to-txn", kmsg.AddPartitionsToTxn, nil, true},
		{"tv1-add-partitions-to-txn-retry-unknown-server-error", kmsg.AddPartitionsToTxn, kerr.UnknownServerError, true},
		{"tv1-add-offsets-to-txn", kmsg.AddOffsetsToTxn, nil, true},
		{"tv1-add-offsets-to-txn-retry-unknown-server-error", kmsg.AddOffsetsToTxn, kerr.UnknownServerError, true},
		{"tv1-end-txn-abort", kmsg.EndTxn, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallel(t)
			var opts []kgo.Opt
			if tc.tv1 {
				opts = append(opts, tv1())
			}
			match := nth(3)
			runLostResponse(t, &lostResponse{key: tc.key, match: match, retryErr: tc.retryErr}, opts...)
		})
	}
}
