// Package ops holds the operator's tools over kadm: topic creation and
// listing, consumer group state and lag, and the DLQ tools.
package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ordercast/ordercast/order"
	"github.com/ordercast/ordercast/processor"
)

// TopicSpec describes a topic to create: name, partition count, replication
// factor and min.insync.replicas (0 leaves the broker default).
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	MinInsyncReplicas int
}

// Layout sizes the order system's topics. Defaults for a real cluster
// (SYSTEM.md): 6 partitions, RF 3, min.insync.replicas 2; on a single broker
// RF and min ISR are 1.
type Layout struct {
	Partitions        int32
	ReplicationFactor int16
	MinInsyncReplicas int
	// RetryDelays are the per-group retry topic delays: one topic
	// "<group>.retry.<n>" per delay, for the groups that use retry topics
	// (every group but fulfillment, whose exactly-once mode retries in place).
	RetryDelays []time.Duration
}

// SystemTopics lists every topic of the order system: the three event topics
// and, per consumer group, its retry topics and its DLQ. DLQ and retry topics
// get as many partitions as the event topics (fewer would work: the DLQ
// partition is chosen by key).
func SystemTopics(l Layout) []TopicSpec {
	spec := func(name string) TopicSpec {
		return TopicSpec{Name: name, Partitions: l.Partitions, ReplicationFactor: l.ReplicationFactor, MinInsyncReplicas: l.MinInsyncReplicas}
	}
	out := []TopicSpec{spec(order.TopicOrderCreated), spec(order.TopicPaymentProcessed), spec(order.TopicShipmentRequested)}
	for _, g := range order.Groups {
		if g != order.GroupFulfillment {
			for _, t := range processor.RetryTopicNames(g, len(l.RetryDelays)) {
				out = append(out, spec(t))
			}
		}
		out = append(out, spec(processor.DLQTopic(g)))
	}
	return out
}

// EnsureTopics creates the topics that do not exist yet and leaves existing
// ones as they are (it never changes partitions or configs). It returns an
// error naming each topic that could not be created, with the broker's reason.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec) (created []string, err error) {
	var errs []error
	for _, s := range specs {
		var cfg map[string]*string
		if s.MinInsyncReplicas > 0 {
			v := strconv.Itoa(s.MinInsyncReplicas)
			cfg = map[string]*string{"min.insync.replicas": &v}
		}
		resp, cerr := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, cfg, s.Name)
		if cerr == nil {
			cerr = resp.Err
		}
		switch {
		case cerr == nil:
			created = append(created, s.Name)
		case errors.Is(cerr, kerr.TopicAlreadyExists):
		default:
			errs = append(errs, fmt.Errorf("create topic %s (partitions %d, replication factor %d): %w", s.Name, s.Partitions, s.ReplicationFactor, cerr))
		}
	}
	return created, errors.Join(errs...)
}
