package outbox_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/outbox"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// A relay without Logger logs nothing, not even to slog.Default(), while its
// metrics count the failed steps and the rows published; with Logger, the
// failed step is logged at WARN.
func TestRelayMetricsAndLogger(t *testing.T) {
	var def syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	db := dbtest.SQLite(t, dbtest.Runtime)
	addrs := cluster(t)
	enqueue(t, db, "late", 1, 1)
	enqueue(t, db, "t", 1, 2)
	reg := prometheus.NewRegistry()
	m, err := outbox.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var own syncBuffer
	cl := producer(t, addrs, kgo.UnknownTopicRetries(1))
	silent := newRelay(t, db, cl, outbox.Backoff(5*time.Millisecond, 20*time.Millisecond), outbox.WithMetrics(m))
	if got := count(t, reg, "step_failures_total"); got != 0 {
		t.Fatalf("step_failures_total before Run: %v, want a series at 0", got)
	}
	stop := run(t, silent)
	waitFor(t, "two failed steps counted", func() bool {
		return count(t, reg, "step_failures_total") >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := def.String(); s != "" {
		t.Fatalf("a relay without Logger wrote to slog.Default():\n%s", s)
	}

	logged := newRelay(t, db, cl, outbox.Backoff(5*time.Millisecond, 20*time.Millisecond),
		outbox.Logger(slog.New(slog.NewTextHandler(&own, nil))), outbox.WithMetrics(m))
	stop = run(t, logged)
	waitFor(t, "the failed step logged", func() bool {
		return strings.Contains(own.String(), "level=WARN msg=\"outbox relay step failed")
	})
	if _, err := kadm.NewClient(cl).CreateTopic(ctxT(t), 1, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both rows published", func() bool { return pending(t, db) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, reg, "rows_published_total"); got != 2 {
		t.Fatalf("rows_published_total %v, want 2", got)
	}
	if s := def.String(); s != "" {
		t.Fatalf("slog.Default() got:\n%s", s)
	}
}

// count is the relay series name{relay="outbox"} in reg, failing t if absent.
func count(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	v, ok := promtest.Lookup(t, reg, outbox.DefaultMetricsNamespace+"_"+name, "relay", outbox.DefaultTable)
	if !ok {
		t.Fatalf("no series %s{relay=%q}", name, outbox.DefaultTable)
	}
	return v
}

// The relay metrics table of docs/runtime.md lists exactly the series
// NewMetrics registers, and NewMetrics over a name already taken in the
// registry returns an error instead of panicking.
func TestRelayMetricsTable(t *testing.T) {
	rr := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	if _, err := outbox.NewMetrics(rr); err != nil {
		t.Fatal(err)
	}
	descRe := regexp.MustCompile(`fqName: "([^"]*)".*variableLabels: \{([^}]*)\}`)
	var registered []string
	for _, c := range rr.cs {
		if _, ok := c.(*prometheus.CounterVec); !ok {
			t.Errorf("NewMetrics registers a %T, want counters", c)
		}
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRe.FindStringSubmatch(d.String())
			if m == nil || m[2] != "relay" {
				t.Fatalf("%s: want one label, relay", d)
			}
			registered = append(registered, strings.TrimPrefix(m[1], outbox.DefaultMetricsNamespace+"_"))
		}
	}

	doc, err := os.ReadFile("../docs/runtime.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n### Relay metrics\n")
	if !ok {
		t.Fatal(`docs/runtime.md: no "### Relay metrics" section`)
	}
	section, _, _ := strings.Cut(after, "\n#")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| counter \\| `relay` \\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	for _, name := range registered {
		if !documented[name] {
			t.Errorf("NewMetrics registers %s, which the relay metrics table does not list (as a counter of relay)", name)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("the relay metrics table lists %s, which NewMetrics does not register", name)
	}

	reg := rr.Registry
	own := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "billing", Name: "fenced_total", Help: "mine"})
	reg.MustRegister(own)
	if m, err := outbox.NewMetrics(reg, outbox.MetricsNamespace("billing")); m != nil || err == nil || !strings.Contains(err.Error(), "billing_fenced_total") {
		t.Fatalf("NewMetrics over a taken name: %v, %v", m, err)
	}
	var are prometheus.AlreadyRegisteredError
	if _, err := outbox.NewMetrics(reg); !errors.As(err, &are) {
		t.Fatalf("a second Metrics of one namespace: %v, want an AlreadyRegisteredError", err)
	}
}
