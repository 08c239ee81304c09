package system

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
)

// kafkaHooks returns an option that exports one Kafka client's franz-go
// metrics on reg through the kprom plugin: ordercast_kafka_* (connects,
// bytes and records produced and fetched, buffered records, ...), labelled
// client_id and node_id. Each call makes a new kprom.Metrics, because kprom
// keeps per-client state: pass the option to exactly one client (a client
// re-created with the same client id, such as a restarted transactional
// session, replaces the old one's series).
//
// It also counts the client's requests by API (requestCounter:
// ordercast_kafka_requests_total{client_id,request}), which kprom does not:
// the broker's CPU follows its request rate far more than its bytes.
//
// Two latency histograms per client and broker (kprom's buckets, 1 ms
// doubling to 2.048 s): ordercast_kafka_request_duration_e2e_seconds, from
// a request's write to its whole response read (the broker's time, its
// queue included, and the network), and ordercast_kafka_write_wait_seconds,
// how long a request waited for its connection before being written (the
// client's own queue). Set beside a service's own latency (checkout's
// ordercast_checkout_produce_duration_seconds, per record), they tell a slow
// broker from a record waiting in the client: at 1,000 orders/s on this
// project's 2-core machine, before the consumers' fetch batching, a
// record's produce took 22-29 ms on average and its request 6-9 (docs/benchmarks.md,
// "Consumers' fetch batching"). A consumer's requests are mostly
// fetches, which the broker holds up to fetch.max.wait.ms by design: its
// request durations are the long poll, not slowness.
func kafkaHooks(reg prometheus.Registerer) kgo.Opt {
	return kgo.WithHooks(kprom.NewMetrics("ordercast_kafka", kprom.Registerer(replacing{reg}), kprom.WithClientLabel(),
		kprom.Histograms(kprom.WriteWait, kprom.RequestDurationE2E)),
		newRequestCounter(reg))
}

// RelayClientIDPrefix begins the Kafka client ids of the outbox relay's
// clients: "ordercast-relay-" + the client's role (outbox.ClientProducer,
// outbox.ClientConfirm, outbox.ClientMarkers), as they appear in the
// client_id label of ordercast_kafka_*.
const RelayClientIDPrefix = "ordercast-relay-"

// relayClientOpts returns the outbox.ClientOpts function of the
// payments outbox relay: a client id per role and, per client the relay
// creates, its own kafkaHooks on reg (a new session's client replaces the
// series of the one before; the request counts go on adding up).
func relayClientOpts(reg prometheus.Registerer) func(role string) []kgo.Opt {
	return func(role string) []kgo.Opt {
		return []kgo.Opt{kgo.ClientID(RelayClientIDPrefix + role), kafkaHooks(reg)}
	}
}

// requestCounter is a franz-go hook counting one client's requests written
// to the brokers, by request key (kmsg.NameForKey: "Produce", "Fetch",
// "EndTxn", ...): ordercast_kafka_requests_total{client_id,request}. The
// counter vector is shared by every client of one registry.
type requestCounter struct {
	vec      *prometheus.CounterVec
	clientID string
}

// newRequestCounter returns a requestCounter on reg's
// ordercast_kafka_requests_total, registering it on first use (a second
// registration finds the first's vector).
func newRequestCounter(reg prometheus.Registerer) *requestCounter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ordercast_kafka_requests_total",
		Help: "Kafka requests written by a client of this process, by API (request key name).",
	}, []string{"client_id", "request"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if v, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				vec = v
			}
		}
	}
	return &requestCounter{vec: vec}
}

// OnNewClient implements kgo.HookNewClient: the client's id labels its
// counts.
func (c *requestCounter) OnNewClient(cl *kgo.Client) {
	if id, ok := cl.OptValue(kgo.ClientID).(string); ok {
		c.clientID = id
	}
}

// OnBrokerE2E implements kgo.HookBrokerE2E: one request written (a failed
// write is not counted).
func (c *requestCounter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.WriteErr != nil {
		return
	}
	c.vec.WithLabelValues(c.clientID, kmsg.NameForKey(key)).Inc()
}

// replacing is a Registerer whose MustRegister replaces an already
// registered equal collector instead of panicking, so that two clients with
// one client id can never bring the process down over metrics.
type replacing struct{ prometheus.Registerer }

// MustRegister registers each collector, replacing an existing equal one.
func (r replacing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		err := r.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			r.Unregister(are.ExistingCollector)
			err = r.Register(c)
		}
		if err != nil {
			panic(err)
		}
	}
}

// registerOpsMetrics adds to the system's registry the Go runtime and
// process collectors (go_*, process_*) and the lag of the consumer groups
// this process runs (the share group of notifications in share mode), as
// the brokers see it (ops.LagCollector:
// ordercast_group_lag{group,topic,partition}, ordercast_group_lag_total{group},
// ordercast_group_members{group}). Collectors already registered (a Registry
// shared by two Starts) are kept.
func (s *System) registerOpsMetrics() {
	reg := s.cfg.Metrics
	cs := []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	var groups []string
	for _, g := range order.Groups {
		if s.cfg.runs(g) {
			groups = append(groups, s.cfg.groupOf(g))
		}
	}
	if len(groups) > 0 {
		cs = append(cs, ops.NewLagCollector(s.Admin, groups...))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				s.cfg.Logger.Warn("metrics not registered", "error", err)
			}
		}
	}
}
