// This file holds the DLQ handle: one consumer group's dead-letter topic and
// the clients that reach it. The operations are in list.go (List, Show),
// replay.go (Replay), purge.go (Purge) and blocked.go (BlockedKeys); what
// they share is in record.go (the record and its coordinates), scan.go
// (selecting and reading records), payload.go (decoding values for people)
// and txn.go (the transactional id and the read-back of commits).
// StateTopic (state.go) holds the purge positions and replay marks.

package dlq

import (
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
)

// DLQ is the operator's handle on one consumer group's dead-letter topic
// "<group>.dlq" (processor.DLQTopic) and its state in StateTopic.
//
// List and Show only read. Replay and Purge write the state topic inside a
// Kafka transaction with the transactional id "ordercast-dlq-<group>": a
// second Replay or Purge of the same group started elsewhere fences the first
// (whose transaction then aborts), and each reads the state only after
// fencing, so two concurrent replays cannot both replay one record. Nothing
// here needs more than Kafka 2.5 (KIP-447 is not used) or differs on the
// embedded broker.
//
// A DLQ's methods may be called concurrently; Close it when done.
type DLQ struct {
	group string
	topic string
	opts  []kgo.Opt
	cl    *kgo.Client
	adm   *kadm.Client
}

// New returns the DLQ tools for group. opts are the franz-go options to
// reach the cluster (kgo.SeedBrokers and any TLS or SASL options); the
// clients it creates add their own consume or transactional options, so opts
// should not set a consumer, a transactional id or a partitioner other than
// the one replayed records are to be written with. It fails on an empty
// group or invalid options: nothing is dialled until a method is called.
func New(group string, opts ...kgo.Opt) (*DLQ, error) {
	if group == "" {
		return nil, errors.New("dlq: a consumer group is required (its DLQ is <group>.dlq)")
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &DLQ{group: group, topic: processor.DLQTopic(group), opts: slices.Clone(opts), cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the DLQ's client. Calls made after Close fail.
func (d *DLQ) Close() { d.cl.Close() }

// Topic returns the DLQ topic, "<group>.dlq". It does not block.
func (d *DLQ) Topic() string { return d.topic }
