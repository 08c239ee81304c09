package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The names the spans are checked against, written out here rather than
// taken from the order system's list (internal/semconv), so that a renamed
// attribute fails this test: the messaging semantic conventions v1.44.0.
const (
	scopeName = "github.com/ordercast/ordercast/processor/proctrace"
	schemaURL = "https://opentelemetry.io/schemas/1.44.0"
)

// TestOneOrderOneTraceThroughCollector: `ordercast up`, its OTLP endpoint
// given by OTEL_EXPORTER_OTLP_ENDPOINT only, sends its spans over OTLP/HTTP
// to a real OpenTelemetry Collector (this module's: the OTLP receiver and
// the contrib file exporter, started in the test's process on a loopback
// port from 19600); one order is placed and the file the Collector wrote is
// read back with the Collector's own OTLP JSON unmarshaler. The order is one
// trace through checkout, orders, payments, the outbox relay, notifications
// and fulfillment: the 11 spans of docs/observability.md, of the resource
// service.name=ordercast, each with the kind and messaging attributes of the
// conventions, each a child of the span that caused it (a process span also
// linked to it) and started after it; the poll and commit spans (the
// exactly-once fulfillment's transaction's among them), and the outbox
// relay's progress marker, are in traces of their own.
func TestOneOrderOneTraceThroughCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	bin := ordercastBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	out := filepath.Join(dir, "traces.jsonl")
	startCollector(t, dir, port, out)

	up := startUp(t, bin, filepath.Join(dir, "data"), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+port)
	req, _ := http.NewRequest(http.MethodPost, "http://"+up+"/orders",
		strings.NewReader(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":2}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "otelcol-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /orders: %d, want 202", resp.StatusCode)
	}

	// span name and consumer group -> span, within the order's trace
	want := []string{
		"POST /orders", "send orderCreated",
		"process orderCreated @orders", "process orderCreated @payments", "process orderCreated @notifications",
		"send paymentProcessed",
		"process paymentProcessed @notifications", "process paymentProcessed @orders", "process paymentProcessed @fulfillment",
		"send shipmentRequested", "process shipmentRequested @orders",
	}
	var all []span
	var root span
	inTrace := map[string]span{}
	deadline := time.Now().Add(90 * time.Second)
	for {
		all = readSpans(t, out)
		root, inTrace = span{}, map[string]span{}
		for _, s := range all {
			if s.Name() == "POST /orders" {
				root = s
			}
		}
		var missing []string
		if !root.IsEmpty() {
			for _, s := range all {
				if s.TraceID() == root.TraceID() {
					if _, dup := inTrace[s.key()]; dup {
						t.Errorf("two spans %q in the order's trace", s.key())
					}
					inTrace[s.key()] = s
				}
			}
		}
		for _, w := range want {
			if _, ok := inTrace[w]; !ok {
				missing = append(missing, w)
			}
		}
		if !has(all, "poll orderCreated") || !has(all, "commit orderCreated") || !has(all, "commit paymentProcessed @fulfillment") {
			missing = append(missing, "poll orderCreated, commit orderCreated and fulfillment's transaction's commit paymentProcessed (any trace)")
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var have []string
			for _, s := range all {
				have = append(have, s.key()+" "+s.TraceID().String())
			}
			t.Fatalf("after 90 s the Collector's file lacks %q; it has %q", missing, have)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// One trace: every send and process span exported is the order's, but
	// for the outbox relay's progress marker (one per relay transaction,
	// for all of its rows), which, like each poll and commit, is in a trace
	// of its own.
	for _, s := range all {
		n := s.Name()
		own := strings.HasPrefix(n, "poll ") || strings.HasPrefix(n, "commit ") || strings.HasPrefix(n, "send ordercast.outbox.")
		if !own && s.TraceID() != root.TraceID() {
			t.Errorf("%s: trace %s, not the order's %s", s.key(), s.TraceID(), root.TraceID())
		}
		if own && s.TraceID() == root.TraceID() {
			t.Errorf("%s in the order's trace; want it in a trace of its own", s.key())
		}
		if s.service != "ordercast" {
			t.Errorf("%s: service.name %q, want ordercast", s.key(), s.service)
		}
	}
	if len(inTrace) != len(want) {
		t.Errorf("the order's trace has %d spans, want %d", len(inTrace), len(want))
	}

	if root.Kind() != ptrace.SpanKindServer || !root.ParentSpanID().IsEmpty() {
		t.Errorf("POST /orders: kind %v, parent %v; want the trace's root, a server span", root.Kind(), root.ParentSpanID())
	}
	// Who caused whom: each span's parent, by name.
	parents := map[string]string{
		"send orderCreated":                       "POST /orders",
		"process orderCreated @orders":            "send orderCreated",
		"process orderCreated @payments":          "send orderCreated",
		"process orderCreated @notifications":     "send orderCreated",
		"send paymentProcessed":                   "process orderCreated @payments",
		"process paymentProcessed @notifications": "send paymentProcessed",
		"process paymentProcessed @orders":        "send paymentProcessed",
		"process paymentProcessed @fulfillment":   "send paymentProcessed",
		"send shipmentRequested":                  "process paymentProcessed @fulfillment",
		"process shipmentRequested @orders":       "send shipmentRequested",
	}
	for name, pname := range parents {
		s, p := inTrace[name], inTrace[pname]
		if s.ParentSpanID() != p.SpanID() {
			t.Errorf("%s: parent %v, want %s's %v", name, s.ParentSpanID(), pname, p.SpanID())
		}
		if s.StartTimestamp() < p.StartTimestamp() {
			t.Errorf("%s started %v before its parent %s", name, p.StartTimestamp().AsTime().Sub(s.StartTimestamp().AsTime()), pname)
		}
		if s.EndTimestamp() < s.StartTimestamp() {
			t.Errorf("%s ended before it started", name)
		}
		if s.scope != scopeName || s.schema != schemaURL {
			t.Errorf("%s: scope %q schema %q, want %q %q", name, s.scope, s.schema, scopeName, schemaURL)
		}
		topic := strings.Fields(name)[1]
		attrs := map[string]any{
			"messaging.system":           "kafka",
			"messaging.destination.name": topic,
		}
		if strings.HasPrefix(name, "send ") {
			checkKind(t, s, ptrace.SpanKindProducer)
			attrs["messaging.operation.name"], attrs["messaging.operation.type"] = "send", "send"
		} else {
			checkKind(t, s, ptrace.SpanKindConsumer)
			attrs["messaging.operation.name"], attrs["messaging.operation.type"] = "process", "process"
			attrs["messaging.consumer.group.name"] = strings.TrimPrefix(strings.Fields(name)[2], "@")
			attrs["ordercast.attempt"] = int64(1)
			if !linksTo(s, p) {
				t.Errorf("%s: no link to %s, the record's send span", name, pname)
			}
		}
		for k, v := range attrs {
			if got, ok := s.Attributes().Get(k); !ok || got.AsRaw() != v {
				t.Errorf("%s: %s = %v (present %v), want %v", name, k, got.AsRaw(), ok, v)
			}
		}
		// Where the record is: the partition as a string, the offset an integer.
		if v, ok := s.Attributes().Get("messaging.destination.partition.id"); !ok || v.Type() != pcommon.ValueTypeStr {
			t.Errorf("%s: messaging.destination.partition.id %v (present %v), want a string", name, v.AsRaw(), ok)
		}
		if v, ok := s.Attributes().Get("messaging.kafka.offset"); !ok || v.Type() != pcommon.ValueTypeInt {
			t.Errorf("%s: messaging.kafka.offset %v (present %v), want an integer", name, v.AsRaw(), ok)
		}
	}
	// The exactly-once fulfillment's transaction commits like the others.
	for _, c := range []struct{ name, opType string }{{"poll orderCreated", "receive"}, {"commit orderCreated", "settle"}, {"commit paymentProcessed @fulfillment", "settle"}} {
		for _, s := range all {
			if s.Name() == c.name || s.key() == c.name {
				checkKind(t, s, ptrace.SpanKindClient)
				if v, _ := s.Attributes().Get("messaging.operation.type"); v.AsString() != c.opType {
					t.Errorf("%s: messaging.operation.type %q, want %q", c.name, v.AsString(), c.opType)
				}
				break
			}
		}
	}
	t.Logf("the order's trace %s: %d spans, %d spans in the file", root.TraceID(), len(inTrace), len(all))
}

// span is an exported span with its resource's service.name and its scope.
type span struct {
	ptrace.Span
	service, scope, schema string
}

// key is the span's name, with " @group" for a process or commit span.
func (s span) key() string {
	if v, ok := s.Attributes().Get("messaging.consumer.group.name"); ok && (strings.HasPrefix(s.Name(), "process ") || strings.HasPrefix(s.Name(), "commit ")) {
		return s.Name() + " @" + v.AsString()
	}
	return s.Name()
}

func (s span) IsEmpty() bool { return s.service == "" && s.scope == "" }

// has reports whether a span of all has that name or key.
func has(all []span, name string) bool {
	for _, s := range all {
		if s.Name() == name || s.key() == name {
			return true
		}
	}
	return false
}

func linksTo(s, p span) bool {
	for i := 0; i < s.Links().Len(); i++ {
		l := s.Links().At(i)
		if l.TraceID() == p.TraceID() && l.SpanID() == p.SpanID() {
			return true
		}
	}
	return false
}

func checkKind(t *testing.T, s span, k ptrace.SpanKind) {
	t.Helper()
	if s.Kind() != k {
		t.Errorf("%s: kind %v, want %v", s.key(), s.Kind(), k)
	}
}

// readSpans reads the file exporter's output: one OTLP JSON
// ExportTraceServiceRequest per line; a last line not yet ended is left
// for the next read.
func readSpans(t *testing.T, path string) []span {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []span
	var u ptrace.JSONUnmarshaler
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := b[:i]
		b = b[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		td, err := u.UnmarshalTraces(line)
		if err != nil {
			t.Fatalf("%s: a line the OTLP JSON unmarshaler refuses: %v\n%s", path, err, line)
		}
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			rs := td.ResourceSpans().At(i)
			svc, _ := rs.Resource().Attributes().Get("service.name")
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j)
				for k := 0; k < ss.Spans().Len(); k++ {
					out = append(out, span{Span: ss.Spans().At(k), service: svc.AsString(), scope: ss.Scope().Name(), schema: ss.SchemaUrl()})
				}
			}
		}
	}
	return out
}

// freePort returns the first loopback host:port from 19600 that is free.
func freePort(t *testing.T) string {
	t.Helper()
	for p := 19600; p < 19700; p++ {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port in 127.0.0.1:19600-19699")
	return ""
}

// startCollector runs the Collector of this module in the test's process,
// its OTLP/HTTP receiver on addr and its file exporter writing out, and
// returns once it runs; it is shut down when the test ends.
func startCollector(t *testing.T, dir, addr, out string) {
	t.Helper()
	cfg := filepath.Join(dir, "otelcol.yaml")
	yaml := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, addr, out)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	set := settings()
	set.DisableGracefulShutdown = true
	set.ConfigProviderSettings.ResolverSettings.URIs = []string{"file:" + cfg}
	col, err := otelcol.NewCollector(set)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- col.Run(context.Background()) }()
	t.Cleanup(func() {
		col.Shutdown()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("collector: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("collector not stopped 30 s after Shutdown")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for col.GetState() != otelcol.StateRunning {
		select {
		case err := <-done:
			t.Fatalf("collector stopped at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not running after 30 s: state %v", col.GetState())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ordercastBinary returns ORDERCAST_BIN, or else builds cmd/ordercast of
// the repository (two directories up). Without the go command, or when the
// build cannot fetch a module (offline, no module cache), it skips saying
// so; in CI (CI=true) it fails instead.
func ordercastBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("ORDERCAST_BIN"); b != "" {
		return b
	}
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		skip("the go command is not on PATH: this test builds cmd/ordercast (or set ORDERCAST_BIN)")
	}
	bin := filepath.Join(t.TempDir(), "ordercast")
	cmd := exec.Command(goBin, "build", "-o", bin, "./ordercast")
	cmd.Dir = "../../cmd" // the module github.com/ordercast/ordercast/cmd
	if out, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("dial tcp")) || bytes.Contains(out, []byte("GOPROXY")) || bytes.Contains(out, []byte("no such host")) {
			skip("go build ./cmd/ordercast cannot fetch its modules (offline?): %v\n%s", err, out)
		}
		t.Fatalf("go build ./cmd/ordercast: %v\n%s", err, out)
	}
	return bin
}

// startUp starts `ordercast up` (embedded broker and registry, SQLite, the
// one-day seed file) with env added to the test's environment less its
// OTEL_ variables, and returns checkout's host:port once it listens; the
// process gets SIGTERM when the test ends and must exit 0 (flushing its
// spans).
func startUp(t *testing.T, bin, dataDir string, env ...string) string {
	t.Helper()
	cmd := exec.Command(bin, "up", "--data-dir", dataDir, "--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0",
		"--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0",
		"--seed-data", "../../data/online-retail/online_retail_2010-12-01.csv", "--log-level", "warn", "--auth", "none",
		// One record per handler call, so that each record is a process
		// span of its order's trace: a group that fetches both of the
		// order's records at once (notifications, on a loaded machine)
		// would otherwise handle them as one batch span in a trace of its
		// own (docs/observability.md).
		"--max-batch", "0")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The SDK's batch span processor sends every 200 ms instead of 5 s.
	cmd.Env = append(append(cmd.Env, "OTEL_BSP_SCHEDULE_DELAY=200"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	read := make(chan struct{})
	started := make(chan string, 1)
	go func() {
		defer close(read)
		re := regexp.MustCompile(`checkout on http://([0-9.:]+) `)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				started <- m[1]
			}
		}
	}()
	logged := func() string { mu.Lock(); defer mu.Unlock(); return log.String() }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-read:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("ordercast up not stopped 60 s after SIGTERM:\n%s", logged())
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("ordercast up after SIGTERM: %v\n%s", err, logged())
		}
	})
	select {
	case addr := <-started:
		return addr
	case <-read:
		t.Fatalf("ordercast up exited at start:\n%s", logged())
	case <-time.After(90 * time.Second):
		t.Fatalf("ordercast up did not start in 90 s:\n%s", logged())
	}
	return ""
}

// TestCommandValidates: the command main runs (otelcol.NewCommand with
// settings) accepts a configuration of its receiver and exporters given by
// path or file: URI, and refuses one naming an exporter it was not built
// with.
func TestCommandValidates(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	conf := `receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:19699}}}}
exporters: {%s: {%s}}
service: {pipelines: {traces: {receivers: [otlp], exporters: [%s]}}}
`
	if err := os.WriteFile(good, []byte(fmt.Sprintf(conf, "file", "path: "+filepath.Join(dir, "t.jsonl"), "file")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(fmt.Sprintf(conf, "kafka", "", "kafka")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uri string
		ok  bool
	}{{good, true}, {"file:" + good, true}, {"file:" + bad, false}} {
		cmd := otelcol.NewCommand(settings())
		cmd.SetArgs([]string{"validate", "--config", c.uri})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); (err == nil) != c.ok {
			t.Errorf("validate --config %s: %v, want ok %v", c.uri, err, c.ok)
		}
	}
}
