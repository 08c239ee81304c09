package processor

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runtime's Prometheus metrics. Create one per registry
// and namespace with NewMetrics and pass it to every processor (New,
// NewTransactional and NewQueue) with WithMetrics; a nil *Metrics records nothing. Names
// start with DefaultMetricsNamespace ("ordercast_consumer_") unless
// MetricsNamespace sets another prefix; labels are group, and topic and
// partition or client_id as each series needs. Every series, with its type,
// labels and meaning, is listed in the metrics table of the runtime's guide,
// docs/runtime.md in the project's repository ("Metrics"). Safe for
// concurrent use.
type Metrics struct {
	consumedRecs  *prometheus.CounterVec
	consumedBytes *prometheus.CounterVec
	processed     *prometheus.CounterVec
	failed        *prometheus.CounterVec
	retriedC      *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	retryTopic    *prometheus.CounterVec
	fwdFailed     *prometheus.CounterVec
	droppedC      *prometheus.CounterVec
	fetchErrors   *prometheus.CounterVec
	rebalances    *prometheus.CounterVec
	committedOff  *prometheus.GaugeVec
	lag           *prometheus.GaugeVec
	inFlightRecs  *prometheus.GaugeVec
	inFlightBytes *prometheus.GaugeVec
	pausedG       *prometheus.GaugeVec
	handlerDur    *prometheus.HistogramVec
	commitDur     *prometheus.HistogramVec
	commitErrs    *prometheus.CounterVec
	mapBytes      *prometheus.GaugeVec
	windowFullG   *prometheus.GaugeVec
	windowUsedG   *prometheus.GaugeVec
	skippedC      *prometheus.CounterVec
	oldestAge     *ageCollector
	batch         *batchMetrics // batch.go
	queue         *queueMetrics // queue_metrics.go
}

// ageCollector reports <namespace>_oldest_in_flight_seconds, computed
// from the running processors at scrape time.
type ageCollector struct {
	desc *prometheus.Desc
	// The key-block series (BlockKeys), reported only by
	// members with key blocking on.
	blockedKeys, heldRecs, blockAge, blockRefused *prometheus.Desc
	mu                                            sync.Mutex
	procs                                         map[*Processor]struct{}
}

// Describe implements prometheus.Collector.
func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.blockedKeys
	ch <- c.heldRecs
	ch <- c.blockAge
	ch <- c.blockRefused
}

// Collect implements prometheus.Collector.
func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	procs := make([]*Processor, 0, len(c.procs))
	for p := range c.procs {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	now := time.Now()
	for _, p := range procs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, p.oldestInFlight(now).Seconds(), p.cfg.group, p.cfg.clientID)
		if p.kb == nil {
			continue
		}
		keys, held, oldest, refused := p.keyBlockStats(now)
		ch <- prometheus.MustNewConstMetric(c.blockedKeys, prometheus.GaugeValue, float64(keys), p.cfg.group, p.cfg.clientID)
		ch <- prometheus.MustNewConstMetric(c.heldRecs, prometheus.GaugeValue, float64(held), p.cfg.group, p.cfg.clientID)
		ch <- prometheus.MustNewConstMetric(c.blockAge, prometheus.GaugeValue, oldest.Seconds(), p.cfg.group, p.cfg.clientID)
		ch <- prometheus.MustNewConstMetric(c.blockRefused, prometheus.CounterValue, float64(refused), p.cfg.group, p.cfg.clientID)
	}
}

func (m *Metrics) track(p *Processor) {
	if m == nil {
		return
	}
	m.oldestAge.mu.Lock()
	m.oldestAge.procs[p] = struct{}{}
	m.oldestAge.mu.Unlock()
}

func (m *Metrics) untrack(p *Processor) {
	if m == nil {
		return
	}
	m.oldestAge.mu.Lock()
	delete(m.oldestAge.procs, p)
	m.oldestAge.mu.Unlock()
}

// DefaultMetricsNamespace is the prefix of the runtime's metric names
// unless MetricsNamespace sets another.
const DefaultMetricsNamespace = "ordercast_consumer"

// MetricsOpt configures NewMetrics.
type MetricsOpt func(*metricsCfg)

type metricsCfg struct{ namespace string }

// MetricsNamespace sets the prefix of every metric name (Prometheus
// namespace, joined to the name with "_"): "billing" gives
// billing_records_processed_total. Default DefaultMetricsNamespace
// ("ordercast_consumer").
func MetricsNamespace(ns string) MetricsOpt { return func(c *metricsCfg) { c.namespace = ns } }

// NewMetrics creates the runtime's metrics and registers them with reg
// (prometheus.DefaultRegisterer when reg is nil); the series are listed in
// the Metrics doc. It returns an error wrapping the registry's, and
// registers nothing, when reg holds a metric of one of these names already:
// a second Metrics of the same namespace (a
// prometheus.AlreadyRegisteredError), or a metric of your own. Create one
// Metrics per registry and namespace.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOpt) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	mc := metricsCfg{namespace: DefaultMetricsNamespace}
	for _, o := range opts {
		o(&mc)
	}
	ns := mc.namespace
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		consumedRecs:  cv("records_consumed_total", "Records fetched and handed to the runtime.", "group", "topic"),
		consumedBytes: cv("bytes_consumed_total", "Key and value bytes of records fetched.", "group", "topic"),
		processed:     cv("records_processed_total", "Handler calls that returned nil.", "group", "topic"),
		failed:        cv("records_failed_total", "Handler calls that returned an error, by error class.", "group", "topic", "class"),
		retriedC:      cv("records_retried_total", "In-place retries scheduled.", "group", "topic"),
		deadLettered:  cv("records_dead_lettered_total", "Records written to the group's DLQ.", "group"),
		retryTopic:    cv("records_retry_topic_total", "Records written to a retry topic.", "group", "retry_topic"),
		fwdFailed:     cv("forward_failures_total", "Failed writes to a retry topic or the DLQ (the source offset is held).", "group", "target"),
		droppedC:      cv("records_dropped_stale_total", "Records dropped because they were fetched under an older assignment.", "group", "topic"),
		fetchErrors:   cv("fetch_errors_total", "Fetch errors reported by the client.", "group"),
		rebalances:    cv("rebalances_total", "Partition assignment changes seen by members, by kind (assigned, revoked, lost, shutdown).", "group", "kind"),
		committedOff:  gv("committed_offset", "Last offset committed by this process for the partition.", "group", "topic", "partition"),
		lag:           gv("lag", "Records between the committed offset and the last seen high watermark (last stable offset for read_committed).", "group", "topic", "partition"),
		inFlightRecs:  gv("in_flight_records", "Records held between fetch and commit point.", "group", "client_id"),
		inFlightBytes: gv("in_flight_bytes", "Key and value bytes of records held.", "group", "client_id"),
		pausedG:       gv("fetch_paused", "1 while fetching is paused for backpressure.", "group", "client_id"),
		handlerDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "handler_duration_seconds",
			Help: "Duration of one handler call.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"group", "topic"}),
		commitDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "commit_duration_seconds",
			Help: "Duration of one offset commit request.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"group"}),
		commitErrs: cv("commit_errors_total", "Offset commits that failed.", "group"),
		mapBytes: gv("offset_map_bytes", "Bytes of the completed-offsets map (records completed above the commit point) in the metadata of the last accepted commit.",
			"group", "topic", "partition"),
		windowFullG: gv("offset_map_window_full", "1 while the partition admits no more records: its completed-offsets map is at CommitMetadataMaxBytes.",
			"group", "topic", "partition"),
		windowUsedG: gv("offset_map_window_used_ratio", "Share of CommitMetadataMaxBytes the completed-offsets map of the records held could take in the worst case; at 1 the partition admits no more.",
			"group", "topic", "partition"),
		skippedC: cv("records_skipped_completed_total", "Records skipped because an earlier owner of the partition completed them above its commit point.", "group", "topic"),
		oldestAge: &ageCollector{
			desc: prometheus.NewDesc(ns+"_oldest_in_flight_seconds",
				"Age of the oldest record the member holds (fetched, not yet handled, forwarded or dropped); 0 when it holds none.",
				[]string{"group", "client_id"}, nil),
			blockedKeys: prometheus.NewDesc(ns+"_blocked_keys",
				"Keys of the group held behind a record in a retry topic or the DLQ (BlockKeys), as this member reads the group's blocked-keys table: every member reports the group's count (use max, not sum).",
				[]string{"group", "client_id"}, nil),
			heldRecs: prometheus.NewDesc(ns+"_blocked_key_records",
				"Records this member holds behind blocked keys (BlockKeys): fetched, not handled, not committed.",
				[]string{"group", "client_id"}, nil),
			blockAge: prometheus.NewDesc(ns+"_oldest_blocked_key_seconds",
				"Age of the group's oldest key block (BlockKeys); 0 when no key is blocked.",
				[]string{"group", "client_id"}, nil),
			blockRefused: prometheus.NewDesc(ns+"_key_blocks_refused_total",
				"Failing records that could not block their key because the blocked-keys table was full (MaxBlockedKeys).",
				[]string{"group", "client_id"}, nil),
			procs: make(map[*Processor]struct{}),
		},
	}
	m.batch = newBatchMetrics(ns)
	m.queue = newQueueMetrics(ns)
	cs := []prometheus.Collector{m.consumedRecs, m.consumedBytes, m.processed, m.failed, m.retriedC, m.deadLettered,
		m.retryTopic, m.fwdFailed, m.droppedC, m.fetchErrors, m.rebalances, m.committedOff, m.lag, m.inFlightRecs,
		m.inFlightBytes, m.pausedG, m.handlerDur, m.commitDur, m.commitErrs, m.mapBytes, m.windowFullG, m.windowUsedG,
		m.skippedC, m.oldestAge, m.batch.size, m.batch.dur, m.batch.fallbacks,
		m.queue.acquired, m.queue.accepted, m.queue.released, m.queue.rejected, m.queue.deliveries, m.queue.renewals,
		m.queue.lag, m.queue.lagTotal}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("processor: NewMetrics: %w", err)
		}
	}
	return m, nil
}

// initGroup creates the group's counter series at 0 (a series otherwise
// appears at its first increment, already at 1, which rate() and increase()
// cannot see: an alert on the first dead-lettered record would never fire):
// records failed (by the runtime's own classes), retried, dead-lettered,
// forward failures to the DLQ and each retry topic, retry-topic writes,
// commit and fetch errors, dropped stale records.
func (m *Metrics) initGroup(group string, topics, retryTopics []string, dlq string) {
	if m == nil {
		return
	}
	for _, t := range topics {
		for _, class := range []string{ClassTransient, ClassPermanent, ClassTimeout} {
			m.failed.WithLabelValues(group, t, class)
		}
		m.processed.WithLabelValues(group, t)
		m.retriedC.WithLabelValues(group, t)
		m.droppedC.WithLabelValues(group, t)
		m.skippedC.WithLabelValues(group, t)
	}
	for _, rt := range retryTopics {
		m.retryTopic.WithLabelValues(group, rt)
		m.fwdFailed.WithLabelValues(group, rt)
	}
	if dlq != "" {
		m.deadLettered.WithLabelValues(group)
		m.fwdFailed.WithLabelValues(group, dlq)
	}
	m.commitErrs.WithLabelValues(group)
	m.fetchErrors.WithLabelValues(group)
}

// partMetrics are the per-record series of one partition's topic, resolved
// once per assignment rather than per record. A nil *partMetrics records
// nothing.
type partMetrics struct {
	m             *Metrics
	group, topic  string
	consumedRecs  prometheus.Counter
	consumedBytes prometheus.Counter
	processed     prometheus.Counter
	handlerDur    prometheus.Observer
}

func (m *Metrics) partition(group, topic string) *partMetrics {
	if m == nil {
		return nil
	}
	return &partMetrics{m: m, group: group, topic: topic,
		consumedRecs:  m.consumedRecs.WithLabelValues(group, topic),
		consumedBytes: m.consumedBytes.WithLabelValues(group, topic),
		processed:     m.processed.WithLabelValues(group, topic),
		handlerDur:    m.handlerDur.WithLabelValues(group, topic),
	}
}

// skippedEarlier counts one record skipped as completed by an earlier owner.
func (pm *partMetrics) skippedEarlier() {
	if pm != nil {
		pm.m.skippedC.WithLabelValues(pm.group, pm.topic).Inc()
	}
}

// windowFull sets offset_map_window_full of t.
func (pm *partMetrics) windowFull(t tp, full bool) {
	if pm == nil {
		return
	}
	v := 0.0
	if full {
		v = 1
	}
	pm.m.windowFullG.WithLabelValues(pm.group, t.topic, strconv.Itoa(int(t.partition))).Set(v)
}

// windowUsed sets offset_map_window_used_ratio of t.
func (m *Metrics) windowUsed(group string, t tp, ratio float64) {
	if m != nil {
		m.windowUsedG.WithLabelValues(group, t.topic, strconv.Itoa(int(t.partition))).Set(ratio)
	}
}

// offsetMap sets offset_map_bytes of t.
func (m *Metrics) offsetMap(group string, t tp, bytes int) {
	if m != nil {
		m.mapBytes.WithLabelValues(group, t.topic, strconv.Itoa(int(t.partition))).Set(float64(bytes))
	}
}

func (pm *partMetrics) consumed(bytes int64) {
	if pm == nil {
		return
	}
	pm.consumedRecs.Inc()
	pm.consumedBytes.Add(float64(bytes))
}

func (pm *partMetrics) handled(d time.Duration, err error) {
	if pm == nil {
		return
	}
	pm.handlerDur.Observe(d.Seconds())
	if err == nil {
		pm.processed.Inc()
	} else {
		pm.m.failed.WithLabelValues(pm.group, pm.topic, ErrorClass(err)).Inc()
	}
}

// handled records one handler call for a topic that is not the fetched one
// (a retry-topic record counts for its original topic).
func (m *Metrics) handled(group, topic string, d time.Duration, err error) {
	m.partition(group, topic).handled(d, err)
}

// memberMetrics are the per-member gauges, resolved once.
type memberMetrics struct {
	inFlightRecs, inFlightBytes, paused prometheus.Gauge
}

func (m *Metrics) member(group, client string) *memberMetrics {
	if m == nil {
		return nil
	}
	return &memberMetrics{
		inFlightRecs:  m.inFlightRecs.WithLabelValues(group, client),
		inFlightBytes: m.inFlightBytes.WithLabelValues(group, client),
		paused:        m.pausedG.WithLabelValues(group, client),
	}
}

func (mm *memberMetrics) setInFlight(recs int, bytes int64) {
	if mm == nil {
		return
	}
	mm.inFlightRecs.Set(float64(recs))
	mm.inFlightBytes.Set(float64(bytes))
}

func (mm *memberMetrics) setPaused(paused bool) {
	if mm == nil {
		return
	}
	v := 0.0
	if paused {
		v = 1
	}
	mm.paused.Set(v)
}

func (m *Metrics) retried(group, topic string) {
	if m != nil {
		m.retriedC.WithLabelValues(group, topic).Inc()
	}
}

func (m *Metrics) forwarded(group, target string, dlq bool) {
	if m == nil {
		return
	}
	if dlq {
		m.deadLettered.WithLabelValues(group).Inc()
	} else {
		m.retryTopic.WithLabelValues(group, target).Inc()
	}
}

func (m *Metrics) forwardFailed(group, target string) {
	if m != nil {
		m.fwdFailed.WithLabelValues(group, target).Inc()
	}
}

func (m *Metrics) dropped(group, topic string, n int) {
	if m != nil && n > 0 {
		m.droppedC.WithLabelValues(group, topic).Add(float64(n))
	}
}

func (m *Metrics) fetchError(group string) {
	if m != nil {
		m.fetchErrors.WithLabelValues(group).Inc()
	}
}

func (m *Metrics) rebalance(group, kind string) {
	if m != nil {
		m.rebalances.WithLabelValues(group, kind).Inc()
	}
}

func (m *Metrics) committed(group, topic string, partition int32, offset int64) {
	if m != nil {
		m.committedOff.WithLabelValues(group, topic, strconv.Itoa(int(partition))).Set(float64(offset))
	}
}

// setLag publishes end - committed for s (p.mu held by the caller).
func (m *Metrics) setLag(group string, s *partState) {
	if m == nil || s.committed < 0 || s.hwm <= 0 {
		return
	}
	lag := s.hwm - s.committed
	if lag < 0 {
		lag = 0
	}
	m.lag.WithLabelValues(group, s.tp.topic, strconv.Itoa(int(s.tp.partition))).Set(float64(lag))
}

// setLagValue publishes lag (clamped at 0) for t.
func (m *Metrics) setLagValue(group string, t tp, lag int64) {
	if m == nil {
		return
	}
	m.lag.WithLabelValues(group, t.topic, strconv.Itoa(int(t.partition))).Set(float64(max(lag, 0)))
}

func (m *Metrics) forget(group string, t tp) {
	if m == nil {
		return
	}
	part := strconv.Itoa(int(t.partition))
	m.lag.DeleteLabelValues(group, t.topic, part)
	m.committedOff.DeleteLabelValues(group, t.topic, part)
	m.mapBytes.DeleteLabelValues(group, t.topic, part)
	m.windowFullG.DeleteLabelValues(group, t.topic, part)
	m.windowUsedG.DeleteLabelValues(group, t.topic, part)
}

func (m *Metrics) commitLatency(group string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.commitDur.WithLabelValues(group).Observe(d.Seconds())
	if err != nil {
		m.commitErrs.WithLabelValues(group).Inc()
	}
}
