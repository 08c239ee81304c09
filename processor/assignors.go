package processor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The classic group protocol's assignors (partition.assignment.strategy):
// which a member offers, so that it can share a group with consumers of
// other clients during a migration.

// The assignor names Assignors takes: the protocol names each is offered
// under in JoinGroup.
const (
	// AssignorCooperativeSticky is KIP-429's incremental cooperative
	// rebalancing with sticky assignment: the default, and the only
	// cooperative one.
	AssignorCooperativeSticky = "cooperative-sticky"
	// AssignorSticky is KIP-54's sticky assignor (eager).
	AssignorSticky = "sticky"
	// AssignorRange is the Java consumer's default before 3.0, range
	// (eager).
	AssignorRange = "range"
	// AssignorRoundRobin is Kafka's roundrobin (eager).
	AssignorRoundRobin = "roundrobin"
	// AssignorKafkaJSRoundRobin is KafkaJS's default assignor, a round
	// robin offered under the protocol name "RoundRobinAssigner" (eager).
	// Its member metadata and assignments are Kafka's standard consumer
	// protocol encoding, so members of either client can lead the group.
	AssignorKafkaJSRoundRobin = "RoundRobinAssigner"
)

// assignorNames are the names Assignors accepts, in the order the docs list
// them.
var assignorNames = []string{AssignorCooperativeSticky, AssignorSticky, AssignorRange, AssignorRoundRobin, AssignorKafkaJSRoundRobin}

// Assignors sets the assignors this member offers when it joins a classic
// group, most preferred first (Kafka's partition.assignment.strategy):
// "cooperative-sticky" (default), "sticky", "range", "roundrobin" and
// "RoundRobinAssigner" (KafkaJS's round robin); the Assignor* constants. The
// group coordinator picks the first one every member offers, so a member
// that also offers the assignor of another client's consumers (KafkaJS's
// round robin, the Java consumer's range) can join their group and take
// over from them one instance at a time.
//
// The group rebalances cooperatively (KIP-429: a rebalance revokes only the
// partitions that move) while the chosen assignor is cooperative-sticky,
// and eagerly (every rebalance revokes every partition) while it is another.
// The move from another client's eager group is Kafka's two rolling
// restarts: first every Ordercast member offers both (for example
// Assignors(AssignorCooperativeSticky, AssignorKafkaJSRoundRobin)); once no
// member of the other client is left the coordinator picks
// cooperative-sticky; then every member offers cooperative-sticky alone (the
// default), so that an eager-only consumer joining later is refused rather
// than turning the group eager again. Each revoke drains and commits as
// usual, so no record is lost across the handovers; records another
// client's member handled without committing are handled again
// (at-least-once: an inbox absorbs them).
//
// New returns an error for an empty list, an unknown or repeated name, and
// for Assignors with GroupProtocol("consumer") (KIP-848 assigns on the
// broker).
func Assignors(names ...string) TxnOpt {
	return bothOpt(func(c *cfg) { c.assignors = slices.Clone(names); c.assignorsSet = true })
}

// validateAssignors checks the Assignors list. It returns nil when none was
// given.
func (c *cfg) validateAssignors() error {
	if !c.assignorsSet {
		return nil
	}
	if c.groupProtocol == "consumer" {
		return fmt.Errorf(`Assignors: not used with GroupProtocol("consumer") (KIP-848 assigns partitions on the broker): drop one`)
	}
	if len(c.assignors) == 0 {
		return fmt.Errorf("Assignors: empty, want one or more of %s", strings.Join(assignorNames, ", "))
	}
	seen := map[string]bool{}
	for _, n := range c.assignors {
		if !slices.Contains(assignorNames, n) {
			return fmt.Errorf("Assignors: unknown assignor %q, want one of %s", n, strings.Join(assignorNames, ", "))
		}
		if seen[n] {
			return fmt.Errorf("Assignors: %q given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// balancers returns the franz-go balancers of the Assignors list (the
// default: cooperative-sticky).
func (c *cfg) balancers() []kgo.GroupBalancer {
	if !c.assignorsSet {
		return []kgo.GroupBalancer{kgo.CooperativeStickyBalancer()}
	}
	out := make([]kgo.GroupBalancer, 0, len(c.assignors))
	for _, n := range c.assignors {
		switch n {
		case AssignorCooperativeSticky:
			out = append(out, kgo.CooperativeStickyBalancer())
		case AssignorSticky:
			out = append(out, kgo.StickyBalancer())
		case AssignorRange:
			out = append(out, kgo.RangeBalancer())
		case AssignorRoundRobin:
			out = append(out, kgo.RoundRobinBalancer())
		case AssignorKafkaJSRoundRobin:
			out = append(out, renamedBalancer{kgo.RoundRobinBalancer(), AssignorKafkaJSRoundRobin})
		}
	}
	return out
}

// renamedBalancer is a franz-go balancer offered under another protocol
// name (the same algorithm and encoding).
type renamedBalancer struct {
	kgo.GroupBalancer
	name string
}

func (b renamedBalancer) ProtocolName() string { return b.name }
