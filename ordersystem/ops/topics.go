// Package ops holds the operator's tools over kadm: topic creation and
// listing, consumer group state and lag, and the DLQ tools.
package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/processor"
)

// TopicSpec describes a topic to create: name, partition count, replication
// factor and min.insync.replicas (0 leaves the broker default).
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	MinInsyncReplicas int
	// Compact creates the topic with cleanup.policy=compact (a table
	// keyed by record key, such as a group's blocked keys).
	Compact bool
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
// and, per consumer group, its retry topics and its DLQ, and for the groups
// that hold keys behind their retry topics (KeyBlockGroups) their compacted
// blocked-keys topic (processor.BlockedKeysTopicName, 1 partition). DLQ and retry topics
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
		if len(l.RetryDelays) > 0 && slices.Contains(KeyBlockGroups, g) {
			s := spec(processor.BlockedKeysTopicName(g))
			s.Partitions, s.Compact = 1, true
			out = append(out, s)
		}
		out = append(out, spec(processor.DLQTopic(g)))
	}
	return out
}

// KeyBlockGroups are the consumer groups that keep each customer's order
// through their retry topics (processor.BlockKeys) when the system runs in
// key order: a customer's payments and order records are applied in the
// order of that customer's orderCreated records.
var KeyBlockGroups = []string{order.GroupPayments, order.GroupOrders}

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
	// Topic is the topic's name. Partitions, ReplicationFactor and
	// MinInsyncReplicas are, for a topic created (or failed), those it was
	// created (or would have been created) with; for a topic that existed
	// already, those it actually has, as the broker describes it (0 when
	// it could not be described, or min.insync.replicas was not reported).
	Topic             string `json:"topic"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int16  `json:"replicationFactor"`
	MinInsyncReplicas int    `json:"minInsyncReplicas,omitempty"`
	// Status is "created", "exists" (left as it is) or "failed".
	Status string `json:"status"`
	// Note is set only for a topic that existed already and differs from
	// the request, or could not be described. It names each difference,
	// actual value first ("12 partitions, not 3; retention.ms=604800000,
	// not 1000; left unchanged: use kafka-topics / kafka-configs to
	// change it"), or says why the topic's settings are unknown.
	Note string `json:"note,omitempty"`
	// Error is the broker's reason for a failure.
	Error string `json:"error,omitempty"`
	err   error
}

// noteUnchanged ends a CreateResult.Note that lists differences.
const noteUnchanged = "left unchanged: use kafka-topics / kafka-configs to change it"

// CreateTopics creates each topic of specs that does not exist yet, with
// configs added to every topic's configuration (nil for none; a spec's
// MinInsyncReplicas, when not 0, overrides configs' min.insync.replicas),
// and reports each topic's outcome in specs order.
//
// Existing topics are left as they are: their partitions and configs are
// never changed, and their status is "exists" (not an error: creation is
// idempotent). Each of them is described (one metadata request and one
// DescribeConfigs request for all of them), and its result reports its
// actual partitions, replication factor and min.insync.replicas, with a
// Note naming every difference from the request: the partition count, the
// replication factor (each compared when the spec's is > 0), and each
// config asked for (min.insync.replicas and the keys of configs), a config
// the broker does not report counting as different. When the topic cannot
// be described, its values are 0 and the Note says why.
//
// It returns an error joining every creation failure, each naming the
// topic and the broker's reason; a failure to describe an existing topic
// is only reported in its Note.
func CreateTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec, configs map[string]string) ([]CreateResult, error) {
	var errs []error
	out := make([]CreateResult, 0, len(specs))
	wanted := make([]map[string]string, 0, len(specs)) // per result: the configs asked for
	var existing []string
	for _, s := range specs {
		want := map[string]string{}
		cfg := map[string]*string{}
		for k, v := range configs {
			want[k] = v
		}
		if s.MinInsyncReplicas > 0 {
			want["min.insync.replicas"] = strconv.Itoa(s.MinInsyncReplicas)
		}
		if s.Compact {
			want["cleanup.policy"] = "compact"
		}
		for k, v := range want {
			cfg[k] = &v
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
			existing = append(existing, s.Name)
		default:
			r.Status, r.err = "failed", fmt.Errorf("create topic %s (partitions %d, replication factor %d): %w", s.Name, s.Partitions, s.ReplicationFactor, cerr)
			r.Error = r.err.Error()
			errs = append(errs, r.err)
		}
		out = append(out, r)
		wanted = append(wanted, want)
	}
	if len(existing) > 0 {
		describeExisting(ctx, adm, existing, out, wanted)
	}
	return out, errors.Join(errs...)
}

// describeSettle bounds how long listSettled waits for topics the broker
// said exist to appear in its metadata.
const describeSettle = 10 * time.Second

// listSettled is adm.ListTopics(names), asked again (retryFor, for up to
// describeSettle or until ctx ends) while a topic is missing or answers
// UNKNOWN_TOPIC_OR_PARTITION: Apache Kafka reports a topic created a moment
// ago as existing (TOPIC_ALREADY_EXISTS) before every broker's metadata
// lists it.
//
// Each ask goes to the broker (freshMetadata): kadm answers ListTopics from
// the client's metadata cache, which keeps a topic's "unknown" answer for
// MetadataMinAge (5 s by default). A caller that listed the topics before
// another client created them would otherwise be told they are missing
// until that age passed: every service process but the first that raced to
// create the same topics waited about 5 s at start.
func listSettled(ctx context.Context, adm *kadm.Client, names []string) (td kadm.TopicDetails, err error) {
	retryFor(ctx, describeSettle, func() bool {
		td, err = adm.ListTopics(freshMetadata(ctx), names...)
		if err != nil {
			return true
		}
		for _, n := range names {
			if d, ok := td[n]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				return false
			}
		}
		return true
	})
	return td, err
}

// freshMetadata returns ctx marked so that kadm's metadata calls made with
// it are sent to the broker instead of answered from the client's metadata
// cache. kadm offers no other switch for that: a request for the topics'
// authorized operations (KIP-430, kadm.WithAuthorizedOps) bypasses the cache
// (the cache does not hold them). The broker computes those operations for
// the caller's principal; that is the whole extra cost.
func freshMetadata(ctx context.Context) context.Context {
	return kadm.WithAuthorizedOps(ctx)
}

// describeExisting sets the actual values and the Note of each result of
// status "exists" (see CreateTopics); wanted[i] holds the configs asked for
// out[i].
func describeExisting(ctx context.Context, adm *kadm.Client, names []string, out []CreateResult, wanted []map[string]string) {
	td, terr := listSettled(ctx, adm, names)
	cfgs, cerr := adm.DescribeTopicConfigs(ctx, names...)
	for i := range out {
		r := &out[i]
		if r.Status != "exists" {
			continue
		}
		asked := *r
		r.Partitions, r.ReplicationFactor, r.MinInsyncReplicas = 0, 0, 0
		d, ok := td[r.Topic]
		switch {
		case terr != nil:
			r.Note = fmt.Sprintf("not described (%v): its partitions and configs are unknown", terr)
			continue
		case !ok:
			r.Note = "not described (the broker's metadata does not list it): its partitions and configs are unknown"
			continue
		case d.Err != nil:
			r.Note = fmt.Sprintf("not described (%v): its partitions and configs are unknown", d.Err)
			continue
		}
		r.Partitions = int32(len(d.Partitions))
		for _, pd := range d.Partitions {
			r.ReplicationFactor = max(r.ReplicationFactor, int16(len(pd.Replicas)))
		}
		var diffs []string
		if asked.Partitions > 0 && r.Partitions != asked.Partitions {
			diffs = append(diffs, fmt.Sprintf("%d partitions, not %d", r.Partitions, asked.Partitions))
		}
		if asked.ReplicationFactor > 0 && r.ReplicationFactor != asked.ReplicationFactor {
			diffs = append(diffs, fmt.Sprintf("replication factor %d, not %d", r.ReplicationFactor, asked.ReplicationFactor))
		}
		actual := map[string]string{}
		rc, err := cfgs.On(r.Topic, nil)
		if err == nil {
			err = rc.Err
		} else if cerr != nil {
			err = cerr // the request failed (for this topic's broker)
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Value != nil {
					actual[c.Key] = *c.Value
				}
			}
			r.MinInsyncReplicas, _ = strconv.Atoi(actual["min.insync.replicas"])
		}
		keys := make([]string, 0, len(wanted[i]))
		for k := range wanted[i] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if err != nil && len(keys) > 0 {
			diffs = append(diffs, fmt.Sprintf("configs not described (%v): %s unknown", err, strings.Join(keys, ", ")))
			keys = nil
		}
		for _, k := range keys {
			want := wanted[i][k]
			switch have, ok := actual[k]; {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s not reported by the broker, not %s", k, want))
			case have != want:
				diffs = append(diffs, fmt.Sprintf("%s=%s, not %s", k, have, want))
			}
		}
		if len(diffs) > 0 {
			r.Note = strings.Join(diffs, "; ") + "; " + noteUnchanged
		}
	}
}

// EnsureTopics creates the topics that do not exist yet and leaves existing
// ones as they are (it never changes partitions or configs). It returns an
// error naming each topic that could not be created, with the broker's reason.
//
// differ lists the existing topics that are not as specs asks, from the
// metadata listed to find the missing ones (no further request, no further
// right): a partition count other than the spec's, or fewer replicas than
// its replication factor (each compared when the spec's is > 0; more
// replicas than asked is no concern). Each has Status "exists", its actual
// Partitions and ReplicationFactor, and a Note naming the differences
// ("12 partitions, not 6; left unchanged: ..."). min.insync.replicas and
// other configs are not compared.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec) (created []string, differ []CreateResult, err error) {
	// Only the missing ones are created: Kafka refuses CreateTopics for a
	// topic that exists with TOPIC_AUTHORIZATION_FAILED when the principal
	// lacks CREATE, and a service's principal has no CREATE (system.Rights).
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if td, lerr := adm.ListTopics(ctx, names...); lerr == nil {
		missing := specs[:0:0]
		for _, s := range specs {
			d, ok := td[s.Name]
			if !ok || d.Err != nil {
				missing = append(missing, s)
				continue
			}
			if r, ok := existingDiffers(s, d); ok {
				differ = append(differ, r)
			}
		}
		specs = missing
	}
	if len(specs) == 0 {
		return nil, differ, nil
	}
	res, err := CreateTopics(ctx, adm, specs, nil)
	for _, r := range res {
		switch {
		case r.Status == "created":
			created = append(created, r.Topic)
		case r.Status == "exists" && r.Note != "":
			// Created by another process since the listing.
			differ = append(differ, r)
		}
	}
	return created, differ, err
}

// existingDiffers compares an existing topic's metadata with its spec (see
// EnsureTopics).
func existingDiffers(s TopicSpec, d kadm.TopicDetail) (CreateResult, bool) {
	r := CreateResult{Topic: s.Name, Status: "exists", Partitions: int32(len(d.Partitions))}
	for _, pd := range d.Partitions {
		r.ReplicationFactor = max(r.ReplicationFactor, int16(len(pd.Replicas)))
	}
	var diffs []string
	if s.Partitions > 0 && r.Partitions != s.Partitions {
		diffs = append(diffs, fmt.Sprintf("%d partitions, not %d", r.Partitions, s.Partitions))
	}
	if s.ReplicationFactor > 0 && r.ReplicationFactor < s.ReplicationFactor {
		diffs = append(diffs, fmt.Sprintf("replication factor %d, not %d", r.ReplicationFactor, s.ReplicationFactor))
	}
	if len(diffs) == 0 {
		return r, false
	}
	r.Note = strings.Join(diffs, "; ") + "; " + noteUnchanged
	return r, true
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
	// Offsets is the sum over partitions of the high watermark minus the
	// log start offset: the offsets now in the log, which count every
	// transaction marker (one per partition per committed or aborted
	// transaction) and the records of aborted transactions, so it is more
	// than the records a read_committed consumer reads (the number of
	// orders, payments...). Not a record count, hence the name.
	Offsets int64 `json:"offsets"`
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
					ti.Offsets += e.Offset - s.Offset
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
