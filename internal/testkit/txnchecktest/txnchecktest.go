// Package txnchecktest injects, on the embedded kfake broker, the condition
// package txncheck exists for: a transaction the broker aborts while the
// client is told it committed, as franz-go v1.22.3 does itself to some
// write-only transactions (docs/upstream/franz-go-write-only-txn-abort.md).
// It is for tests only (it imports kfake, which package txncheck does not).
package txnchecktest

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// Fake is testkafka.Fake for a silent-abort test: an embedded one-broker
// cluster holding topics (name -> partitions), closed when the test ends,
// and its addresses. On a real cluster (ORDERCAST_TEST_BROKERS set) it
// skips t, saying why: the abort is injected with a kfake control.
func Fake(t testing.TB, topics map[string]int32) (*kfake.Cluster, []string) {
	t.Helper()
	testkafka.SkipIfReal(t, "turns EndTxn(commit) into an abort with a kfake control")
	return testkafka.Fake(t, topics)
}

// AbortCommits makes c handle its next n EndTxn(commit) requests as aborts,
// answering them as it answers any EndTxn: with success. The client sees
// what franz-go v1.22.3 returns when it turns a commit into an abort itself
// (kgo/txn.go, "no produce succeeded in this transaction but produces were
// attempted"): nil, and an aborted transaction. The returned counter says
// how many it has turned so far (safe for concurrent use); other requests
// and later EndTxn are handled unchanged. A later AbortCommits on the same
// cluster adds its control after this one's.
func AbortCommits(c *kfake.Cluster, n int32) *atomic.Int32 {
	var done atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := kreq.(*kmsg.EndTxnRequest); req.Commit && done.Load() < n {
			req.Commit = false
			done.Add(1)
		}
		return nil, nil, false // handled by the broker, as changed
	})
	return &done
}
