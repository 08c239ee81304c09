package dlq

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// AwaitCommitted is awaitCommitted, for the tests.
func AwaitCommitted(ctx context.Context, opts []kgo.Opt, offset int64) (bool, error) {
	return awaitCommitted(ctx, opts, offset)
}

// SetStableTimeout sets awaitCommitted's wait until the test ends (restore
// is returned).
func SetStableTimeout(d time.Duration) (restore func()) {
	old := stableTimeout
	stableTimeout = d
	return func() { stableTimeout = old }
}

// TxnClientOpts is txnClientOpts, for the tests.
func (d *DLQ) TxnClientOpts() []kgo.Opt { return d.txnClientOpts() }
