// Package promtest reads Prometheus metrics in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Lookup sums, over every series of the metric family name in g whose labels
// include all the given name/value pairs (labels is name1, value1, name2,
// value2...; none: every series), the counter and gauge values and the
// histogram sample counts. found reports whether any series matched. It
// fails the test when g cannot be gathered.
func Lookup(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (sum float64, found bool) {
	t.Helper()
	for _, m := range series(t, g, name, labels) {
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

// Sum is Lookup without found: 0 when no series matches.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, _ := Lookup(t, g, name, labels...)
	return v
}

// Histogram returns, summed over every series of the histogram name in g
// whose labels include the given name/value pairs (as Lookup), the sample
// count, the sum of the samples, and the cumulative count of each bucket by
// its upper bound (+Inf left out). It fails the test when g cannot be
// gathered.
func Histogram(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (count uint64, sum float64, buckets map[float64]uint64) {
	t.Helper()
	buckets = map[float64]uint64{}
	for _, m := range series(t, g, name, labels) {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	return count, sum, buckets
}

// series returns the series of the metric family name in g whose labels
// include all the name/value pairs of labels. It fails the test when g
// cannot be gathered.
func series(t testing.TB, g prometheus.Gatherer, name string, labels []string) []*dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}
