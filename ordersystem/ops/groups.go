package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// GroupInfo is one consumer group's state, members, assignment, committed
// offsets and lag.
type GroupInfo struct {
	Group string `json:"group"` // group id
	// Type is "classic" (JoinGroup/SyncGroup), "consumer" (KIP-848) or
	// "share" (a share group, KIP-932).
	Type string `json:"type"`
	// State is the coordinator's view: Stable, PreparingRebalance,
	// CompletingRebalance, Empty, Dead (classic); Stable, Assigning,
	// Reconciling, Empty (KIP-848); Stable, Empty (share).
	State string `json:"state"`
	// Protocol is the partition assignor in use (cooperative-sticky, uniform,
	// ...).
	Protocol    string       `json:"protocol"`
	Coordinator int32        `json:"coordinator"` // node id of the group coordinator
	Members     []MemberInfo `json:"members"`     // sorted by client id
	// Partitions has one row per partition that is assigned to a member or
	// has a committed offset (a share group: share state), sorted by topic
	// and partition.
	Partitions []PartitionLag `json:"partitions"`
	// TotalLag sums the known lags (Lag >= 0) of Partitions: for a share
	// group its backlog, the records not yet acknowledged.
	TotalLag int64 `json:"totalLag"`
	// Error is set when the group could not be described or its offsets
	// fetched; the other fields are then partial.
	Error string `json:"error,omitempty"`

	notFound bool
}

// MemberInfo is one group member and the partitions it holds.
type MemberInfo struct {
	MemberID   string `json:"memberId"`             // assigned by the coordinator
	InstanceID string `json:"instanceId,omitempty"` // static membership (KIP-345), if set
	ClientID   string `json:"clientId"`             // the member's client.id
	Host       string `json:"host"`                 // the member's address as the broker sees it
	// Assigned maps topic to the partitions the member holds, sorted.
	Assigned map[string][]int32 `json:"assigned"`
}

// PartitionLag is one partition of a group.
type PartitionLag struct {
	Topic     string `json:"topic"`     // topic name
	Partition int32  `json:"partition"` // partition number
	// MemberID and ClientID of the member holding it; empty when none does
	// (an Empty group, or mid-rebalance) and in a share group, where
	// several members may hold a partition (Members says which).
	MemberID string `json:"memberId,omitempty"`
	ClientID string `json:"clientId,omitempty"`
	// Committed is the group's committed offset (the next offset to
	// consume), -1 when nothing was committed. In a share group it is the
	// share-partition start offset (SPSO: every record before it is
	// acknowledged or archived), -1 when the partition has no share state.
	Committed int64 `json:"committed"`
	// End is the high watermark (log end offset), -1 when unknown.
	End int64 `json:"end"`
	// Lag is End minus Committed (End minus the log start offset when
	// nothing was committed), never negative; -1 when unknown (see Error).
	// In a share group it is the broker's share lag where the broker
	// reports it (KIP-1226, DescribeShareGroupOffsets v1, Kafka 4.2+: the
	// records from the SPSO on not yet acknowledged; ShareLag true), else
	// End minus the SPSO (which also counts the records acknowledged
	// beyond the SPSO: an upper bound).
	Lag int64 `json:"lag"`
	// ShareLag says Lag is the broker's share lag (KIP-1226).
	ShareLag bool `json:"shareLag,omitempty"`
	// Error says why Lag is unknown (commit or offset lookup failed).
	Error string `json:"error,omitempty"`
}

// DescribeGroups returns the state, members, assignment, committed offsets,
// end offsets and lag of groups (every group of the cluster when none is
// named), sorted by name. Lag is computed as kafka-consumer-groups.sh does:
// high watermark minus committed offset, per partition (kadm's
// CalculateGroupLag rule, including its fallback to the log start offset
// for partitions without a commit).
//
// Classic groups are described with DescribeGroups; groups on the KIP-848
// protocol (which Kafka 4 reports as "not a classic group") with
// ConsumerGroupDescribe; share groups (KIP-932: listed as type share, or a
// named group neither of those knows) with ShareGroupDescribe and
// DescribeShareGroupOffsets (see PartitionLag.Lag). A named group with no
// members and no committed offsets (nor share state) is reported with an
// Error wrapping ErrGroupNotFound. The returned
// error is for failures that leave nothing to report (broker unreachable,
// authorization).
func DescribeGroups(ctx context.Context, adm *kadm.Client, groups ...string) ([]GroupInfo, error) {
	types := map[string]string{}
	if len(groups) == 0 {
		listed, err := adm.ListGroups(ctx)
		if err != nil && len(listed) == 0 {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		for _, g := range listed {
			if g.ProtocolType == "consumer" || g.ProtocolType == "" || g.ProtocolType == "share" || g.GroupType == "share" {
				groups = append(groups, g.Group)
				types[g.Group] = g.GroupType
				if g.ProtocolType == "share" {
					types[g.Group] = "share"
				}
			}
		}
		if len(groups) == 0 {
			return []GroupInfo{}, nil
		}
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	infos := make(map[string]*GroupInfo, len(groups))
	for _, g := range groups {
		infos[g] = &GroupInfo{Group: g, Type: "classic", Members: []MemberInfo{}, Partitions: []PartitionLag{}}
	}

	described, err := describeGroupsRetrying(ctx, adm, groups)
	if err != nil && len(described) == 0 {
		return nil, fmt.Errorf("describe groups: %w", err)
	}
	assigned := map[string]map[string]map[int32]*MemberInfo{} // group -> topic -> partition -> member
	var nextGen, shares []string
	for _, g := range groups {
		d, ok := described[g]
		gi := infos[g]
		switch {
		case types[g] == "share":
			shares = append(shares, g)
			continue
		case types[g] == "consumer" || (ok && errors.Is(d.Err, kerr.GroupIDNotFound)):
			nextGen = append(nextGen, g)
			continue
		case !ok:
			gi.Error = "not described by the broker"
			continue
		case d.Err != nil:
			gi.Error = d.Err.Error()
			continue
		}
		gi.State, gi.Protocol, gi.Coordinator = d.State, d.Protocol, d.Coordinator.NodeID
		for _, m := range d.Members {
			mi := MemberInfo{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
			if m.InstanceID != nil {
				mi.InstanceID = *m.InstanceID
			}
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range c.Topics {
					mi.Assigned[t.Topic] = append(mi.Assigned[t.Topic], t.Partitions...)
				}
			}
			gi.Members = append(gi.Members, mi)
		}
	}
	if len(nextGen) > 0 {
		cds, err := adm.DescribeConsumerGroups(ctx, nextGen...)
		for _, g := range nextGen {
			gi := infos[g]
			d, ok := cds[g]
			switch {
			case !ok && err != nil:
				gi.Error = err.Error()
				continue
			case !ok:
				gi.Error = "not described by the broker"
				continue
			case errors.Is(d.Err, kerr.GroupIDNotFound):
				shares = append(shares, g) // neither a classic nor a KIP-848 group: a share group, or see below
				continue
			case d.Err != nil:
				gi.Error = d.Err.Error()
				continue
			}
			gi.Type, gi.State, gi.Protocol, gi.Coordinator = "consumer", d.State, d.AssignorName, d.Coordinator.NodeID
			for _, m := range d.Members {
				mi := MemberInfo{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
				if m.InstanceID != nil {
					mi.InstanceID = *m.InstanceID
				}
				for t, ps := range m.Assignment {
					for p := range ps {
						mi.Assigned[t] = append(mi.Assigned[t], p)
					}
				}
				gi.Members = append(gi.Members, mi)
			}
		}
	}
	shareOffsets := describeShares(ctx, adm, shares, infos)
	for _, g := range groups {
		gi := infos[g]
		assigned[g] = map[string]map[int32]*MemberInfo{}
		slices.SortFunc(gi.Members, func(a, b MemberInfo) int {
			return cmp.Or(cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.MemberID, b.MemberID))
		})
		for i := range gi.Members {
			m := &gi.Members[i]
			for t, ps := range m.Assigned {
				slices.Sort(ps)
				if assigned[g][t] == nil {
					assigned[g][t] = map[int32]*MemberInfo{}
				}
				for _, p := range ps {
					assigned[g][t][p] = m
				}
			}
		}
	}

	var committing []string // the groups with committed offsets: not the share groups
	for _, g := range groups {
		if infos[g].Type != "share" {
			committing = append(committing, g)
		}
	}
	fetched := adm.FetchManyOffsets(ctx, committing...)
	topics := kadm.TopicsSet{}
	for _, so := range shareOffsets {
		so.Offsets.Each(func(o kadm.ShareOffset) { topics.Add(o.Topic, o.Partition) })
	}
	for _, g := range groups {
		for t, ps := range assigned[g] {
			for p := range ps {
				topics.Add(t, p)
			}
		}
		if r, ok := fetched[g]; ok {
			if r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
				infos[g].Error = cmp.Or(infos[g].Error, "fetch committed offsets: "+r.Err.Error())
			}
			r.Fetched.Each(func(o kadm.OffsetResponse) { topics.Add(o.Topic, o.Partition) })
		}
	}
	var starts, ends kadm.ListedOffsets
	if names := topics.Topics(); len(names) > 0 {
		if starts, err = adm.ListStartOffsets(ctx, names...); err != nil && len(starts) == 0 {
			return nil, fmt.Errorf("start offsets: %w", err)
		}
		if ends, err = adm.ListEndOffsets(ctx, names...); err != nil && len(ends) == 0 {
			return nil, fmt.Errorf("end offsets: %w", err)
		}
	}

	out := make([]GroupInfo, 0, len(groups))
	for _, g := range groups {
		gi := infos[g]
		rows := map[string]map[int32]*PartitionLag{}
		row := func(t string, p int32) *PartitionLag {
			if rows[t] == nil {
				rows[t] = map[int32]*PartitionLag{}
			}
			r := rows[t][p]
			if r == nil {
				r = &PartitionLag{Topic: t, Partition: p, Committed: -1, End: -1, Lag: -1}
				rows[t][p] = r
			}
			return r
		}
		for t, ps := range assigned[g] {
			for p, m := range ps {
				r := row(t, p)
				if gi.Type != "share" {
					r.MemberID, r.ClientID = m.MemberID, m.ClientID
				}
			}
		}
		shareLag := map[string]map[int32]int64{}
		shareOffsets[g].Offsets.Each(func(o kadm.ShareOffset) {
			r := row(o.Topic, o.Partition)
			if o.Err != nil {
				r.Error = "share-partition start offset: " + o.Err.Error()
				return
			}
			r.Committed = max(o.StartOffset, -1)
			if o.Lag >= 0 {
				if shareLag[o.Topic] == nil {
					shareLag[o.Topic] = map[int32]int64{}
				}
				shareLag[o.Topic][o.Partition] = o.Lag
			}
		})
		fetched[g].Fetched.Each(func(o kadm.OffsetResponse) {
			r := row(o.Topic, o.Partition)
			if o.Err != nil {
				r.Error = "committed offset: " + o.Err.Error()
				return
			}
			r.Committed = o.At
		})
		for _, ps := range rows {
			for _, r := range ps {
				fillLag(r, starts, ends)
				if l, ok := shareLag[r.Topic][r.Partition]; ok && r.Error == "" {
					r.Lag, r.ShareLag = l, true
				}
				gi.Partitions = append(gi.Partitions, *r)
				if r.Lag > 0 {
					gi.TotalLag += r.Lag
				}
			}
		}
		slices.SortFunc(gi.Partitions, func(a, b PartitionLag) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		if gi.Error == "" && len(gi.Members) == 0 && len(gi.Partitions) == 0 && (gi.State == "Dead" || gi.State == "") {
			gi.Error = fmt.Sprintf("%s: %v (no members, no committed offsets; `ordercast groups` lists the groups)", g, ErrGroupNotFound)
			gi.notFound = true
		}
		out = append(out, *gi)
	}
	return out, nil
}

// describeShares describes the share groups among groups (ShareGroupDescribe)
// into infos: type, state, assignor, coordinator, members. A group the
// broker does not know as a share group is left as it is. It returns the
// share-partition offsets of the share groups found
// (DescribeShareGroupOffsets); an error is set on the group's info.
func describeShares(ctx context.Context, adm *kadm.Client, groups []string, infos map[string]*GroupInfo) kadm.DescribedShareGroupsOffsets {
	if len(groups) == 0 {
		return nil
	}
	described, err := adm.DescribeShareGroups(ctx, groups...)
	var found []string
	for _, g := range groups {
		gi := infos[g]
		d, ok := described[g]
		switch {
		case !ok && err != nil:
			if !errors.Is(err, kerr.UnsupportedVersion) { // a broker without share groups
				gi.Error = cmp.Or(gi.Error, "describe share group: "+err.Error())
			}
			continue
		case !ok, errors.Is(d.Err, kerr.GroupIDNotFound), errors.Is(d.Err, kerr.InvalidGroupID):
			continue
		case d.Err != nil:
			gi.Error = cmp.Or(gi.Error, "describe share group: "+d.Err.Error())
			continue
		}
		found = append(found, g)
		gi.Type, gi.State, gi.Protocol, gi.Coordinator, gi.Error = "share", d.GroupState, d.Assignor, d.Coordinator.NodeID, ""
		for _, m := range d.Members {
			mi := MemberInfo{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
			for t, ps := range m.Assignment {
				for p := range ps {
					mi.Assigned[t] = append(mi.Assigned[t], p)
				}
			}
			gi.Members = append(gi.Members, mi)
		}
	}
	if len(found) == 0 {
		return nil
	}
	offsets, err := adm.DescribeShareGroupOffsets(ctx, found...)
	for _, g := range found {
		o, ok := offsets[g]
		switch {
		case !ok && err != nil:
			infos[g].Error = "share-partition offsets: " + err.Error()
		case ok && o.Err != nil && !errors.Is(o.Err, kerr.GroupIDNotFound):
			infos[g].Error = "share-partition offsets: " + o.Err.Error()
		}
	}
	return offsets
}

// fillLag sets End and Lag of r from the listed offsets, as kadm's
// CalculateGroupLagWithStartOffsets does.
func fillLag(r *PartitionLag, starts, ends kadm.ListedOffsets) {
	if r.Error != "" {
		return
	}
	e, ok := ends.Lookup(r.Topic, r.Partition)
	switch {
	case !ok:
		r.Error = "end offset: missing from the broker's answer"
		return
	case e.Err != nil:
		r.Error = "end offset: " + e.Err.Error()
		return
	}
	r.End = e.Offset
	switch {
	case r.Committed >= 0:
		r.Lag = e.Offset - r.Committed
	default:
		r.Lag = e.Offset
		if s, ok := starts.Lookup(r.Topic, r.Partition); ok && s.Err == nil {
			r.Lag = e.Offset - s.Offset
		}
	}
	r.Lag = max(r.Lag, 0)
}

// coordinatorRetryFor bounds describeGroupsRetrying's retries.
const coordinatorRetryFor = 10 * time.Second

// describeGroupsRetrying is adm.DescribeGroups, asked again (with backoff,
// for up to coordinatorRetryFor or until ctx ends) while the answer is a
// transient coordinator error: COORDINATOR_NOT_AVAILABLE and
// COORDINATOR_LOAD_IN_PROGRESS (a cluster just started, __consumer_offsets
// still being created or loaded) and NOT_COORDINATOR (it moved).
func describeGroupsRetrying(ctx context.Context, adm *kadm.Client, groups []string) (described kadm.DescribedGroups, err error) {
	transient := func(err error) bool {
		return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator)
	}
	retryFor(ctx, coordinatorRetryFor, func() bool {
		described, err = adm.DescribeGroups(ctx, groups...)
		if transient(err) {
			return false
		}
		for _, d := range described {
			if transient(d.Err) {
				return false
			}
		}
		return true
	})
	return described, err
}

// retryFor calls try until it reports done, ctx ends or within has passed
// (try runs at least once), sleeping between calls with a backoff doubling
// from 50ms to 1s. For answers a cluster gives while it settles (a topic
// just created, a coordinator still loading).
func retryFor(ctx context.Context, within time.Duration, try func() (done bool)) {
	deadline := time.Now().Add(within)
	backoff := 50 * time.Millisecond
	for !try() && time.Now().Before(deadline) {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
