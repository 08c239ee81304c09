package testkafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// How a real cluster's topics are reset, and why each step waits.
//
// Kafka (KRaft) answers DeleteTopics and CreateTopics once the controller
// has committed the change; every broker then applies it to its metadata
// cache and replica manager asynchronously (0.1 to 0.7 s on a 1-node
// Kafka 4.4 on a loaded 2-core machine; the reset of one 3-partition topic
// took 0.2 to 1 s). Meanwhile a broker can still list a deleted topic,
// still answer Metadata with the deleted topic of the same name (same name
// and partition count, old topic ID, leaders and all), or list a
// just-created topic whose partitions its replica manager does not host
// yet (UNKNOWN_TOPIC_OR_PARTITION on ListOffsets, Produce and Fetch). And a CreateTopics that timed out or
// was retried by the client may have been committed: its retry hears
// TOPIC_ALREADY_EXISTS about our own topic, and waiting for that to pass
// never ends (one way to the 90 s of TOPIC_ALREADY_EXISTS once seen; a
// topic a leftover client creates after the listing is another).
//
// So the reset waits on conditions, each with the reset's deadline:
//   - deleted: every broker's metadata lists no non-internal topic (Metadata
//     for all topics, which is kadm's ListTopics), and answers
//     UNKNOWN_TOPIC_OR_PARTITION for each deleted name asked by name;
//   - created: the controller answered with the topic's ID (a topic of the
//     same name with a deleted ID is the old one, still in a cache; one with
//     another ID is deleted and the topic created again, see createTopic);
//   - ready: every broker's metadata shows that ID with all its partitions
//     led, and the leaders answer ListOffsets for every partition.

// resetTopics deletes every non-internal topic of the cluster md describes
// and creates topics (name -> partitions) with replication factor
// min(3, brokers), waiting as said above; cl is the client adm uses.
func resetTopics(ctx context.Context, cl *kgo.Client, adm *kadm.Client, md kadm.Metadata, topics map[string]int32) error {
	nodes := make([]int32, 0, len(md.Brokers))
	for _, b := range md.Brokers {
		nodes = append(nodes, b.NodeID)
	}
	gone, err := deleteTopics(ctx, cl, adm, nodes)
	if err != nil {
		return err
	}
	rf := int16(min(3, len(md.Brokers)))
	ids := make(map[string]kadm.TopicID, len(topics))
	for _, name := range sortedNames(topics) {
		id, err := createTopic(ctx, adm, name, topics[name], rf, gone)
		if err != nil {
			return err
		}
		ids[name] = id
	}
	return waitReady(ctx, cl, nodes, topics, ids)
}

// pollEvery is how often the reset polls the brokers for a condition.
const pollEvery = 20 * time.Millisecond

// topicView is one broker's metadata of one topic.
type topicView struct {
	id         kadm.TopicID
	err        error // the topic's error code (UNKNOWN_TOPIC_OR_PARTITION when absent)
	internal   bool
	partitions int32
	unled      []int32         // partitions without a leader or with an error
	leaders    map[int32]int32 // partition -> leader's node ID, of the led ones
}

// brokerTopics asks broker node for its metadata of names (nil: of every
// topic, internal ones included) and returns it by topic name.
func brokerTopics(ctx context.Context, cl *kgo.Client, node int32, names []string) (map[string]topicView, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		return nil, fmt.Errorf("metadata from broker %d: %w", node, err)
	}
	out := make(map[string]topicView, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		v := topicView{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode), internal: t.IsInternal,
			partitions: int32(len(t.Partitions)), leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				v.unled = append(v.unled, p.Partition)
			} else {
				v.leaders[p.Partition] = p.Leader
			}
		}
		out[*t.Topic] = v
	}
	return out, nil
}

// deleteTopics deletes every topic but the internal ones (__consumer_offsets,
// __transaction_state, __share_group_state, ...) and waits until no broker
// lists any of them. It returns the IDs of the deleted topics: a topic of
// the same name with one of these IDs is the deleted one, still in a cache.
// A topic listed again with a new ID (created meanwhile by a client an
// earlier test left running) is deleted too.
func deleteTopics(ctx context.Context, cl *kgo.Client, adm *kadm.Client, nodes []int32) (map[kadm.TopicID]bool, error) {
	gone := make(map[kadm.TopicID]bool)
	deleted := make(map[string]bool) // every name deleted, to ask for by name
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var why string
	for {
		listed, err := listedEverywhere(ctx, cl, nodes)
		switch {
		case err != nil:
			why = err.Error()
		case len(listed) == 0:
			left, err := knownByName(ctx, cl, nodes, sortedKeys(deleted))
			if err == nil && len(left) == 0 {
				return gone, nil
			}
			why = fmt.Sprintf("no broker lists a topic, but asked by name %v", left)
			if err != nil {
				why = err.Error()
			}
		default:
			var todo []string
			for name, listedIDs := range listed {
				for _, id := range listedIDs {
					if !gone[id] {
						todo = append(todo, name)
						break
					}
				}
			}
			sort.Strings(todo)
			why = fmt.Sprintf("topics %v still listed", sortedKeys(listed))
			if len(todo) > 0 {
				resp, err := adm.DeleteTopics(ctx, todo...)
				if err != nil && !kerr.IsRetriable(err) && ctx.Err() == nil {
					return nil, fmt.Errorf("delete topics %v: %w", todo, err)
				}
				for _, r := range resp.Sorted() {
					switch {
					case r.Err == nil, errors.Is(r.Err, kerr.UnknownTopicOrPartition):
						// Deleted (or already): the ID listed is gone; so is
						// the one the controller answered with, if any.
						for _, id := range listed[r.Topic] {
							gone[id] = true
						}
						if r.ID != (kadm.TopicID{}) {
							gone[r.ID] = true
						}
						deleted[r.Topic] = true
					case kerr.IsRetriable(r.Err):
						why = fmt.Sprintf("delete topic %s: %v", r.Topic, r.Err)
					default:
						return nil, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("deleting every topic: %s after %v: %w", why, resetTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// listedEverywhere returns the non-internal topics any broker of nodes
// lists in its metadata of all topics, with the IDs the brokers list them
// under (two, when one broker's cache still has a deleted topic that
// another already shows recreated).
func listedEverywhere(ctx context.Context, cl *kgo.Client, nodes []int32) (map[string][]kadm.TopicID, error) {
	out := make(map[string][]kadm.TopicID)
	for _, node := range nodes {
		ts, err := brokerTopics(ctx, cl, node, nil)
		if err != nil {
			return nil, err
		}
		for name, v := range ts {
			if !v.internal && !strings.HasPrefix(name, "__") {
				out[name] = append(out[name], v.id)
			}
		}
	}
	return out, nil
}

// knownByName returns "name@broker" for each of names that some broker of
// nodes still answers by name with anything but UNKNOWN_TOPIC_OR_PARTITION.
func knownByName(ctx context.Context, cl *kgo.Client, nodes []int32, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var left []string
	for _, node := range nodes {
		ts, err := brokerTopics(ctx, cl, node, names)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if v, ok := ts[name]; ok && !errors.Is(v.err, kerr.UnknownTopicOrPartition) {
				left = append(left, fmt.Sprintf("%s@%d", name, node))
			}
		}
	}
	return left, nil
}

// createTopic creates one topic and returns its ID. Retriable errors (the
// controller busy or moving, a request timed out) are retried.
// TOPIC_ALREADY_EXISTS is looked into: a topic of that name with a deleted
// ID is the old one in a broker's cache (asked again); one with an ID not
// deleted is either a topic a client of an earlier test created after the
// listing, or ours, created by an attempt whose answer was lost or late
// (kgo retries a request whose connection broke). It cannot be told which,
// so it is deleted and created again: deleting ours costs a round trip,
// keeping another's would give the test its records and configs.
func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32, rf int16, gone map[kadm.TopicID]bool) (kadm.TopicID, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var nerr net.Error
	for {
		r, err := adm.CreateTopic(ctx, partitions, rf, nil, name)
		if err == nil {
			err = r.Err
		}
		switch {
		case err == nil:
			return r.ID, nil
		case errors.Is(err, kerr.TopicAlreadyExists):
			// From the broker, not kadm's metadata cache, which would
			// repeat a stale answer (the old topic, or none) for
			// MetadataMinAge: a request for authorized operations
			// bypasses it.
			td, lerr := adm.ListTopics(kadm.WithAuthorizedOps(ctx), name)
			d, ok := td[name]
			if lerr != nil || !ok || d.Err != nil || gone[d.ID] {
				break // the old topic, or not in this broker's cache yet: ask again
			}
			dr, derr := adm.DeleteTopics(ctx, name)
			if derr == nil && (dr[name].Err == nil || errors.Is(dr[name].Err, kerr.UnknownTopicOrPartition)) {
				gone[d.ID] = true
			}
		case kerr.IsRetriable(err), errors.As(err, &nerr), ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// The controller busy or moving, or the request timed out on a
			// loaded machine (it may have been committed: see above).
		default:
			return kadm.TopicID{}, fmt.Errorf("create topic %s (%d partitions, RF %d): %w", name, partitions, rf, err)
		}
		select {
		case <-ctx.Done():
			return kadm.TopicID{}, fmt.Errorf("create topic %s: still %v after %v: %w", name, err, resetTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitReady waits until every broker of nodes shows each topic with the ID
// it was created with and all its partitions led, and the leaders answer
// ListOffsets for every partition: the test's first produce, fetch or
// offset lookup does not race the creation.
func waitReady(ctx context.Context, cl *kgo.Client, nodes []int32, topics map[string]int32, ids map[string]kadm.TopicID) error {
	if len(topics) == 0 {
		return nil
	}
	names := sortedNames(topics)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		why := notReady(ctx, cl, nodes, names, topics, ids)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("created topics not ready after %v: %s: %w", resetTimeout, why, ctx.Err())
		case <-tick.C:
		}
	}
}

// notReady says why the topics are not ready yet ("" when they are).
func notReady(ctx context.Context, cl *kgo.Client, nodes []int32, names []string, topics map[string]int32, ids map[string]kadm.TopicID) string {
	views := make(map[int32]map[string]topicView, len(nodes))
	for _, node := range nodes {
		ts, err := brokerTopics(ctx, cl, node, names)
		if err != nil {
			return err.Error()
		}
		views[node] = ts
		for _, name := range names {
			v, ok := ts[name]
			switch {
			case !ok || v.err != nil:
				return fmt.Sprintf("broker %d: topic %s: %v", node, name, v.err)
			case ids[name] != (kadm.TopicID{}) && v.id != ids[name]: // zero: a broker without topic IDs
				return fmt.Sprintf("broker %d: topic %s has ID %s, created as %s", node, name, v.id, ids[name])
			case v.partitions != topics[name]:
				return fmt.Sprintf("broker %d: topic %s has %d partitions of %d", node, name, v.partitions, topics[name])
			case len(v.unled) > 0:
				return fmt.Sprintf("broker %d: topic %s partitions %v have no leader", node, name, v.unled)
			}
		}
	}
	// Every partition's leader hosts it: ListOffsets (latest) sent to the
	// leader each broker names, by hand, so that no client's cached
	// metadata (kgo keeps it for MetadataMinAge) stands in for the broker's.
	for _, node := range nodes {
		if why := leadersAnswer(ctx, cl, views[node]); why != "" {
			return why
		}
	}
	return ""
}

// leadersAnswer asks each partition's leader (as view names it) for the
// partition's end offset and says why one did not answer ("" when all did).
func leadersAnswer(ctx context.Context, cl *kgo.Client, view map[string]topicView) string {
	reqs := make(map[int32]*kmsg.ListOffsetsRequest) // leader -> its partitions
	for _, name := range sortedKeys(view) {
		byLeader := make(map[int32]*kmsg.ListOffsetsRequestTopic)
		for p, leader := range view[name].leaders {
			req, ok := reqs[leader]
			if !ok {
				req = kmsg.NewPtrListOffsetsRequest()
				req.ReplicaID = -1
				reqs[leader] = req
			}
			rt, ok := byLeader[leader]
			if !ok {
				req.Topics = append(req.Topics, kmsg.NewListOffsetsRequestTopic())
				rt = &req.Topics[len(req.Topics)-1]
				rt.Topic = name
				byLeader[leader] = rt
			}
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = -1 // latest
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	for leader, req := range reqs {
		resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			return fmt.Sprintf("list offsets on leader %d: %v", leader, err)
		}
		answered := 0
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return fmt.Sprintf("leader %d: end offset of %s/%d: %v", leader, t.Topic, p.Partition, err)
				}
				answered++
			}
		}
		asked := 0
		for _, t := range req.Topics {
			asked += len(t.Partitions)
		}
		if answered != asked {
			return fmt.Sprintf("leader %d answered %d of %d partitions", leader, answered, asked)
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
