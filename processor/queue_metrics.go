package processor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// queueMetrics are the series of the queue mode (NewQueue, share groups),
// under the Metrics namespace:
//
//	share_records_acquired_total{group,topic}  records the member acquired (each delivery counts)
//	share_records_accepted_total{group,topic}  records acknowledged ACCEPT (handled, or written to the DLQ)
//	share_records_released_total{group,topic}  records acknowledged RELEASE (redelivered later)
//	share_records_rejected_total{group,topic}  records acknowledged REJECT (archived by the broker)
//	share_delivery_count{group,topic}          histogram: the broker's delivery count of each record acquired
//	share_lock_renewals_total{group}           acquisition-lock renewals requested (KIP-1222)
//	share_lag{group,topic,partition}           records not yet acknowledged by the group (ShareLagInterval)
//	share_lag_total{group}                     their sum over the group's partitions
//
// The handler, DLQ and failure series (handler_duration_seconds,
// records_processed_total, records_failed_total, records_dead_lettered_total,
// forward_failures_total, fetch_errors_total) are the ones New's members
// update.
type queueMetrics struct {
	acquired, accepted, released, rejected *prometheus.CounterVec
	deliveries                             *prometheus.HistogramVec
	renewals                               *prometheus.CounterVec
	lag, lagTotal                          *prometheus.GaugeVec
}

func newQueueMetrics(ns string) *queueMetrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	q := &queueMetrics{
		acquired: cv("share_records_acquired_total", "Share-group records acquired by the member (every delivery counts).", "group", "topic"),
		accepted: cv("share_records_accepted_total", "Share-group records acknowledged ACCEPT: handled, or written to the DLQ.", "group", "topic"),
		released: cv("share_records_released_total", "Share-group records acknowledged RELEASE, for a later delivery (transient failure, shutdown).", "group", "topic"),
		rejected: cv("share_records_rejected_total", "Share-group records acknowledged REJECT: archived by the broker (the DLQ disabled).", "group", "topic"),
		deliveries: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "share_delivery_count",
			Help:    "The broker's delivery count of each share-group record acquired (1: first delivery).",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, []string{"group", "topic"}),
		renewals: cv("share_lock_renewals_total", "Acquisition-lock renewals requested for records still in their handler or backoff (KIP-1222).", "group"),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "share_lag",
			Help: "Records of the partition the share group has not acknowledged yet: the broker's share lag (KIP-1226), else the last stable offset minus the share-partition start offset."},
			[]string{"group", "topic", "partition"}),
		lagTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "share_lag_total",
			Help: "Sum of share_lag over the share group's partitions."}, []string{"group"}),
	}
	return q
}

// initQueue creates the queue series of group at 0 (see initGroup).
func (m *Metrics) initQueue(group string, topics []string) {
	if m == nil {
		return
	}
	for _, t := range topics {
		m.queue.acquired.WithLabelValues(group, t)
		m.queue.accepted.WithLabelValues(group, t)
		m.queue.released.WithLabelValues(group, t)
		m.queue.rejected.WithLabelValues(group, t)
	}
	m.queue.renewals.WithLabelValues(group)
}

func (m *Metrics) queueAcquired(group, topic string, deliveryCount int32) {
	if m != nil {
		m.queue.acquired.WithLabelValues(group, topic).Inc()
		m.queue.deliveries.WithLabelValues(group, topic).Observe(float64(deliveryCount))
	}
}

// queueAcked counts one acknowledgement of a record of topic.
func (m *Metrics) queueAcked(group, topic string, ack ackKind) {
	if m == nil {
		return
	}
	switch ack {
	case ackAccept:
		m.queue.accepted.WithLabelValues(group, topic).Inc()
	case ackRelease:
		m.queue.released.WithLabelValues(group, topic).Inc()
	case ackReject:
		m.queue.rejected.WithLabelValues(group, topic).Inc()
	}
}

func (m *Metrics) queueRenewed(group string) {
	if m != nil {
		m.queue.renewals.WithLabelValues(group).Inc()
	}
}

// setShareLag sets the share_lag gauges of group from lags (topic ->
// partition -> records) and their sum.
func (m *Metrics) setShareLag(group string, lags map[string]map[int32]int64) {
	if m == nil {
		return
	}
	var total int64
	for t, ps := range lags {
		for p, l := range ps {
			m.queue.lag.WithLabelValues(group, t, strconv.Itoa(int(p))).Set(float64(l))
			total += l
		}
	}
	m.queue.lagTotal.WithLabelValues(group).Set(float64(total))
}

// dropShareLag removes group's share_lag gauges: the backlog is unknown.
func (m *Metrics) dropShareLag(group string) {
	if m == nil {
		return
	}
	m.queue.lag.DeletePartialMatch(prometheus.Labels{"group": group})
	m.queue.lagTotal.DeleteLabelValues(group)
}
