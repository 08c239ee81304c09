package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkafka"
)

const oneDay = "../../data/online-retail/online_retail_2010-12-01.csv"

// buildBinary builds ordercast once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ordercast")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// upCommand is exec.Command(bin, args...) without the environment that would
// point the child at another cluster, registry or database than the flags
// say (KAFKA_BROKERS, SCHEMA_REGISTRY_URL, ORDERCAST_DB default --brokers,
// --registry and --db).
func upCommand(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "KAFKA_BROKERS", "SCHEMA_REGISTRY_URL", "ORDERCAST_DB":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

// upArgs runs the embedded stack on free loopback ports. With
// ORDERCAST_TEST_BROKERS set, `up` uses that real cluster (--brokers, topics
// with RF min(3, brokers)) and keeps the embedded registry and SQLite; call
// freshCluster at the start of the test so it sees no topics or groups of
// earlier tests.
func upArgs(dataDir string, extra ...string) []string {
	args := []string{"up", "--data-dir", dataDir, "--http", "127.0.0.1:0", "--broker-addr", "127.0.0.1:0",
		"--registry-addr", "127.0.0.1:0", "--seed-data", "../../data/online-retail/online_retail.csv.gz", "--log-level", "warn"}
	if testkafka.Real() {
		args = append(args, "--brokers", strings.Join(testkafka.Brokers(), ","), "--replication-factor", strconv.Itoa(int(realRF)))
	}
	return append(args, extra...)
}

// realRF is the replication factor for topics `up` creates on a real
// cluster, set by freshCluster.
var realRF int16 = 1

// freshCluster empties the real cluster of ORDERCAST_TEST_BROKERS (topics and
// groups of earlier tests) and returns its brokers; on the embedded broker
// (each `up` starts its own) it does nothing and returns nil.
func freshCluster(t *testing.T) []string {
	t.Helper()
	if !testkafka.Real() {
		return nil
	}
	brokers := testkafka.Cluster(t, nil)
	realRF = testkafka.ReplicationFactor(t)
	return brokers
}

func readReport(t *testing.T, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func checkReport(t *testing.T, r Report) {
	t.Helper()
	if len(r.Invariants) < 5 {
		t.Fatalf("report has %d invariants, want 5: %+v", len(r.Invariants), r.Invariants)
	}
	for name, inv := range r.Invariants {
		if !inv.OK {
			t.Errorf("invariant %s violated: %s", name, inv.Detail)
		}
	}
	if r.OrdersStored != r.OrdersAccepted {
		t.Errorf("stored %d of %d accepted orders", r.OrdersStored, r.OrdersAccepted)
	}
	if got := r.PaymentsDebited + r.PaymentsByCard; got != r.ShipmentsRequested {
		t.Errorf("%d paid orders but %d shipments", got, r.ShipmentsRequested)
	}
	if r.PaymentsDebited+r.PaymentsByCard+r.PaymentsRefused != r.OrdersAccepted {
		t.Errorf("payments %d+%d+%d != accepted %d", r.PaymentsDebited, r.PaymentsByCard, r.PaymentsRefused, r.OrdersAccepted)
	}
}

// TestUpReplayOneDay runs the README's command on the one-day file: every
// sale invoice ends as an accepted order or a counted rejection, every
// accepted order goes through every service, and the invariants recomputed
// from the database and the topics hold.
func TestUpReplayOneDay(t *testing.T) {
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	cmd := upCommand(bin, upArgs(filepath.Join(dir, "data"), "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "3m")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ordercast up: %v\n%s", err, out)
	}
	r := readReport(t, report)
	checkReport(t, r)
	// 143 invoices: 136 sales, 6 cancellations, 1 write-off (counted
	// independently with awk over the CSV, see replay's tests).
	if r.InvoicesRead != 143 || r.NotOrdersByReason["cancellation"] != 6 || r.NotOrdersByReason["write_off"] != 1 {
		t.Errorf("invoices %d, not orders %v", r.InvoicesRead, r.NotOrdersByReason)
	}
	rejected := 0
	for _, n := range r.RejectedByReason {
		rejected += n
	}
	if r.OrdersAccepted+rejected != 136 {
		t.Errorf("accepted %d + rejected %d != 136 sales", r.OrdersAccepted, rejected)
	}
	if r.PaymentsRefused == 0 {
		t.Errorf("no payment refused: the opening credit should make some real customers run out")
	}
}

// TestUpResumesAfterSIGTERM: SIGTERM mid-replay exits 0 after a clean
// shutdown; running again on the same data directory resumes: nothing
// accepted is lost and nothing is charged twice.
func TestUpResumesAfterSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cmd := upCommand(bin, upArgs(data, "--replay", oneDay, "--rate", "40")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	var logBuf strings.Builder
	go func() {
		re := regexp.MustCompile(`checkout on http://([0-9.:]+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logBuf.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-addr:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("up did not start:\n%s", logBuf.String())
	}
	// Wait until payments has processed some orders, then SIGTERM.
	deadline := time.Now().Add(60 * time.Second)
	for processed(t, base, "payments") < 20 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("payments processed fewer than 20 records in 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: %v (want exit 0)", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("up did not exit within 60s of SIGTERM")
	}
	report := filepath.Join(dir, "report.json")
	again := upCommand(bin, upArgs(data, "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "3m")...)
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	checkReport(t, readReport(t, report))
}

// processed reads ordercast_consumer_records_processed_total for a group.
func processed(t *testing.T, base, group string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0
	re := regexp.MustCompile(fmt.Sprintf(`ordercast_consumer_records_processed_total\{group="%s",topic="[^"]+"\} ([0-9.e+]+)`, group))
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += int(v)
	}
	return total
}
