package processor

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recordingRegisterer registers with a real registry and keeps the
// collectors registered.
type recordingRegisterer struct {
	*prometheus.Registry
	cs []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.cs = append(r.cs, c)
	return nil
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.cs = slices.DeleteFunc(r.cs, func(x prometheus.Collector) bool { return x == c })
	return true
}

// metricRow is one series: its name without the namespace, type (empty when
// the collector does not say) and labels.
type metricRow struct{ name, typ, labels string }

var descRe = regexp.MustCompile(`fqName: "([^"]*)".*variableLabels: \{([^}]*)\}`)

// TestMetricsTable: the metrics table of docs/runtime.md lists exactly the
// series NewMetrics registers, with their labels and (for the vectors) their
// type, so a new metric without a row, or a row without a metric, fails.
func TestMetricsTable(t *testing.T) {
	rr := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	mustMetrics(t, rr)
	var registered []metricRow
	for _, c := range rr.cs {
		typ := ""
		switch c.(type) {
		case *prometheus.CounterVec:
			typ = "counter"
		case *prometheus.GaugeVec:
			typ = "gauge"
		case *prometheus.HistogramVec:
			typ = "histogram"
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRe.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, ok := strings.CutPrefix(m[1], DefaultMetricsNamespace+"_")
			if !ok {
				t.Fatalf("%s: not in the namespace %s", m[1], DefaultMetricsNamespace)
			}
			registered = append(registered, metricRow{name, typ, strings.ReplaceAll(m[2], ",", " ")})
		}
	}

	doc, err := os.ReadFile("../docs/runtime.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n## Metrics\n")
	if !ok {
		t.Fatal(`docs/runtime.md: no "## Metrics" section`)
	}
	section, _, _ := strings.Cut(after, "\n#")
	cell := regexp.MustCompile("`([^`]*)`")
	documented := map[string]metricRow{}
	for line := range strings.Lines(section) {
		cols := strings.Split(strings.TrimSpace(line), "|")
		if len(cols) != 6 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cols[1]), "`")
		var labels []string
		for _, m := range cell.FindAllStringSubmatch(cols[3], -1) {
			labels = append(labels, m[1])
		}
		if _, dup := documented[name]; dup {
			t.Errorf("docs/runtime.md: %s listed twice", name)
		}
		documented[name] = metricRow{name, strings.TrimSpace(cols[2]), strings.Join(labels, " ")}
	}

	for _, r := range registered {
		d, ok := documented[r.name]
		if !ok {
			t.Errorf("NewMetrics registers %s (labels %s), which the metrics table of docs/runtime.md does not list", r.name, r.labels)
			continue
		}
		delete(documented, r.name)
		if d.labels != r.labels {
			t.Errorf("%s: documented labels %q, registered %q", r.name, d.labels, r.labels)
		}
		if r.typ != "" && d.typ != r.typ {
			t.Errorf("%s: documented as a %s, registered as a %s", r.name, d.typ, r.typ)
		}
		if !slices.Contains([]string{"counter", "gauge", "histogram"}, d.typ) {
			t.Errorf("%s: type %q", r.name, d.typ)
		}
	}
	for name := range documented {
		t.Errorf("docs/runtime.md lists %s, which NewMetrics does not register", name)
	}
}

// A metric of the adopter's own with a name NewMetrics uses, in the same
// registry and namespace, makes NewMetrics return an error (not panic) and
// register nothing; a second Metrics of the same namespace too, while one of
// another namespace is fine.
func TestNewMetricsNameTaken(t *testing.T) {
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	own := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "billing", Name: "batch_records", Help: "mine"})
	reg.MustRegister(own)
	reg.cs = nil
	m, err := NewMetrics(reg, MetricsNamespace("billing"))
	if m != nil || err == nil || !strings.Contains(err.Error(), "billing_batch_records") {
		t.Fatalf("NewMetrics over a taken name: %v, %v; want an error naming billing_batch_records", m, err)
	}
	if len(reg.cs) != 0 {
		t.Fatalf("the failed NewMetrics left %d collectors registered", len(reg.cs))
	}
	mustMetrics(t, reg, MetricsNamespace("payments"))
	var are prometheus.AlreadyRegisteredError
	if _, err := NewMetrics(reg, MetricsNamespace("payments")); !errors.As(err, &are) {
		t.Fatalf("a second Metrics of one namespace in one registry: %v, want an AlreadyRegisteredError", err)
	}
	mustMetrics(t, reg, MetricsNamespace("shipping"))
}
