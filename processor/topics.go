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
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/brokererr"
)

// ErrMissingTopic is wrapped by the *MissingTopicError Run returns when the
// DLQ or a retry topic does not exist.
var ErrMissingTopic = errors.New("processor: topic does not exist")

// MissingTopicError is returned by Run (Processor and TxnProcessor) before
// it joins the group, when topics the runtime writes to (the DLQ, the retry
// topics) do not exist and CreateTopics is not enabled. Nothing was consumed
// or committed. Partitions is the partition count to create them with: the
// largest of the source topics' (0 when no source topic exists either).
//
// When no source topic exists (Sources lists them), CreateTopics(true) does
// not help: the runtime creates only the topics it writes to, with the
// source topics' partition count, and never the topics it reads. The error
// then names the source topics to create first.
type MissingTopicError struct {
	Topics     []string
	Partitions int32
	// Compact is set for the blocked-keys topic (BlockedKeysTopic): a
	// table the runtime keeps, to create compacted (cleanup.policy=compact).
	Compact bool
	// Sources are the source topics (Topics) that do not exist either;
	// set only when none of them exists (Partitions is then 0).
	Sources []string
}

func (e *MissingTopicError) Error() string {
	if len(e.Sources) > 0 {
		what := "source topic " + e.Sources[0] + " does not exist"
		if len(e.Sources) > 1 {
			what = "source topics " + strings.Join(e.Sources, ", ") + " do not exist"
		}
		return fmt.Sprintf("processor: %s: create the topics the group reads before starting it (processor.CreateTopics creates only the topics the runtime writes to, %s, with the source topics' partition count), e.g.\n  kafka-topics.sh --create --topic %s --partitions 6",
			what, strings.Join(e.Topics, ", "), e.Sources[0])
	}
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
	why, extra := "the runtime writes failed records there", ""
	if e.Compact {
		why, parts, extra = "the runtime keeps the group's blocked keys there", "1 partition, compacted", " --config cleanup.policy=compact"
	}
	cmds := make([]string, len(e.Topics))
	for i, t := range e.Topics {
		cmds[i] = fmt.Sprintf("kafka-topics.sh --create --topic %s --partitions %d%s", t, max(e.Partitions, 1), extra)
	}
	return fmt.Sprintf("processor: %s: %s. Create %s (%s), e.g.\n  %s\nor pass processor.CreateTopics(true)",
		what, why, it, parts, strings.Join(cmds, "\n  "))
}

func (e *MissingTopicError) Unwrap() error { return ErrMissingTopic }

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
	var (
		partitions     int32
		missing        []string
		missingSources []string // the source topics the last answer lacked
		missed         int
		firstMiss      time.Time
	)
	retriable := func(err error) bool { return errors.Is(err, errStillMissing) || brokererr.Transient(err) }
	err := brokererr.Retry(ctx, topicCheckTimeout, retriable, func(attempt int, wait time.Duration, err error) {
		if errors.Is(err, errStillMissing) {
			c.logger.Info("checking the runtime's topics again", "attempt", attempt, "in", wait, "error", err)
			return
		}
		// The brokers did not answer (refused, reset, timed out): the
		// operator is told at once, not when the check gives up.
		c.logger.Warn("start: the brokers do not answer yet; trying again", "brokers", c.brokers, "attempt", attempt, "in", wait,
			"gives_up_after", topicCheckTimeout, "error", err)
	}, func() error {
		p, m, ms, err := listNeeded(ctx, cl, c.topics, need, all)
		missingSources = ms
		if err != nil || len(m) == 0 {
			missed = 0
			partitions, missing = p, m
			return err
		}
		partitions, missing = p, m
		if c.createTopics && p > 0 {
			// Creating is safe on a stale answer: a topic that exists
			// after all answers TOPIC_ALREADY_EXISTS, which
			// finishMissing takes as created. No wait then.
			return nil
		}
		// A broker that just restarted can answer Metadata before it has
		// caught up with the cluster's metadata, and one that has just
		// created a topic (ordercast up creates them right before)
		// before its metadata has it: a topic is called missing only when
		// topicCheckMisses answers in a row, over topicCheckSpan, say so.
		if missed++; missed == 1 {
			firstMiss = time.Now()
		}
		if missed < topicCheckMisses || time.Since(firstMiss) < topicCheckSpan {
			return errStillMissing
		}
		return nil
	})
	switch {
	case err != nil && !errors.Is(err, errStillMissing):
		return err
	case len(missing) == 0:
		if len(missingSources) > 0 {
			// Kafka lets a member join for topics that do not exist; it
			// then reads nothing from them, and nothing else says so.
			c.logger.Warn("source topics do not exist: the member reads nothing from them until they are created (a misspelt name?)",
				"topics", missingSources)
		}
		return nil
	}
	return finishMissing(ctx, adm, c, partitions, missing) // missing in topicCheckMisses answers, or till the deadline
}

// errStillMissing makes brokererr.Retry ask again for a topic not yet
// missing in topicCheckMisses answers in a row.
var errStillMissing = errors.New("processor: topic missing in the latest answer")

// topicCheckMisses is how many answers in a row must lack a topic before
// ensureTopics calls it missing (asked with brokererr.Retry's backoff), and
// topicCheckSpan the least time from the first of them to the last: on a
// loaded machine a fresh single-node Kafka 4.4 still answered without a
// topic created a second earlier (three answers took 0.75 s).
const (
	topicCheckMisses = 3
	topicCheckSpan   = 5 * time.Second
)

// listNeeded asks the cluster for the source topics and need, and returns
// the largest source partition count, the topics of need that do not exist,
// the source topics that do not exist, and an error (wrapped with the topics) when the answer is not usable. It
// sends its own Metadata request: kadm's ListTopics answers from the
// client's metadata cache (MetadataMinAge, 5 s), which would repeat a stale
// broker's answer to every attempt.
func listNeeded(ctx context.Context, cl *kgo.Client, sources, need, all []string) (int32, []string, []string, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range all {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("processor: checking topics %s: %w", strings.Join(need, ", "), err)
	}
	type answer struct {
		partitions int32
		err        error
	}
	got := make(map[string]answer, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil {
			got[*t.Topic] = answer{int32(len(t.Partitions)), kerr.ErrorForCode(t.ErrorCode)}
		}
	}
	var partitions int32
	var missingSources []string
	for _, t := range sources {
		if a, ok := got[t]; ok && a.err == nil {
			partitions = max(partitions, a.partitions)
		} else if !ok || errors.Is(a.err, kerr.UnknownTopicOrPartition) {
			missingSources = append(missingSources, t)
		}
	}
	var missing []string
	for _, t := range need {
		a, ok := got[t]
		switch {
		case !ok || errors.Is(a.err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case a.err != nil:
			return 0, nil, nil, fmt.Errorf("processor: checking topic %s: %w", t, a.err)
		}
	}
	return partitions, missing, missingSources, nil
}

// finishMissing reports or creates the missing topics (see CreateTopics).
func finishMissing(ctx context.Context, adm *kadm.Client, c *cfg, partitions int32, missing []string) error {
	if partitions == 0 {
		return &MissingTopicError{Topics: missing, Sources: slices.Clone(c.topics)}
	}
	if !c.createTopics {
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
