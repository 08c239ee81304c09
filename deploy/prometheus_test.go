// Package deploy_test checks the files of deploy/ against the running order
// system: the Prometheus alert rules (promtool check and unit tests), a real
// Prometheus scraping a running system, and the metric names the Grafana
// dashboard and the alert rules use against a real /metrics scrape.
//
// The tests that run promtool or prometheus (Debian package prometheus) skip
// when the binary is not on PATH; CI installs it (.ci/run).
package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"go.yaml.in/yaml/v4"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	configFile     = "prometheus/prometheus.yml"
	dashboardFile  = "grafana/ordercast.json"
)

// tool returns the path of a Prometheus binary, or skips the test.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not on PATH (Debian/Ubuntu: apt-get install prometheus): %v", name, err)
	}
	return p
}

func run(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return rf
}

// TestAlertRules: alerts.yml and prometheus.yml pass promtool's checks, and
// alerts_test.yml's unit tests pass; every alert has a test in which it
// fires and one in which it stays quiet.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	run(t, ".", promtool, "check", "rules", alertsFile)
	run(t, "prometheus", promtool, "check", "config", filepath.Base(configFile))
	run(t, "prometheus", promtool, "test", "rules", filepath.Base(alertTestsFile))

	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: %s has a test where it fires: %v, where it stays quiet: %v; want both", alertTestsFile, r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// startSystem starts every service of the order system on the embedded
// broker and places one order; it returns the system once every group has
// its member.
func startSystem(t *testing.T) (*system.System, *prometheus.Registry) {
	t.Helper()
	_, brokers := testkafka.Fake(t, nil)
	sreg := srfake.New()
	t.Cleanup(sreg.Close)
	mreg := prometheus.NewRegistry()
	sys, err := system.Start(context.Background(), system.Config{
		Schema: system.SchemaConfig{RegistryURL: sreg.URL()},
		Kafka: system.KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: 2, ReplicationFactor: 1,
			RetryDelays: []time.Duration{time.Second, 5 * time.Second}}},
		// Key order, as the CLI runs: payments and orders then block keys
		// through the retry topics and export the key-blocking series.
		Consumers: system.ConsumerConfig{Ordering: processor.OrderKey},
		Metrics:   mreg,
		DB:        system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		HTTP:      system.HTTPConfig{Addr: "127.0.0.1:0"},
		SeedFile:  "../data/online-retail/online_retail_2010-12-01.csv",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	admin := "http://" + sys.AdminAddr()
	testkafka.WaitFor(t, 60*time.Second, "admin /readyz ready", func() bool { code, _ := get(admin + "/readyz"); return code == http.StatusOK })
	// One order accepted, one refused (a stock code the catalog lacks).
	for body, want := range map[string]int{
		`{"lines":[{"stockCode":"85123A","quantity":2}]}`: http.StatusAccepted,
		`{"lines":[{"stockCode":"NOPE1","quantity":2}]}`:  http.StatusUnprocessableEntity,
	} {
		resp, err := http.Post("http://"+sys.HTTPAddr()+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST /orders %s: %d %s; want %d", body, resp.StatusCode, b, want)
		}
	}
	return sys, mreg
}

func get(u string) (int, string) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAgainstRunningSystem runs one order system and checks deploy/ against
// it: the metric names the dashboard and the alert rules use are on its
// /metrics, and a real Prometheus scraping it (with alerts.yml loaded)
// answers queries of the lag, DLQ and in-flight series.
func TestAgainstRunningSystem(t *testing.T) {
	testkafka.Parallel(t)
	sys, mreg := startSystem(t)
	admin := "http://" + sys.AdminAddr()

	t.Run("dashboard and alert metrics exported", func(t *testing.T) {
		exprs := dashboardExprs(t)
		for _, g := range readRules(t).Groups {
			for _, r := range g.Rules {
				exprs = append(exprs, expr{where: alertsFile + " " + r.Alert, promql: r.Expr})
			}
		}
		// Every series is there once the processors ran a commit and the
		// lag collector and the franz-go hooks saw their clients.
		if registered(mreg, "ordercast_consumer_no_such_metric") {
			t.Fatal("registered() finds a name nothing registered")
		}
		notes := map[string]bool{}
		poll(t, 30*time.Second, "every metric the dashboard and the alerts use on /metrics", func() (bool, string) {
			code, body := get(admin + "/metrics")
			if code != http.StatusOK {
				return false, fmt.Sprintf("/metrics: %d", code)
			}
			exported := scrapedNames(body)
			var missing []string
			for _, e := range exprs {
				for _, n := range metricNames(e.promql) {
					if exported[n] {
						continue
					}
					if why, ok := bornOnFirstEvent[n]; ok && registered(mreg, n) {
						notes[fmt.Sprintf("%s: %s registered, not on /metrics until %s", e.where, n, why)] = true
						continue
					}
					missing = append(missing, fmt.Sprintf("%s: %s", e.where, n))
				}
			}
			return len(missing) == 0, "used but not exported:\n" + strings.Join(missing, "\n")
		})
		for _, n := range slices.Sorted(maps.Keys(notes)) {
			t.Log(n)
		}
	})

	t.Run("prometheus scrapes it", func(t *testing.T) {
		prom := startPrometheus(t, sys.AdminAddr())
		// The rules file loads and evaluates.
		testkafka.WaitFor(t, 30*time.Second, "alerts.yml loaded and evaluated", func() bool {
			var rules struct {
				Groups []struct {
					Rules []struct {
						Name, Health string
					}
				}
			}
			if err := promGet(prom, "/api/v1/rules", nil, &rules); err != nil {
				return false
			}
			n := 0
			for _, g := range rules.Groups {
				for _, r := range g.Rules {
					if r.Health != "ok" {
						return false
					}
					n++
				}
			}
			return n > 0 && n == countRules(readRules(t))
		})
		for _, q := range []struct {
			query string
			want  func(labels map[string]string, v float64) bool
		}{
			// The lag of each group, as the broker sees it.
			{`max by (group) (ordercast_group_lag_total{job="ordercast"})`, func(l map[string]string, v float64) bool { return l["group"] == "payments" && v >= 0 }},
			// The DLQ counter exists at 0 from the start, for rate() and increase().
			{`sum by (group) (ordercast_consumer_records_dead_lettered_total)`, func(l map[string]string, v float64) bool { return l["group"] == "payments" && v == 0 }},
			{`sum by (group) (increase(ordercast_consumer_records_dead_lettered_total[1m]))`, func(l map[string]string, v float64) bool { return l["group"] == "orders" && v == 0 }},
			// The records each member holds.
			{`sum by (group) (ordercast_consumer_in_flight_records)`, func(l map[string]string, v float64) bool { return l["group"] == "payments" && v >= 0 }},
			{`max by (group) (ordercast_consumer_oldest_in_flight_seconds)`, func(l map[string]string, v float64) bool { return l["group"] == "notifications" && v >= 0 }},
			// The order placed: checkout accepted it and payments processed it.
			{`sum(ordercast_checkout_orders_accepted_total)`, func(_ map[string]string, v float64) bool { return v == 1 }},
			{`sum(ordercast_checkout_orders_rejected_total)`, func(_ map[string]string, v float64) bool { return v == 1 }},
			{`sum(ordercast_consumer_records_processed_total{group="payments",topic="orderCreated"})`, func(_ map[string]string, v float64) bool { return v == 1 }},
		} {
			poll(t, 30*time.Second, "Prometheus answers "+q.query, func() (bool, string) {
				var res struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
						Value  [2]any            `json:"value"`
					} `json:"result"`
				}
				if err := promGet(prom, "/api/v1/query", url.Values{"query": {q.query}}, &res); err != nil {
					return false, err.Error()
				}
				for _, r := range res.Result {
					var v float64
					if s, ok := r.Value[1].(string); ok {
						if _, err := fmt.Sscan(s, &v); err == nil && q.want(r.Metric, v) {
							return true, ""
						}
					}
				}
				return false, fmt.Sprint("result ", res.Result)
			})
		}
	})
}

// bornOnFirstEvent are the series that a healthy process does not export
// until what they count first happens (the franz-go client's error counters,
// created by kprom at the first error) or that the order system's services
// do not use (the completed-offsets map exists in key and unordered mode
// only): for them the test checks the name is registered with the
// registry behind /metrics.
var bornOnFirstEvent = map[string]string{
	"ordercast_kafka_connect_errors_total":      "a connection to a broker fails",
	"ordercast_kafka_read_errors_total":         "a read from a broker fails",
	"ordercast_kafka_write_errors_total":        "a write to a broker fails",
	"ordercast_consumer_offset_map_window_full": "a processor in OrderKey or OrderUnordered mode runs",
}

// registered reports whether a metric named name is registered with reg:
// a probe gauge of that name with a label no real series has is refused as
// inconsistent with a registered descriptor of the same name (prometheus'
// Registry.Register), and accepted (then unregistered) when there is none.
func registered(reg *prometheus.Registry, name string) bool {
	probe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "probe"}, []string{"deploy_test_probe"})
	if err := reg.Register(probe); err != nil {
		return true
	}
	reg.Unregister(probe)
	return false
}

// poll calls cond until it returns true, every 50 ms, and fails the test
// with cond's last description of what it saw after d.
func poll(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", d, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countRules(rf ruleFile) int {
	n := 0
	for _, g := range rf.Groups {
		n += len(g.Rules)
	}
	return n
}

// startPrometheus runs the prometheus binary on a free loopback port with a
// generated configuration scraping target every second and loading
// alerts.yml; it returns its base URL once it is ready.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: ordercast
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logs, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		logs.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + addr
	testkafka.WaitFor(t, 30*time.Second, "prometheus ready", func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(logs.Name())
			t.Fatalf("prometheus exited:\n%s", b)
		default:
		}
		code, _ := get(base + "/-/ready")
		return code == http.StatusOK
	})
	return base
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// promGet calls Prometheus's HTTP API and decodes the data of a success.
func promGet(base, path string, q url.Values, data any) error {
	u := base + path
	if q != nil {
		u += "?" + q.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s %s", path, body.Status, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

type expr struct{ where, promql string }

// dashboardExprs returns every PromQL expression of the dashboard's panels
// (the "expr" members of its targets, at any depth).
func dashboardExprs(t *testing.T) []expr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []expr
	var walk func(v any, title string)
	walk = func(v any, title string) {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v["title"].(string); ok {
				title = s
			}
			for k, c := range v {
				if s, ok := c.(string); ok && k == "expr" {
					out = append(out, expr{where: fmt.Sprintf("%s panel %q", dashboardFile, title), promql: s})
				} else {
					walk(c, title)
				}
			}
		case []any:
			for _, c := range v {
				walk(c, title)
			}
		}
	}
	walk(doc, "")
	if len(out) == 0 {
		t.Fatalf("%s: no expr found", dashboardFile)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where+out[i].promql < out[j].where+out[j].promql })
	return out
}

// scrapedNames returns the names of the samples of a text-format scrape
// (histograms as their _bucket, _sum and _count series, as PromQL sees them).
func scrapedNames(body string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGroupings = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promqlKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "Inf", "NaN", "e"}
)

// metricNames returns the metric names an expression selects: what is left
// once strings, label matchers, range and subquery durations, grouping
// clauses, function and aggregation calls, keywords and numbers are taken out.
// Enough for the expressions of deploy/ (no @ modifiers, no __name__
// matchers); a name it misses is one fewer check, never a false failure.
func metricNames(q string) []string {
	q = promqlStrings.ReplaceAllString(q, `""`)
	q = promqlMatchers.ReplaceAllString(q, " ")
	q = promqlRanges.ReplaceAllString(q, " ")
	q = promqlGroupings.ReplaceAllString(q, " ")
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatchIndex(q, -1) {
		if m[2] >= 0 { // a call: sum(, rate(, histogram_quantile(
			continue
		}
		if m[0] > 0 && (q[m[0]-1] >= '0' && q[m[0]-1] <= '9' || q[m[0]-1] == '.') {
			continue // the exponent or unit of a number: 1e3, 5m
		}
		id := q[m[0]:m[1]]
		if slices.Contains(promqlKeywords, id) {
			continue
		}
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names
}

// TestMetricNames: the extraction above on the shapes deploy/ uses.
func TestMetricNames(t *testing.T) {
	for q, want := range map[string][]string{
		`max by (group) (ordercast_group_lag_total{group=~"$group"}) > 1000`:                                                                         {"ordercast_group_lag_total"},
		`histogram_quantile(0.99, sum by (group, le) (rate(ordercast_consumer_handler_duration_seconds_bucket{group=~"$group"}[$__rate_interval])))`: {"ordercast_consumer_handler_duration_seconds_bucket"},
		`sum by (group) (increase(ordercast_consumer_rebalances_total{kind="revoked"}[15m])) > 20`:                                                   {"ordercast_consumer_rebalances_total"},
		"max by (g) (a_total) > 0\nunless\nmax by (g) (changes(b_offset[10m])) > 1e3":                                                                {"a_total", "b_offset"},
		`sum(rate(x_total[5m]) + rate(y_total[5m])) / on(job) group_left(instance) z == bool 0`:                                                      {"x_total", "y_total", "z"},
	} {
		if got := metricNames(q); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %v; want %v", q, got, want)
		}
	}
}
