package dlq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ordercast/ordercast/internal/kread"
)

// Sentinel errors of the package; test with errors.Is. Messages of the
// errors that wrap them name the topic, partition or offset and what changes
// the outcome: the option, and the `ordercast dlq` flag that sets it (the
// CLI is a thin front of this package).
var (
	// ErrAlreadyReplayed: a selected DLQ record was replayed before (its
	// coordinates are in the state topic). Replay refuses it unless
	// ReplayOptions.Force is set (`--force`).
	ErrAlreadyReplayed = errors.New("already replayed")

	// ErrPurged: a selected DLQ record lies below its partition's purge
	// position. Purged records are neither listed nor replayed; they are
	// still in the topic until its retention deletes them, and Purge with
	// Force can move the position back.
	ErrPurged = errors.New("purged")

	// ErrNotReplayable: a DLQ record lacks the ordercast-original-topic
	// header (it was not written by the runtime), or, replaying to the
	// source, its original topic does not exist: there is nowhere to send it
	// back to.
	ErrNotReplayable = errors.New("not replayable")

	// ErrNoTopic: a topic that the operation needs does not exist (the
	// DLQ topic, a retry topic, a record's original topic).
	ErrNoTopic = kread.ErrNoTopic

	// ErrFailedReplay: a DLQ record that is itself a replay that failed
	// again, left out of a replay that did not ask for such records
	// (ReplayOptions.IncludeFailedReplays).
	ErrFailedReplay = errors.New("a replay that failed again")

	// ErrNoRecord: no record at the given coordinates (below the log start,
	// at or past the end, or a transaction marker).
	ErrNoRecord = errors.New("no such record")

	// ErrBackwards: Purge was asked to move a partition's position below
	// where it is; pass Force to un-purge.
	ErrBackwards = errors.New("position would move backwards")

	// ErrInterrupted: Replay's context ended (a signal, a timeout) before
	// it was done. What was committed before stays replayed and marked;
	// the open transaction was aborted, so none of its records is visible
	// to read_committed consumers or marked: replay again to finish.
	ErrInterrupted = errors.New("replay interrupted")
)

// RefusedError is returned by Replay when some selected records were not
// replayed: already replayed (without Force), purged or not replayable. The
// other selected records were replayed; the ReplayResult lists both.
// errors.Is matches each distinct reason's sentinel (ErrAlreadyReplayed,
// ErrPurged, ErrNotReplayable).
type RefusedError struct {
	// Refused are the records that were refused, in topic order.
	Refused []Refusal
}

// Error summarises the refusals and says how to override them.
func (e *RefusedError) Error() string {
	counts := map[error]int{}
	var kinds []error
	for _, r := range e.Refused {
		if counts[r.Err] == 0 {
			kinds = append(kinds, r.Err)
		}
		counts[r.Err]++
	}
	var parts []string
	for _, k := range kinds {
		hint := ""
		switch k {
		case ErrAlreadyReplayed:
			hint = " (ReplayOptions.Force, the CLI's --force, replays them again)"
		case ErrPurged:
			hint = " (below the purge position; Purge with PurgeOptions.Force and an earlier Until, the CLI's `dlq purge --force --to-offset N`, moves it back)"
		}
		parts = append(parts, fmt.Sprintf("%d %s%s", counts[k], k, hint))
	}
	return fmt.Sprintf("%d records refused: %s", len(e.Refused), strings.Join(parts, ", "))
}

// Unwrap returns the distinct sentinels of the refusals.
func (e *RefusedError) Unwrap() []error {
	seen := map[error]bool{}
	var out []error
	for _, r := range e.Refused {
		if r.Err != nil && !seen[r.Err] {
			seen[r.Err] = true
			out = append(out, r.Err)
		}
	}
	return out
}
