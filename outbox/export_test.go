package outbox

import "github.com/twmb/franz-go/pkg/kgo"

// SetAfterProduce installs a hook that runs after a batch was produced and
// before it is marked sent (tests only). An error from it ends Run with that
// error and leaves the rows unmarked, as a crash at that point would.
func (r *Relay) SetAfterProduce(fn func(ids []int64) error) { r.afterProduce = fn }

// SetAfterCommit installs a hook that runs, in the exactly-once mode, after
// a transaction committed and before its rows are marked sent (tests only).
// An error from it ends Run with that error and leaves the rows unmarked, as
// a crash at that point would.
func (r *Relay) SetAfterCommit(fn func(ids []int64) error) { r.afterCommit = fn }

// SetBeforeMark installs a hook that runs, in the exactly-once mode, on the
// goroutine marking a committed transaction's rows, before the UPDATE (tests
// only). An error from it is the marking's error.
func (r *Relay) SetBeforeMark(fn func(ids []int64) error) { r.beforeMark = fn }

// TxnClientOpts returns the options of the transactional relay's client.
func (r *Relay) TxnClientOpts() []kgo.Opt { return r.txnClientOpts() }
