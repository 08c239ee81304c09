package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// EnvKafkaScript names scripts/kafka.sh, managing the cluster of
// ORDERCAST_TEST_BROKERS, for tests that kill and restart its nodes.
const EnvKafkaScript = "ORDERCAST_TEST_KAFKA_SCRIPT"

// metricSum scrapes /metrics and sums every sample of the named metric
// whose labels include each of the given `name="value"` pairs (0 when the
// scrape fails).
func metricSum(base, name string, labels ...string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+]+)$`)
	total := 0.0
next:
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				continue next
			}
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		total += v
	}
	return total
}

// kafkaScript runs scripts/kafka.sh with args (its ORDERCAST_KAFKA_* from
// the environment) and fails the test if it fails.
func kafkaScript(t *testing.T, script string, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	return time.Since(start)
}

// TestBrokerKilledUnderLoad: on a three-node cluster (topics RF 3,
// min.insync.replicas 2), the one-day replay goes through checkout (acks=all,
// idempotent producer) while node 2 is SIGKILLed and later started again.
// Checkout keeps acknowledging orders with two of three replicas in sync,
// every acknowledged order is stored, charged and shipped once (the report's
// invariants, recomputed from the database and the topics), and the
// consumers carry on through the leader moves. Needs the cluster's
// scripts/kafka.sh: make test-kafka-3.
func TestBrokerKilledUnderLoad(t *testing.T) {
	script := os.Getenv(EnvKafkaScript)
	if script == "" || !testkafka.Real() {
		t.Skipf("needs a 3-node cluster that the test may kill nodes of: set %s and %s=scripts/kafka.sh (make test-kafka-3)", testkafka.EnvBrokers, EnvKafkaScript)
	}
	if !filepath.IsAbs(script) {
		script = filepath.Join("../..", script) // relative to the repository root
	}
	freshCluster(t)
	if realRF < 3 {
		t.Skipf("needs 3 brokers, %s has %d", testkafka.EnvBrokers, realRF)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	cmd := upCommand(bin, upArgs(filepath.Join(dir, "data"), "--min-insync-replicas", "2",
		"--replay", oneDay, "--rate", "3", "--exit-when-done", "--report", report, "--timeout", "5m")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	logDone := make(chan struct{})
	var logBuf strings.Builder
	go func() {
		defer close(logDone)
		re := regexp.MustCompile(`admin on http://([0-9.:]+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logBuf.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	killed := false
	defer func() {
		if killed { // bring the node back whatever happened
			_, _ = exec.Command(script, "start-node", "2").CombinedOutput()
		}
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var base string
	select {
	case base = <-addr:
	case <-time.After(90 * time.Second):
		t.Fatalf("up did not start:\n%s", logBuf.String())
	}
	const accepted = "ordercast_checkout_orders_accepted_total"
	waitMetric := func(name string, atLeast float64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for metricSum(base, name) < atLeast {
			if time.Now().After(deadline) {
				t.Fatalf("%s stayed below %v for %v (now %v)\n%s", name, atLeast, within, metricSum(base, name), logBuf.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitMetric("ordercast_consumer_records_processed_total", 10, 90*time.Second)

	before := metricSum(base, accepted)
	kafkaScript(t, script, "stop-node", "2", "--kill")
	killed = true
	killedAt := time.Now()
	// acks=all goes on with two of three replicas once the controller has
	// fenced node 2 (broker.session.timeout.ms, 9 s) and shrunk the ISRs.
	waitMetric(accepted, before+5, 90*time.Second)
	during := metricSum(base, accepted) - before
	t.Logf("node 2 SIGKILLed after %v accepted orders; %v more acknowledged with it down (first 5 within %v)", before, during, time.Since(killedAt).Round(time.Millisecond))

	took := kafkaScript(t, script, "start-node", "2")
	killed = false
	restartedAt := metricSum(base, accepted)
	t.Logf("node 2 back and in every ISR after %v; %v orders accepted by then", took.Round(time.Second), restartedAt)

	done := make(chan error, 1)
	go func() { <-logDone; done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ordercast up: %v\n%s", err, logBuf.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("up did not finish within 5m\n%s", logBuf.String())
	}
	r := readReport(t, report)
	checkReport(t, r)
	rejected := 0
	for _, n := range r.RejectedByReason {
		rejected += n
	}
	if r.OrdersAccepted+rejected != 136 || r.ReplayFailed != 0 {
		t.Errorf("accepted %d + rejected %d != 136 sales (%d failed)", r.OrdersAccepted, rejected, r.ReplayFailed)
	}
	t.Logf("report: %d accepted (%v after the restart), %d stored, %d debited, %d by card, %d refused, %d shipments, in %.1fs",
		r.OrdersAccepted, float64(r.OrdersAccepted)-restartedAt, r.OrdersStored, r.PaymentsDebited, r.PaymentsByCard, r.PaymentsRefused,
		r.ShipmentsRequested, r.ElapsedSeconds)
}
