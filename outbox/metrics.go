package outbox

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMetricsNamespace is the prefix of the relay's metric names unless
// MetricsNamespace sets another.
const DefaultMetricsNamespace = "ordercast_outbox"

// Metrics are the relays' Prometheus counters, one series per relay label:
// the relay's name for NewTransactionalRelay, its table (Table) for
// NewRelay. Create one per registry and namespace with NewMetrics and give it
// to every relay of the process with WithMetrics; a nil *Metrics records
// nothing. Names start with DefaultMetricsNamespace ("ordercast_outbox_")
// unless MetricsNamespace sets another prefix. Every series, with its type,
// labels and meaning, is listed in the metrics table of the runtime's guide,
// docs/runtime.md in the project's repository ("Metrics"); they count what
// Stats counts. Safe for concurrent use; two relays with the same label add
// to the same series.
type Metrics struct {
	published, failures, transactions, aborted, recovered, fenced, takeovers, mismatches *prometheus.CounterVec
}

// MetricsOpt configures NewMetrics.
type MetricsOpt func(*metricsCfg)

type metricsCfg struct{ namespace string }

// MetricsNamespace sets the prefix of every metric name (Prometheus
// namespace, joined to the name with "_"). Default DefaultMetricsNamespace.
func MetricsNamespace(ns string) MetricsOpt { return func(c *metricsCfg) { c.namespace = ns } }

// NewMetrics creates the relays' metrics and registers them with reg
// (prometheus.DefaultRegisterer when reg is nil). It returns an error
// wrapping the registry's, and registers nothing, when reg holds a metric of
// one of these names already: a second Metrics of the same namespace (a
// prometheus.AlreadyRegisteredError), or a metric of your own.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOpt) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	mc := metricsCfg{namespace: DefaultMetricsNamespace}
	for _, o := range opts {
		o(&mc)
	}
	cv := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: mc.namespace, Name: name, Help: help}, []string{"relay"})
	}
	m := &Metrics{
		published:    cv("rows_published_total", "Outbox rows published to Kafka and marked sent by the relay."),
		failures:     cv("step_failures_total", "Failed relay steps (at least once) or sessions (exactly once), each followed by a backoff."),
		transactions: cv("transactions_total", "Kafka transactions committed by the exactly-once relay."),
		aborted:      cv("transactions_aborted_total", "Transactions of the exactly-once relay aborted or of unknown outcome."),
		recovered:    cv("rows_recovered_total", "Rows marked sent from the progress marker at a session's start: committed by a relay that stopped before marking them."),
		fenced:       cv("fenced_total", "Times another relay with the same transactional id fenced this one (it then stands by)."),
		takeovers:    cv("takeovers_total", "Times a standing-by relay took over."),
		mismatches:   cv("marker_mismatches_total", "Progress markers whose rows did not match the database (not trusted; their rows are published again)."),
	}
	cs := []prometheus.Collector{m.published, m.failures, m.transactions, m.aborted, m.recovered, m.fenced, m.takeovers, m.mismatches}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("outbox: NewMetrics: %w", err)
		}
	}
	return m, nil
}

// WithMetrics makes the relay count into m (default none). The series of a
// relay exist at 0 from its construction, so rate() and increase() see their
// first increment.
func WithMetrics(m *Metrics) Opt { return func(r *Relay) { r.metrics = m } }

// relayCounters are one relay's series; the zero value records nothing.
type relayCounters struct {
	published, failures, transactions, aborted, recovered, fenced, takeovers, mismatches prometheus.Counter
}

func (m *Metrics) relay(label string) relayCounters {
	if m == nil {
		return relayCounters{}
	}
	return relayCounters{
		published: m.published.WithLabelValues(label), failures: m.failures.WithLabelValues(label),
		transactions: m.transactions.WithLabelValues(label), aborted: m.aborted.WithLabelValues(label),
		recovered: m.recovered.WithLabelValues(label), fenced: m.fenced.WithLabelValues(label),
		takeovers: m.takeovers.WithLabelValues(label), mismatches: m.mismatches.WithLabelValues(label),
	}
}

// add adds n to c unless c is nil (no metrics).
func add(c prometheus.Counter, n int64) {
	if c != nil {
		c.Add(float64(n))
	}
}
