package ops

import (
	"errors"

	"github.com/ordercast/ordercast/processor/dlq"
)

// Sentinel errors of the operator's tools; test with errors.Is. Messages of
// the errors that wrap them name the topic, partition or offset and the flag
// that changes the outcome. The DLQ's are processor/dlq's (the same values).
var (
	ErrAlreadyReplayed = dlq.ErrAlreadyReplayed // a selected record was replayed before (dlq.ErrAlreadyReplayed)
	ErrPurged          = dlq.ErrPurged          // a selected record lies below its purge position (dlq.ErrPurged)
	ErrNotReplayable   = dlq.ErrNotReplayable   // a record has nowhere to be sent back to (dlq.ErrNotReplayable)
	ErrNoTopic         = dlq.ErrNoTopic         // a topic that the operation needs does not exist (dlq.ErrNoTopic)
	ErrFailedReplay    = dlq.ErrFailedReplay    // a replay that failed again, left out (dlq.ErrFailedReplay)
	ErrNoRecord        = dlq.ErrNoRecord        // no record at the given coordinates (dlq.ErrNoRecord)
	ErrBackwards       = dlq.ErrBackwards       // Purge would move a position back (dlq.ErrBackwards)
	ErrInterrupted     = dlq.ErrInterrupted     // Replay's context ended first (dlq.ErrInterrupted)

	// ErrGroupNotFound: the consumer group has no members and no committed
	// offsets.
	ErrGroupNotFound = errors.New("consumer group not found")

	// ErrGroupActive: ResetOffsets was asked to move the committed offsets
	// of a group that has members. Kafka refuses such a commit from a
	// non-member (UNKNOWN_MEMBER_ID), and a member would overwrite it at its
	// next commit: stop the group's members first.
	ErrGroupActive = errors.New("consumer group has members")
)
