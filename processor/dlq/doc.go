// Package dlq lists, inspects, replays and purges the dead letters of a
// processor consumer group: the records a processor.Processor wrote to the
// group's DLQ topic "<group>.dlq" (processor.DLQTopic) with the runtime's
// headers (processor.HeaderOriginalTopic, HeaderErrorClass and the others).
// It needs nothing of an application but the cluster: an adopter of
// processor uses it as is, and `ordercast dlq ...` and the operator's console
// are thin fronts of it.
//
// # Operations
//
//   - New opens the tools of one group; Close releases its client.
//   - List counts the selected records by error class and original topic and
//     returns them without their values; Show returns one record with its
//     value and every header. Both only read (read_committed).
//   - Replay writes the selected records back to their original topic
//     (TargetSource) or to the group's first retry topic (TargetRetry),
//     paced by ReplayOptions.Rate, with processor.HeaderReplayed naming the
//     DLQ record; DryRun writes nothing.
//   - Purge moves the purge position of DLQ partitions: records below it are
//     neither listed nor replayed. Records are never deleted (the topic's
//     retention.ms does that); Force moves a position back.
//   - BlockedKeys reads the group's blocked keys (processor.BlockKeys);
//     replaying a record, once its copy is handled, or purging it releases
//     its key (processor.ReleaseBlockedKey).
//
// A Selection chooses records by partition, offset range, error class, key
// and record ID; the zero Selection is every record not purged.
//
// # Once only
//
// The tools keep their state in StateTopic ("ordercast.dlq.state", compacted,
// one partition, created on the first Replay or Purge): a purge position per
// DLQ partition, and a mark per replayed record. A replayed record and its
// mark are written in the same Kafka transaction (transactional id
// "ordercast-dlq-<group>"), so the mark exists if and only if the record was
// written; a record that has a mark is refused by the next Replay
// (ErrAlreadyReplayed) unless ReplayOptions.Force. Two replays of one group
// at once fence each other (the older one's open transaction aborts), so a
// record is not replayed twice. A replayed record that fails again comes back
// to the DLQ with processor.HeaderReplayed set (Record.ReplayedFrom): a bulk
// Replay skips it unless ReplayOptions.IncludeFailedReplays or named by ID.
//
// # Payloads
//
// Show returns the raw value; Record.Decode turns it into a Payload with a
// Decoder. The default, Bytes (DecodeBytes), shows JSON objects indented,
// printable text as text and anything else as a hex dump; an application
// with a schema registry supplies a Decoder that decodes its wire format and
// checks its contracts.
//
// # Concurrency and errors
//
// A DLQ is safe for concurrent use. Every method blocks on the cluster,
// bounded by its ctx. Errors wrap the package's sentinel errors (ErrNoTopic,
// ErrNoRecord, ErrAlreadyReplayed, ...; test with errors.Is) and say what
// changes the outcome;
// Replay returns a *RefusedError when some selected records were refused and
// the others replayed. It needs Kafka 2.5 or later (KIP-447 is not used) and
// behaves the same on the embedded broker (kfake).
package dlq
