package ops

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
)

// LagCollector is a prometheus.Collector of consumer group lag as the
// brokers see it (DescribeGroups: committed offsets against high
// watermarks), so it is right whichever process commits, and stays visible
// while no member runs. It exports:
//
//	ordercast_group_lag{group,topic,partition}     records between the committed offset and the high watermark
//	ordercast_group_lag_total{group}               their sum over the group's partitions
//	ordercast_group_members{group}                 members of the group
//	ordercast_group_lag_errors_total{group}        lag computations that failed (the series above are then missing)
//
// A share group (KIP-932) has the same series: its lag per partition is
// its backlog (the broker's share lag, else the end offset minus the
// share-partition start offset; see PartitionLag.Lag), so
// ordercast_group_lag_total is what an autoscaler scales its members on.
//
// It computes on scrape, at most once per MinInterval (concurrent and
// repeated scrapes share one result), each computation bounded by Timeout.
// Safe for concurrent use.
type LagCollector struct {
	adm         *kadm.Client
	groups      []string
	minInterval time.Duration
	timeout     time.Duration

	mu   sync.Mutex
	at   time.Time
	last []GroupInfo

	lagDesc, totalDesc, membersDesc *prometheus.Desc
	errs                            *prometheus.CounterVec
}

// NewLagCollector returns a collector of the lag of groups (every group of
// the cluster when none is named) over adm. Register it with a
// prometheus.Registerer. MinInterval defaults to 2s and Timeout to 5s; see
// the fields' setters.
func NewLagCollector(adm *kadm.Client, groups ...string) *LagCollector {
	c := &LagCollector{
		adm:         adm,
		groups:      groups,
		minInterval: 2 * time.Second,
		timeout:     5 * time.Second,
		lagDesc: prometheus.NewDesc("ordercast_group_lag",
			"Records between the group's committed offset and the high watermark of the partition (kafka-consumer-groups.sh LAG); for a share group, its records not yet acknowledged (share lag, KIP-1226).",
			[]string{"group", "topic", "partition"}, nil),
		totalDesc: prometheus.NewDesc("ordercast_group_lag_total",
			"Sum of ordercast_group_lag over the group's partitions.", []string{"group"}, nil),
		membersDesc: prometheus.NewDesc("ordercast_group_members",
			"Members of the consumer group.", []string{"group"}, nil),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ordercast_group_lag_errors_total",
			Help: "Lag computations that failed; the group's lag series are missing from that scrape."}, []string{"group"}),
	}
	// Named groups' error counters exist at 0 from the start, so that
	// rate() and increase() see their first failure.
	for _, g := range groups {
		c.errs.WithLabelValues(g)
	}
	return c
}

// WithMinInterval sets how long a computed result is reused (default 2s;
// 0 computes on every scrape) and returns c.
func (c *LagCollector) WithMinInterval(d time.Duration) *LagCollector {
	c.minInterval = d
	return c
}

// WithTimeout bounds one computation (default 5s) and returns c.
func (c *LagCollector) WithTimeout(d time.Duration) *LagCollector {
	c.timeout = d
	return c
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc
	ch <- c.totalDesc
	ch <- c.membersDesc
	c.errs.Describe(ch)
}

// Collect implements prometheus.Collector. It blocks for at most Timeout.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.snapshot() {
		if g.Error != "" && len(g.Partitions) == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.membersDesc, prometheus.GaugeValue, float64(len(g.Members)), g.Group)
		known := false
		for _, p := range g.Partitions {
			if p.Lag < 0 {
				continue
			}
			known = true
			ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, float64(p.Lag), g.Group, p.Topic, strconv.Itoa(int(p.Partition)))
		}
		if known || len(g.Partitions) == 0 {
			ch <- prometheus.MustNewConstMetric(c.totalDesc, prometheus.GaugeValue, float64(g.TotalLag), g.Group)
		}
	}
	c.errs.Collect(ch)
}

func (c *LagCollector) snapshot() []GroupInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && time.Since(c.at) < c.minInterval {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	infos, err := DescribeGroups(ctx, c.adm, c.groups...)
	if err != nil {
		for _, g := range c.groups {
			c.errs.WithLabelValues(g).Inc()
		}
		c.last, c.at = []GroupInfo{}, time.Now()
		return c.last
	}
	for _, g := range infos {
		errs := c.errs.WithLabelValues(g.Group) // the series exists from the first scrape, at 0
		if g.Error != "" && !g.notFound {
			errs.Inc()
		}
	}
	c.last, c.at = infos, time.Now()
	return infos
}
