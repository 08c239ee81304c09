package processor

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka client options of a group member, built here once for both
// modes: New's consumer client and NewTransactional's transactional
// session take memberOpts first, then the mode's own and the user's
// (ClientOpts), then groupOpts, so that what the runtime relies on is not
// overridden.

// memberFetchMaxWait is every member's fetch.max.wait.ms: Kafka's default
// (franz-go's is 5s). A partition resumed after a pause (backpressure, a
// failing lane) joins the next fetch only once the fetch in flight returns,
// which on idle partitions takes this long. ClientOpts may override it.
const memberFetchMaxWait = 500 * time.Millisecond

// memberOpts are the defaults a member's options start with; ClientOpts
// may override each:
//   - fetch.max.wait.ms memberFetchMaxWait;
//   - heartbeats every third of the session timeout, at most every 3s
//     (Kafka's heartbeat.interval.ms default): with franz-go's fixed 3s, a
//     SessionTimeout under 3s would expire the session between heartbeats.
func (c *cfg) memberOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchMaxWait(memberFetchMaxWait),
		kgo.HeartbeatInterval(min(3*time.Second, c.sessionTimeout/3)),
	}
}

// groupOpts are the options a member's client must have whatever
// ClientOpts say: the seed brokers, client id and group, read_committed
// fetches that keep the transaction markers (so that the commit point can
// pass a partition's final marker: without them a partition written
// transactionally would keep a lag of 1 for ever), the session and
// rebalance timeouts, the static membership id (KIP-345) and the
// assignor: the broker's for KIP-848 (GroupProtocol("consumer"); franz-go
// needs a server-side balancer name, sticky), else those of Assignors
// (cooperative-sticky by default).
func (c *cfg) groupOpts() []kgo.Opt {
	o := []kgo.Opt{
		kgo.SeedBrokers(c.brokers...),
		kgo.ClientID(c.clientID),
		kgo.ConsumerGroup(c.group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.SessionTimeout(c.sessionTimeout),
		kgo.RebalanceTimeout(c.rebalanceTO),
	}
	if c.instanceID != "" {
		o = append(o, kgo.InstanceID(c.instanceID))
	}
	if c.groupProtocol == "consumer" {
		o = append(o, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	} else {
		o = append(o, kgo.Balancers(c.balancers()...)) // Assignors (assignors.go)
	}
	return o
}
