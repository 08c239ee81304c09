// This file holds the transactional machinery Replay and Purge share: the
// fenced client of the transactional id "ordercast-dlq-<group>", what a fenced
// run means, and the read-back that checks a commit became visible.

package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txncheck"
	"github.com/ordercast/ordercast/internal/txnretry"
)

// txnClientOpts are the options of the group's transactional client:
// retries and metadata refreshes as the runtime's other transactional
// clients (txnretry: a replay's next transaction is refused with
// CONCURRENT_TRANSACTIONS while the previous one's markers are written),
// before the caller's options, which may replace them; then the
// transactional id, acks=all and no linger.
func (d *DLQ) txnClientOpts() []kgo.Opt {
	return append(append(txnretry.Opts(), d.opts...),
		kgo.TransactionalID("ordercast-dlq-"+d.group),
		kgo.TransactionTimeout(replayTxnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
}

// fencedTxnClient returns the group's transactional client after its
// producer id is initialised: from then on, an older client with the same
// transactional id is fenced and its open transaction aborted, so the state
// read next is final.
func (d *DLQ) fencedTxnClient(ctx context.Context) (*kgo.Client, error) {
	if err := ensureStateTopic(ctx, d.cl); err != nil {
		return nil, err
	}
	txn, err := kgo.NewClient(d.txnClientOpts()...)
	if err != nil {
		return nil, err
	}
	if _, _, err := txn.ProducerID(ctx); err != nil {
		txn.Close()
		return nil, fmt.Errorf("initialise transactional id ordercast-dlq-%s: %w", d.group, err)
	}
	return txn, nil
}

// fencedErr says what a fenced replay or purge means: another replay or
// purge of the group took over their shared transactional id
// (ordercast-dlq-<group>), and this one's open transaction was aborted;
// what it committed before stands. The cause stays matchable (errors.Is
// kerr.ProducerFenced / kerr.InvalidProducerEpoch).
func (d *DLQ) fencedErr(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("another dlq replay or purge of group %s is running; wait for it or retry (what this one committed before stands, the rest did not happen: %w)", d.group, err)
	}
	return err
}

// commitAttempts is how many times a replay batch or a purge writes its
// transaction when the read-back finds it was not applied (errNotApplied).
const commitAttempts = 3

// errNotApplied: a transaction the client reported committed is not
// visible to read_committed readers once its outcome is decided, so it was
// aborted. franz-go v1.22.3 does that under KIP-890 part 2 (Produce v12,
// partitions added to the transaction implicitly): EndTransaction(TryCommit)
// sometimes finds no partition marked as added although the produce
// succeeded, logs "no produce succeeded in this transaction but produces
// were attempted", aborts and returns nil (seen about once in 100 runs of
// cmd/ordercast TestOperatorCommands under -race): the transaction is a
// fresh client's first produce to StateTopic, and End can run before the
// client stored the topic's partitions (cause and reproduction:
// docs/upstream/franz-go-write-only-txn-abort.md).
var errNotApplied = txncheck.ErrAborted

// stableTimeout bounds how long awaitCommitted waits for the last stable
// offset of StateTopic to pass a committed record.
var stableTimeout = 10 * time.Second

// awaitCommitted reads the record written at offset of StateTopic back as a
// read_committed reader (txncheck.Committed), waiting at most stableTimeout
// and no longer than ctx: true if it is there, false if its transaction was
// aborted although EndTransaction returned nil (errNotApplied). So
// read_committed readers, such as a List right after a Replay or Purge, see
// what was just committed (Kafka answers EndTxn once the commit is decided
// and writes the transaction markers that move the last stable offset just
// after). It returns an error when the last stable offset does not get past
// offset in time, or the read fails. A later Replay or Purge of the group
// does not depend on it: initialising the same transactional id waits for
// the previous transaction to complete.
func awaitCommitted(ctx context.Context, opts []kgo.Opt, offset int64) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, stableTimeout)
	defer cancel()
	ok, err := txncheck.Committed(wctx, opts, StateTopic, 0, offset)
	switch {
	case err == nil:
		return ok, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case wctx.Err() != nil:
		return false, fmt.Errorf("committed, but the last stable offset of %s is not past the record written at %d after %v: readers do not see it yet (list again later; a transaction the broker has not completed holds it back)", StateTopic, offset, stableTimeout)
	default:
		return false, fmt.Errorf("read back what was committed to %s: %w", StateTopic, err)
	}
}
