// This file holds Purge: advancing the purge position of DLQ partitions in
// StateTopic (records are never deleted; they stay until the topic's
// retention).

package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PurgeOptions selects what Purge advances.
type PurgeOptions struct {
	// Partitions of the DLQ; empty means all.
	Partitions []int32
	// Until is the new position: records below it are purged. 0 means each
	// partition's current end (purge everything in it now).
	Until int64
	// Force allows moving a position backwards (un-purging records, which
	// are still in the topic).
	Force bool
	// DryRun computes the result and writes nothing.
	DryRun bool
}

// PurgedPartition is what Purge did to one partition.
type PurgedPartition struct {
	Partition int32 `json:"partition"` // DLQ partition
	// From and To are the old and new positions.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Records between the two positions, of which Replayed had been
	// replayed (negative counts when the position moved back).
	Records     int `json:"records"`
	Replayed    int `json:"replayed"`
	NotReplayed int `json:"notReplayed"`
}

// PurgeResult is what Purge did.
type PurgeResult struct {
	Group      string            `json:"group"`            // consumer group
	Topic      string            `json:"topic"`            // its DLQ topic
	DryRun     bool              `json:"dryRun,omitempty"` // nothing was written
	Partitions []PurgedPartition `json:"partitions"`       // the partitions whose position moved
}

// Purge advances the purge position of the selected DLQ partitions to
// o.Until (or their end), in one transaction on StateTopic. It never
// deletes records: they stay in the DLQ topic until its retention.ms, and
// Force can move a position back. List, Show and Replay start from the
// position. A purged record that held its key (Record.BlocksKey) releases
// it once the purge is committed: the group handles the records it held.
//
// It returns once read_committed readers see the new positions (a List
// right after shows them): the commit is read back, and a transaction the
// client reported committed but the read-back finds aborted is run again
// with a new client, 3 times in all. Errors: ErrBackwards without Force
// when a position would move back; an Until past a partition's end; a
// commit that did not become visible within 10 s, or was aborted all 3
// times (nothing was purged: run it again).
func (d *DLQ) Purge(ctx context.Context, o PurgeOptions) (*PurgeResult, error) {
	if o.Until < 0 {
		return nil, fmt.Errorf("purge position %d: want >= 0", o.Until)
	}
	for attempt := 1; ; attempt++ {
		res, applied, err := d.purgeOnce(ctx, o)
		if err != nil || applied {
			return res, err
		}
		if attempt == commitAttempts {
			return nil, fmt.Errorf("purge of %s: %w %d times (nothing was purged; run it again)", d.topic, errNotApplied, attempt)
		}
	}
}

// purgeOnce is one attempt of Purge, with its own transactional client:
// the result, and whether the read-back found it applied (false: its
// transaction was aborted, see errNotApplied).
func (d *DLQ) purgeOnce(ctx context.Context, o PurgeOptions) (*PurgeResult, bool, error) {
	var txn *kgo.Client
	if !o.DryRun {
		var err error
		if txn, err = d.fencedTxnClient(ctx); err != nil {
			return nil, false, err
		}
		defer txn.Close()
	}
	st, err := readState(ctx, d.opts, d.cl, d.topic)
	if err != nil {
		return nil, false, err
	}
	states, _, err := d.partitions(ctx, o.Partitions, st)
	if err != nil {
		return nil, false, err
	}
	bks, err := d.BlockedKeys(ctx)
	if err != nil {
		return nil, false, err
	}
	var release []BlockedKey // keys held by records this purge removes
	res := &PurgeResult{Group: d.group, Topic: d.topic, DryRun: o.DryRun, Partitions: []PurgedPartition{}}
	for _, s := range states {
		to := s.End
		if o.Until > 0 {
			to = o.Until
		}
		from := st.position(s.Partition)
		switch {
		case to > s.End:
			return nil, false, fmt.Errorf("purge %s partition %d up to offset %d: past its end (the last offset is %d)", d.topic, s.Partition, to-1, s.End-1)
		case to < from && !o.Force:
			return nil, false, fmt.Errorf("purge %s partition %d up to offset %d: the purge %w: it is at %d, records below it are purged (PurgeOptions.Force, the CLI's --force, un-purges; the records are still there)", d.topic, s.Partition, to-1, ErrBackwards, from)
		case to == from:
			continue
		}
		pp := PurgedPartition{Partition: s.Partition, From: from, To: to}
		sign := 1
		lo, hi := from, to
		if to < from {
			sign, lo, hi = -1, to, from
		}
		if _, err := d.scan(ctx, Selection{Partitions: []int32{s.Partition}, From: lo, Until: hi, IncludePurged: true}, st, func(r *Record) {
			pp.Records += sign
			if b := d.blocking(bks, r); b != nil && sign > 0 {
				release = append(release, *b)
			}
			if r.Replay != nil {
				pp.Replayed += sign
			} else {
				pp.NotReplayed += sign
			}
		}); err != nil {
			return nil, false, err
		}
		res.Partitions = append(res.Partitions, pp)
	}
	if o.DryRun || len(res.Partitions) == 0 {
		return res, true, nil
	}
	lastState, err := d.writePositions(ctx, txn, res.Partitions)
	if err != nil {
		return nil, false, err
	}
	applied, err := awaitCommitted(ctx, d.opts, lastState)
	if err != nil {
		return nil, false, fmt.Errorf("purge of %s: %w", d.topic, err)
	}
	if applied {
		if err := d.releaseKeys(ctx, release); err != nil {
			return nil, false, err
		}
	}
	return res, applied, nil
}

// writePositions writes the purge positions of pps in one transaction on
// StateTopic and returns the offset of the last record written.
func (d *DLQ) writePositions(ctx context.Context, txn *kgo.Client, pps []PurgedPartition) (int64, error) {
	if err := txn.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("begin purge transaction: %w", err)
	}
	now := time.Now().UTC()
	var lastState int64
	for _, pp := range pps {
		pr := txn.ProduceSync(ctx, stateRecord(positionKey(d.topic, pp.Partition), positionValue{Offset: pp.To, At: now}))
		if err := pr.FirstErr(); err != nil {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = txn.AbortBufferedRecords(actx)
			_ = txn.EndTransaction(actx, kgo.TryAbort)
			cancel()
			return 0, d.fencedErr(fmt.Errorf("write the purge position of %s partition %d: %w", d.topic, pp.Partition, err))
		}
		lastState = pr[0].Record.Offset
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return 0, d.fencedErr(fmt.Errorf("commit the purge of %s: %w (nothing was purged; run it again)", d.topic, err))
	}
	return lastState, nil
}
