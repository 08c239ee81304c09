package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrMissingTopic is wrapped by the *MissingTopicError Run returns when the
// DLQ or a retry topic does not exist.
var ErrMissingTopic = errors.New("processor: topic does not exist")

// MissingTopicError is returned by Run (Processor and TxnProcessor) before
// it joins the group, when topics the runtime writes to (the DLQ, the retry
// topics) do not exist and CreateTopics is not enabled. Nothing was consumed
// or committed. Partitions is the partition count to create them with: the
// largest of the source topics' (0 when no source topic exists either).
type MissingTopicError struct {
	Topics     []string
	Partitions int32
}

func (e *MissingTopicError) Error() string {
	parts := "the source topic's partition count"
	switch {
	case e.Partitions == 1:
		parts = "1 partition, as the source topic"
	case e.Partitions > 1:
		parts = fmt.Sprintf("%d partitions, as the source topic", e.Partitions)
	}
	what, it := "topic "+e.Topics[0]+" does not exist", "it"
	if len(e.Topics) > 1 {
		what, it = "topics "+strings.Join(e.Topics, ", ")+" do not exist", "them"
	}
	cmds := make([]string, len(e.Topics))
	for i, t := range e.Topics {
		cmds[i] = fmt.Sprintf("kafka-topics.sh --create --topic %s --partitions %d", t, max(e.Partitions, 1))
	}
	return fmt.Sprintf("processor: %s: the runtime writes failed records there. Create %s (%s), e.g.\n  %s\nor pass processor.CreateTopics(true)",
		what, it, parts, strings.Join(cmds, "\n  "))
}

func (e *MissingTopicError) Unwrap() error { return ErrMissingTopic }

// CreateTopics makes Run create the DLQ and the retry topics when they do
// not exist, before it joins the group: with the partition count of the
// source topic (the largest, with several Topics) and the cluster's default
// replication factor and configs (CreateTopics with replication factor -1,
// KIP-464; Kafka 2.4+). Default false: a missing topic is a
// *MissingTopicError from Run, since topic layout is usually the operator's.
// Either way the runtime checks the topics once at start; a topic deleted
// later makes the writes fail (see Health.Blocked).
func CreateTopics(create bool) Opt { return opt(func(c *cfg) { c.createTopics = create }) }

// topicCheckTimeout bounds the start check of the runtime's topics.
const topicCheckTimeout = 30 * time.Second

// ensureTopics checks that the topics the runtime writes to (need) exist,
// creating the missing ones when c.createTopics is set. cl may be any client
// of the cluster; the check uses Metadata and CreateTopics requests only.
func ensureTopics(ctx context.Context, cl *kgo.Client, c *cfg, need []string) error {
	if len(need) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, topicCheckTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	all := append(slices.Clone(c.topics), need...)
	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return fmt.Errorf("processor: checking topics %s: %w", strings.Join(need, ", "), err)
	}
	var partitions int32
	for _, t := range c.topics {
		if d, ok := details[t]; ok && d.Err == nil {
			partitions = max(partitions, int32(len(d.Partitions)))
		}
	}
	var missing []string
	for _, t := range need {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case d.Err != nil:
			return fmt.Errorf("processor: checking topic %s: %w", t, d.Err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !c.createTopics || partitions == 0 {
		return &MissingTopicError{Topics: missing, Partitions: partitions}
	}
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, missing...)
	if err != nil {
		return fmt.Errorf("processor: creating topics %s: %w", strings.Join(missing, ", "), err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("processor: creating topic %s (%d partitions): %w", r.Topic, partitions, r.Err)
		}
	}
	c.logger.Info("created the runtime's topics", "topics", missing, "partitions", partitions)
	return nil
}

// writeTopics returns the topics the runtime writes to: the retry topics and,
// when enabled, the DLQ.
func (c *cfg) writeTopics(retryTopics []string) []string {
	out := slices.Clone(retryTopics)
	if c.dlq {
		out = append(out, c.dlqTopic)
	}
	return out
}
