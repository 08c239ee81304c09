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

// DefaultReplication returns the replication factor and min.insync.replicas
// for new topics on a cluster of brokers brokers: RF min(3, brokers) and
// min ISR RF-1, at least 1. That is the real-cluster default of SYSTEM.md
// (RF 3, min ISR 2: one broker may fail without stopping acks=all writes)
// and 1/1 on a single broker such as the embedded one.
func DefaultReplication(brokers int) (rf int16, minISR int) {
	rf = int16(min(3, max(brokers, 1)))
	return rf, max(int(rf)-1, 1)
}

// CreateResult is the outcome of creating one topic.
type CreateResult struct {
	// Topic and the partitions, replication factor and min.insync.replicas
	// it was (or would have been) created with.
	Topic             string `json:"topic"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int16  `json:"replicationFactor"`
	MinInsyncReplicas int    `json:"minInsyncReplicas,omitempty"`
	// Status is "created", "exists" (left as it is) or "failed".
	Status string `json:"status"`
	// Error is the broker's reason for a failure.
	Error string `json:"error,omitempty"`
	err   error
}

// CreateTopics creates each topic of specs that does not exist yet, with
// configs added to every topic's configuration (nil for none), and reports
// each topic's outcome in specs order. Existing topics are left as they are
// (their partitions and configs are never changed). It returns an error
// joining every failure, each naming the topic and the broker's reason.
func CreateTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec, configs map[string]string) ([]CreateResult, error) {
	var errs []error
	out := make([]CreateResult, 0, len(specs))
	for _, s := range specs {
		cfg := map[string]*string{}
		for k, v := range configs {
			cfg[k] = &v
		}
		if s.MinInsyncReplicas > 0 {
			v := strconv.Itoa(s.MinInsyncReplicas)
			cfg["min.insync.replicas"] = &v
		}
		r := CreateResult{Topic: s.Name, Partitions: s.Partitions, ReplicationFactor: s.ReplicationFactor, MinInsyncReplicas: s.MinInsyncReplicas}
		resp, cerr := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, cfg, s.Name)
		if cerr == nil {
			cerr = resp.Err
			if cerr != nil && resp.ErrMessage != "" {
				cerr = fmt.Errorf("%w: %s", cerr, resp.ErrMessage)
			}
		}
		switch {
		case cerr == nil:
			r.Status = "created"
		case errors.Is(cerr, kerr.TopicAlreadyExists):
			r.Status = "exists"
		default:
			r.Status, r.err = "failed", fmt.Errorf("create topic %s (partitions %d, replication factor %d): %w", s.Name, s.Partitions, s.ReplicationFactor, cerr)
			r.Error = r.err.Error()
			errs = append(errs, r.err)
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// EnsureTopics creates the topics that do not exist yet and leaves existing
// ones as they are (it never changes partitions or configs). It returns an
// error naming each topic that could not be created, with the broker's reason.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec) (created []string, err error) {
	res, err := CreateTopics(ctx, adm, specs, nil)
	for _, r := range res {
		if r.Status == "created" {
			created = append(created, r.Topic)
		}
	}
	return created, err
}

// TopicInfo describes an existing topic.
type TopicInfo struct {
	Topic             string `json:"topic"`             // name
	Partitions        int    `json:"partitions"`        // partition count
	ReplicationFactor int    `json:"replicationFactor"` // replicas per partition (the largest)
	// MinInsyncReplicas and CleanupPolicy are the topic's effective
	// configs ("" when the broker did not say).
	MinInsyncReplicas string `json:"minInsyncReplicas"`
	CleanupPolicy     string `json:"cleanupPolicy"`
	// UnderReplicated counts partitions whose ISR is smaller than their
	// replica set; Offline counts partitions without a leader.
	UnderReplicated int  `json:"underReplicated"`
	Offline         int  `json:"offline"`
	Internal        bool `json:"internal,omitempty"` // __consumer_offsets and the like
	// Messages is the sum over partitions of end offset minus start offset
	// (records and transaction markers now stored).
	Messages int64 `json:"messages"`
}

// ListTopics describes every topic (internal ones too when internal is
// set), sorted by name: partitions, replication factor, ISR health,
// min.insync.replicas, cleanup.policy and stored offsets.
func ListTopics(ctx context.Context, adm *kadm.Client, internal bool) ([]TopicInfo, error) {
	var (
		td  kadm.TopicDetails
		err error
	)
	if internal {
		td, err = adm.ListTopicsWithInternal(ctx)
	} else {
		td, err = adm.ListTopics(ctx)
	}
	if err != nil {
		return nil, err
	}
	names := td.Names()
	out := make([]TopicInfo, 0, len(names))
	if len(names) == 0 {
		return out, nil
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil && len(cfgs) == 0 {
		return nil, fmt.Errorf("topic configs: %w", err)
	}
	starts, serr := adm.ListStartOffsets(ctx, names...)
	ends, eerr := adm.ListEndOffsets(ctx, names...)
	for _, n := range names {
		d := td[n]
		ti := TopicInfo{Topic: n, Partitions: len(d.Partitions), Internal: d.IsInternal}
		for p, pd := range d.Partitions {
			ti.ReplicationFactor = max(ti.ReplicationFactor, len(pd.Replicas))
			if len(pd.ISR) < len(pd.Replicas) {
				ti.UnderReplicated++
			}
			if pd.Leader < 0 {
				ti.Offline++
			}
			if serr == nil && eerr == nil {
				s, sok := starts.Lookup(n, p)
				e, eok := ends.Lookup(n, p)
				if sok && eok && s.Err == nil && e.Err == nil {
					ti.Messages += e.Offset - s.Offset
				}
			}
		}
		if rc, err := cfgs.On(n, nil); err == nil {
			for _, c := range rc.Configs {
				if c.Value == nil {
					continue
				}
				switch c.Key {
				case "min.insync.replicas":
					ti.MinInsyncReplicas = *c.Value
				case "cleanup.policy":
					ti.CleanupPolicy = *c.Value
				}
			}
		}
		out = append(out, ti)
	}
	return out, nil
}
