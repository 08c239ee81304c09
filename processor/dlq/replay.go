// This file holds Replay: writing DLQ records back to their source topic or
// the group's retry topic, paced, each marked as replayed in StateTopic in the
// same Kafka transaction.

package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/ordercast/ordercast/internal/kread"
	"github.com/ordercast/ordercast/processor"
)

// runtimeHeaderPrefix is the prefix of the headers the runtime sets on retry
// and DLQ records (processor.HeaderOriginalTopic and the others). A replay
// drops them and keeps the record's own ("user") headers.
const runtimeHeaderPrefix = "ordercast-"

// Target is where Replay writes records.
type Target string

// Replay targets.
const (
	// TargetSource writes each record back to its original topic (header
	// ordercast-original-topic). Every group that consumes that topic gets
	// it again: consumers that deduplicate by event id (the inbox package)
	// apply it only in the group that failed it.
	TargetSource Target = "source"
	// TargetRetry writes each record to the group's first retry topic
	// "<group>.retry.1", due at once, with its original coordinates: only
	// that group sees it. Needs the group to run with retry topics.
	TargetRetry Target = "retry"
)

// ReplayOptions selects and paces a replay.
type ReplayOptions struct {
	Selection
	// To is TargetSource (default) or TargetRetry.
	To Target
	// Rate limits the records written per second: the first is written at
	// once, each next one no sooner than 1/Rate after the one before
	// (token bucket, burst 1, golang.org/x/time/rate), so N records take
	// at least (N-1)/Rate. 0 means unlimited; a negative Rate is an error.
	Rate float64
	// Force replays records that were replayed before; without it they are
	// refused (ErrAlreadyReplayed).
	Force bool
	// DryRun selects and checks, writes nothing, and returns what would be
	// replayed (Replayed entries with an empty To).
	DryRun bool
	// Limit caps the number of records replayed; 0 means no cap.
	Limit int
	// IncludeFailedReplays also replays the records that are themselves
	// replays that failed again (Record.ReplayedFrom set: the runtime
	// keeps processor.HeaderReplayed on what it dead-letters). Without it
	// a selection that does not name records by ID leaves them out (listed
	// in ReplayResult.Skipped), so that replaying everything twice does not
	// redrive a still-poison record's copy: its original is already
	// replayed, and the copy is the same record. Records named in
	// Selection.IDs are replayed whatever this says.
	IncludeFailedReplays bool
}

// ReplayedRecord is one record written back by Replay.
type ReplayedRecord struct {
	// From is the DLQ record's ID.
	From string `json:"from"`
	// To is the written record's coordinates (empty in a dry run).
	To     string `json:"to"`
	Key    string `json:"key"`              // record key as text
	Class  string `json:"class"`            // its ordercast-error-class
	Forced bool   `json:"forced,omitempty"` // it had been replayed before
}

// Refusal is one selected record that Replay did not write.
type Refusal struct {
	ID     string `json:"id"`     // the DLQ record's ID
	Reason string `json:"reason"` // why, and how to override it
	// Err is ErrAlreadyReplayed, ErrPurged or ErrNotReplayable.
	Err error `json:"-"`
}

// ReplayResult is what Replay did.
type ReplayResult struct {
	Group    string           `json:"group"`            // consumer group
	Topic    string           `json:"topic"`            // its DLQ topic
	Target   Target           `json:"target"`           // where records were written
	DryRun   bool             `json:"dryRun,omitempty"` // nothing was written
	Selected int              `json:"selected"`         // records matching the selection
	Replayed []ReplayedRecord `json:"replayed"`         // written (and marked), in order
	Refused  []Refusal        `json:"refused"`          // selected but not written
	// Skipped are the selected records left out because each is a replay
	// that failed again (ReplayOptions.IncludeFailedReplays); not an error.
	Skipped []Refusal `json:"skipped"`
}

// replayBatch bounds one replay transaction: records, and how long it stays
// open (well under the transaction timeout, whatever the rate). The timeout
// is short because an open replay transaction holds back every
// read_committed consumer of the topic written to: a replay killed
// mid-transaction (SIGKILL; SIGINT and SIGTERM abort it) stalls them at most
// this long (plus the broker's abort check interval,
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10s by
// default), or until the next replay or purge of the group fences it.
const (
	replayBatch      = 100
	replayBatchAge   = 5 * time.Second
	replayTxnTimeout = 15 * time.Second
)

// Replay writes the selected DLQ records back to their source topic or to
// the group's retry topic, at most Rate per second, and marks each one as
// replayed in StateTopic in the same Kafka transaction as the record, so the
// mark exists if and only if the record was written.
//
// A written record has the DLQ record's key, value (a null value stays
// null) and own headers (those not starting with "ordercast-"), plus
// processor.HeaderReplayed = the DLQ record's ID; for TargetRetry also the
// original coordinates and a due time of now. The partition written to is
// not copied from the original: the client's partitioner picks it
// (franz-go's default kgo.StickyKeyPartitioner: the murmur2 hash of the key,
// as Kafka's Java client; a null key sticks to one partition per batch).
//
// Records that are replays that failed again are skipped unless
// IncludeFailedReplays or named by ID (see there). Records replayed before
// are refused unless Force; purged records (with
// IncludePurged) and records without an original topic are refused. When any
// were refused the others are still replayed and the error is a
// *RefusedError. On any other error (ctx done, write failed) the records of
// committed transactions are in the result and marked; the rest are neither
// written nor marked, so running the same replay again is safe. Each
// transaction is read back before the next: when Replay returns, a List
// shows the marks of what it replayed. A transaction the client reported
// committed but the read-back finds aborted is written again with a new
// client, 3 times in all; when the third is aborted too, Replay returns an
// error naming the batch's first and last record, and those records are
// neither written nor marked (run the replay again).
func (d *DLQ) Replay(ctx context.Context, o ReplayOptions) (*ReplayResult, error) {
	if o.To == "" {
		o.To = TargetSource
	}
	if o.To != TargetSource && o.To != TargetRetry {
		return nil, fmt.Errorf("replay target %q: want %q or %q", o.To, TargetSource, TargetRetry)
	}
	if o.Rate < 0 {
		return nil, fmt.Errorf("replay rate %v: want >= 0 records per second (0: unlimited)", o.Rate)
	}
	res := &ReplayResult{Group: d.group, Topic: d.topic, Target: o.To, DryRun: o.DryRun, Replayed: []ReplayedRecord{}, Refused: []Refusal{}, Skipped: []Refusal{}}
	var retryTopic string
	if o.To == TargetRetry {
		retryTopic = processor.RetryTopicNames(d.group, 1)[0]
		if _, err := kread.PartitionBounds(ctx, d.cl, retryTopic); err != nil {
			if errors.Is(err, ErrNoTopic) {
				return nil, fmt.Errorf("group %s has no retry topic %s (%w; it runs without retry topics): replay to the source topic instead (ReplayOptions.To TargetSource, the CLI's --to source)", d.group, retryTopic, err)
			}
			return nil, err
		}
	}
	var txn *kgo.Client
	if !o.DryRun {
		var err error
		if txn, err = d.fencedTxnClient(ctx); err != nil {
			return nil, err
		}
		defer txn.Close()
	}
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, err
	}
	var queue []*Record
	if _, err := d.scan(ctx, o.Selection, st, func(r *Record) {
		res.Selected++
		switch {
		case r.Purged:
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrPurged,
				Reason: fmt.Sprintf("purged: below the purge position %d of partition %d", st.position(r.Partition), r.Partition)})
		case r.Replay != nil && !o.Force:
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrAlreadyReplayed,
				Reason: fmt.Sprintf("already replayed at %s to %s; ReplayOptions.Force (--force) replays it again", r.Replay.At.Format(time.RFC3339), r.Replay.To)})
		case r.OriginalTopic == "":
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrNotReplayable,
				Reason: "no " + processor.HeaderOriginalTopic + " header: not written by the runtime; nowhere to send it back"})
		case r.ReplayedFrom != "" && !o.IncludeFailedReplays && len(o.IDs) == 0:
			res.Skipped = append(res.Skipped, Refusal{ID: r.ID, Err: ErrFailedReplay,
				Reason: "a replay of " + r.ReplayedFrom + " that failed again; ReplayOptions.IncludeFailedReplays (--include-failed-replays) replays it"})
		case o.Limit > 0 && len(queue) >= o.Limit:
		default:
			queue = append(queue, r)
		}
	}); err != nil {
		return nil, err
	}
	queue = d.dropMissingSources(ctx, queue, o.To, res)
	if o.DryRun {
		for _, r := range queue {
			res.Replayed = append(res.Replayed, ReplayedRecord{From: r.ID, Key: r.Key, Class: r.ErrorClass, Forced: r.Replay != nil})
		}
		return res, refusedErr(res)
	}
	if err := d.writeReplays(ctx, txn, queue, o.To, retryTopic, o.Rate, res); err != nil {
		return res, d.fencedErr(err)
	}
	return res, refusedErr(res)
}

// dropMissingSources refuses the records whose original topic does not exist
// (any more) when replaying to the source, rather than letting the producer
// wait for a topic that will not appear.
func (d *DLQ) dropMissingSources(ctx context.Context, queue []*Record, to Target, res *ReplayResult) []*Record {
	if to != TargetSource {
		return queue
	}
	missing := map[string]bool{}
	out := queue[:0]
	for _, r := range queue {
		gone, checked := missing[r.OriginalTopic]
		if !checked {
			_, err := kread.PartitionBounds(ctx, d.cl, r.OriginalTopic)
			gone = errors.Is(err, ErrNoTopic)
			missing[r.OriginalTopic] = gone
		}
		if gone {
			res.Refused = append(res.Refused, Refusal{ID: r.ID, Err: ErrNotReplayable,
				Reason: "its original topic " + r.OriginalTopic + " does not exist; ReplayOptions.To TargetRetry (--to retry) sends it to the group's retry topic"})
			continue
		}
		out = append(out, r)
	}
	return out
}

func refusedErr(res *ReplayResult) error {
	if len(res.Refused) == 0 {
		return nil
	}
	return &RefusedError{Refused: res.Refused}
}

// writeReplays writes queue in transactions of at most replayBatch records
// or replayBatchAge, pacing with a token bucket. A transaction is committed
// before a wait of more than a second, so it never stays open long. Each
// commit is read back (awaitCommitted); a batch found aborted is written
// again with a new client of the transactional id, at most commitAttempts
// times in all (errNotApplied).
func (d *DLQ) writeReplays(ctx context.Context, txn *kgo.Client, queue []*Record, to Target, retryTopic string, perSec float64, res *ReplayResult) error {
	lim := rate.NewLimiter(rate.Inf, 1)
	if perSec > 0 {
		lim = rate.NewLimiter(rate.Limit(perSec), 1)
	}
	replaced := false // txn is a client of its own, closed here
	defer func() {
		if replaced {
			txn.Close()
		}
	}()
	var (
		pending   []ReplayedRecord
		batch     []*Record // the DLQ records of pending
		inTxn     bool
		opened    time.Time
		lastState int64
	)
	// write produces r's replay and its mark in the open transaction.
	write := func(r *Record) (ReplayedRecord, error) {
		out := replayRecord(r, to, retryTopic)
		pr := txn.ProduceSync(ctx, out)
		if err := pr.FirstErr(); err != nil {
			return ReplayedRecord{}, fmt.Errorf("write %s to %s: %w", r.ID, out.Topic, err)
		}
		w := pr[0].Record
		mark := ReplayMark{At: time.Now().UTC(), To: Coord{w.Topic, w.Partition, w.Offset}.String(), Target: string(to), Forced: r.Replay != nil}
		c, _ := ParseCoord(r.ID)
		sr := txn.ProduceSync(ctx, stateRecord(replayedKey(c), mark))
		if err := sr.FirstErr(); err != nil {
			return ReplayedRecord{}, fmt.Errorf("mark %s as replayed in %s: %w", r.ID, StateTopic, err)
		}
		lastState = sr[0].Record.Offset
		return ReplayedRecord{From: r.ID, To: mark.To, Key: r.Key, Class: r.ErrorClass, Forced: mark.Forced}, nil
	}
	commit := func() error {
		if !inTxn {
			return nil
		}
		for attempt := 1; ; attempt++ {
			inTxn = false
			if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return fmt.Errorf("commit the replay of %d records (%s .. %s): %w; they are not marked, run the replay again",
					len(pending), pending[0].From, pending[len(pending)-1].From, err)
			}
			applied, err := awaitCommitted(ctx, d.opts, lastState)
			if err != nil {
				return fmt.Errorf("replay of %d records (%s .. %s): %w", len(pending), pending[0].From, pending[len(pending)-1].From, err)
			}
			if applied {
				break
			}
			if attempt == commitAttempts {
				return fmt.Errorf("replay of %d records (%s .. %s): %w %d times; they are not marked, run the replay again",
					len(pending), pending[0].From, pending[len(pending)-1].From, errNotApplied, attempt)
			}
			// Nothing of the batch was written: write it again (the
			// aborted copies are invisible to read_committed readers),
			// with a new client: the one that aborted fails its next
			// produce with OUT_OF_ORDER_SEQUENCE_NUMBER.
			fresh, err := d.fencedTxnClient(ctx)
			if err != nil {
				return err
			}
			if replaced {
				txn.Close()
			}
			txn, replaced = fresh, true
			if err := txn.BeginTransaction(); err != nil {
				return fmt.Errorf("begin replay transaction: %w", err)
			}
			inTxn = true
			for i, r := range batch {
				rr, err := write(r)
				if err != nil {
					return err
				}
				pending[i] = rr
			}
		}
		res.Replayed = append(res.Replayed, pending...)
		pending, batch = nil, nil
		return nil
	}
	abort := func(err error) error {
		aborted := len(pending)
		if inTxn {
			inTxn = false
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if aerr := txn.AbortBufferedRecords(actx); aerr == nil {
				_ = txn.EndTransaction(actx, kgo.TryAbort)
			}
			pending = nil
		}
		if ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
			// Interrupted (a signal, --timeout) inside a write: say so,
			// not only which write saw the cancellation.
			return fmt.Errorf("%w after %d records replayed (%d in the open transaction aborted, not marked): %w",
				ErrInterrupted, len(res.Replayed), aborted, context.Cause(ctx))
		}
		return err
	}
	for _, r := range queue {
		rv := lim.Reserve()
		if delay := rv.Delay(); delay > 0 {
			if delay > time.Second {
				if err := commit(); err != nil {
					return abort(err)
				}
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return abort(fmt.Errorf("%w after %d records replayed (%d in the open transaction aborted, not marked): %w",
					ErrInterrupted, len(res.Replayed), len(pending), context.Cause(ctx)))
			case <-t.C:
			}
		}
		if !inTxn {
			if err := txn.BeginTransaction(); err != nil {
				return fmt.Errorf("begin replay transaction: %w", err)
			}
			inTxn, opened = true, time.Now()
		}
		rr, err := write(r)
		if err != nil {
			return abort(err)
		}
		pending, batch = append(pending, rr), append(batch, r)
		if len(pending) >= replayBatch || time.Since(opened) > replayBatchAge {
			if err := commit(); err != nil {
				return abort(err)
			}
		}
	}
	if err := commit(); err != nil {
		return abort(err)
	}
	return nil
}

// replayRecord builds the record written back for r.
func replayRecord(r *Record, to Target, retryTopic string) *kgo.Record {
	src := r.raw
	out := &kgo.Record{Key: src.Key, Value: src.Value}
	keep := func(k string) bool { return !strings.HasPrefix(k, runtimeHeaderPrefix) }
	if to == TargetRetry {
		out.Topic = retryTopic
		original := []string{processor.HeaderOriginalTopic, processor.HeaderOriginalPartition, processor.HeaderOriginalOffset,
			processor.HeaderOriginalTimestamp, processor.HeaderConsumerGroup}
		keep = func(k string) bool { return !strings.HasPrefix(k, runtimeHeaderPrefix) || slices.Contains(original, k) }
	} else {
		out.Topic = r.OriginalTopic
	}
	for _, h := range src.Headers {
		if keep(h.Key) {
			out.Headers = append(out.Headers, h)
		}
	}
	out.Headers = append(out.Headers, kgo.RecordHeader{Key: processor.HeaderReplayed, Value: []byte(r.ID)})
	if to == TargetRetry {
		due := strconv.FormatInt(time.Now().UnixMilli(), 10)
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: processor.HeaderRetryDue, Value: []byte(due)})
	}
	return out
}
