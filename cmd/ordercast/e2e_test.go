package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
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
	args := []string{"up", "--data-dir", dataDir, "--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0", "--broker-addr", "127.0.0.1:0",
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
	if r.Status != StatusPassed || r.Reason != "" || r.Outstanding != nil {
		t.Errorf("status %q, reason %q, outstanding %+v; want passed", r.Status, r.Reason, r.Outstanding)
	}
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
	var phases float64
	for _, k := range []string{"start", "replay", "drain", "audit"} {
		v, ok := r.PhaseSeconds[k]
		if !ok || v < 0 {
			t.Errorf("phaseSeconds %v: want %q, not negative", r.PhaseSeconds, k)
		}
		phases += v
	}
	if phases > r.ElapsedSeconds+0.5 || phases < r.ElapsedSeconds-2 {
		t.Errorf("phaseSeconds %v add up to %.1f s, elapsedSeconds %.1f", r.PhaseSeconds, phases, r.ElapsedSeconds)
	}
	if got := r.PaymentsDebited + r.PaymentsByCard; got != r.ShipmentsRequested {
		t.Errorf("%d paid orders but %d shipments", got, r.ShipmentsRequested)
	}
	if r.PaymentsDebited+r.PaymentsByCard+r.PaymentsRefused != r.OrdersAccepted || r.PaymentsDecided != r.OrdersAccepted {
		t.Errorf("payments %d+%d+%d (decided %d) != accepted %d", r.PaymentsDebited, r.PaymentsByCard, r.PaymentsRefused, r.PaymentsDecided, r.OrdersAccepted)
	}
	if r.ShipmentRecordsRead == nil || *r.ShipmentRecordsRead != r.ShipmentsRequested || r.DLQRecords == nil || r.CountsCover == "" {
		t.Errorf("shipment records read %v (recorded %d), dlqRecords %v, countsCover %q", r.ShipmentRecordsRead, r.ShipmentsRequested, r.DLQRecords, r.CountsCover)
	}
}

// checkConsistent: the counts of a report are from one reading, each of
// the orders accepted in it, so none exceeds what it is a part of.
func checkConsistent(t *testing.T, r Report) {
	t.Helper()
	paid := r.PaymentsDebited + r.PaymentsByCard
	if r.OrdersStored > r.OrdersAccepted || r.PaymentsDecided > r.OrdersAccepted || paid+r.PaymentsRefused != r.PaymentsDecided ||
		r.ShipmentsRequested > paid || r.NotificationsSent > r.OrdersAccepted+r.PaymentsDecided || r.DLQRecords == nil {
		t.Errorf("inconsistent report counts: %+v", r)
	}
	if o := r.Outstanding; o != nil && (o.PaymentsNotDecided != r.OrdersAccepted-r.PaymentsDecided || o.ShipmentsNotSeen != paid-r.ShipmentsRequested) {
		t.Errorf("outstanding %+v disagrees with the counts %+v", o, r)
	}
}

// TestUpReplayOneDay runs docs/running.md's replay command on the one-day file: every
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

// upProc is a running `ordercast up` whose stderr is collected.
type upProc struct {
	cmd      *exec.Cmd
	base     string   // checkout's host:port
	admin    string   // the admin listener's host:port (/metrics)
	brokers  []string // the brokers it uses (embedded or --brokers)
	registry string   // the schema registry URL

	mu     sync.Mutex    // guards stderr
	stderr bytes.Buffer  // what it wrote so far
	read   chan struct{} // closed when stderr is read to its end
}

// launchUp starts `ordercast up` with args and waits until checkout
// listens.
func launchUp(t *testing.T, bin string, args ...string) *upProc {
	t.Helper()
	p := &upProc{cmd: upCommand(bin, args...), read: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan []string, 1)
	go func() {
		defer close(p.read)
		re := regexp.MustCompile(`checkout on http://([0-9.:]+) .*admin on http://([0-9.:]+) .*; brokers \[([^\]]*)\], registry (\S+), db`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				started <- m
			}
		}
	}()
	select {
	case m := <-started:
		p.base, p.admin, p.brokers, p.registry = m[1], m[2], strings.Fields(m[3]), m[4]
	case <-time.After(90 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("up did not start in 90s:\n%s", p.log())
	}
	return p
}

func (p *upProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitProcessed waits until payments processed n records.
func (p *upProc) waitProcessed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for processed(t, p.admin, "payments") < n {
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			t.Fatalf("payments processed fewer than %d records in 60s:\n%s", n, p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wait waits, up to 60s, for the process to exit and returns its exit code.
func (p *upProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.read:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("up did not exit within 60s:\n%s", p.log())
	}
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestUpResumesAfterSIGTERM: without --exit-when-done, SIGTERM is how `up`
// is stopped: mid-replay it exits 0 after a clean shutdown, saying how far
// the replay got; running again on the same data directory resumes:
// nothing accepted is lost and nothing is charged twice.
func TestUpResumesAfterSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := launchUp(t, bin, upArgs(data, "--replay", oneDay, "--rate", "40")...)
	p.waitProcessed(t, 20)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("after SIGTERM: exit %d, want 0:\n%s", code, p.log())
	}
	if !regexp.MustCompile(`replay interrupted \(terminated signal received\) after [0-9]+ of 136 sales`).MatchString(p.log()) {
		t.Errorf("stderr does not say how far the replay got:\n%s", p.log())
	}
	report := filepath.Join(dir, "report.json")
	again := upCommand(bin, upArgs(data, "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "3m")...)
	out, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "not stopped cleanly") {
		t.Errorf("after a SIGTERM, the second run warns of an unclean stop:\n%s", out)
	}
	r := readReport(t, report)
	checkReport(t, r)
	// The second run's report counts the database, the first run's orders
	// included, and says so.
	if r.OrdersBeforeRun == 0 || r.OrdersBeforeRun > r.OrdersAccepted || !strings.Contains(r.CountsCover, "before this run") ||
		!strings.Contains(string(out), "already holds") {
		t.Errorf("second run on the same --data-dir: ordersBeforeRun %d of %d, countsCover %q\n%s", r.OrdersBeforeRun, r.OrdersAccepted, r.CountsCover, out)
	}
}

// TestUpResumesAfterSIGKILL: up is killed mid-replay (with the embedded
// broker, the broker dies too, with transactions open) and started again on
// the same data: every invariant holds once the replay is finished,
// including one shipmentRequested per paid order for read_committed readers.
// On the embedded broker this needs a fresh transactional id per start
// (system.Config.Kafka.TransactionalIDSuffix): kfake's crash recovery aborts the
// open transactions without markers, and readers then skipped the later
// records of the restarted producers.
//
// Opt-in (ORDERCAST_TEST_SIGKILL=1): with the fix it passed, but one run of
// two ended with one payment unseen by notifications and fulfillment. kfake
// writes a transaction's commit markers partition by partition with no
// prepare record (kfake txns.go endTx), so a kill in the middle leaves the
// relay's progress marker committed and its paymentProcessed aborted. Not a
// guarantee of the embedded stack (docs/running.md, "A hard kill of the embedded broker"). On a real cluster (the
// broker survives the kill) it always runs and must pass.
func TestUpResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	if !testkafka.Real() && os.Getenv("ORDERCAST_TEST_SIGKILL") == "" {
		t.Skip("on the embedded broker opt-in (ORDERCAST_TEST_SIGKILL=1): kfake's transactions do not survive a SIGKILL atomically, see the comment")
	}
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := launchUp(t, bin, upArgs(data, "--replay", oneDay, "--rate", "40")...)
	p.waitProcessed(t, 40)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	report := filepath.Join(dir, "report.json")
	again := upCommand(bin, upArgs(data, "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "3m")...)
	out, err := again.CombinedOutput()
	if err != nil {
		t.Fatalf("run after SIGKILL: %v\n%s", err, out)
	}
	if !testkafka.Real() && !strings.Contains(string(out), "not stopped cleanly") {
		t.Errorf("after a SIGKILL, the embedded stack does not warn of the unclean stop:\n%s", out)
	}
	checkReport(t, readReport(t, report))
}

// TestUpInterruptedWithExitWhenDone: with --exit-when-done the run is a job
// that did not finish: SIGTERM still shuts down cleanly, but the exit status
// is 1, and the report says it was interrupted and what was outstanding.
func TestUpInterruptedWithExitWhenDone(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	p := launchUp(t, bin, upArgs(filepath.Join(dir, "data"), "--replay", oneDay, "--rate", "40", "--exit-when-done", "--report", report)...)
	p.waitProcessed(t, 10)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, p.log())
	}
	for _, re := range []string{`replay interrupted \(terminated signal received\) after [0-9]+ of 136 sales`, `shutting down`} {
		if !regexp.MustCompile(re).MatchString(p.log()) {
			t.Errorf("stderr lacks %s:\n%s", re, p.log())
		}
	}
	r := readReport(t, report)
	if r.Status != "interrupted" || !strings.Contains(r.Reason, "interrupted") || r.Outstanding == nil || r.Outstanding.SalesNotSent == 0 {
		t.Fatalf("report: status %q, reason %q, outstanding %+v", r.Status, r.Reason, r.Outstanding)
	}
	// SalesNotSent includes requests that were in flight without an answer
	// at the signal; checkout may have accepted those (at most
	// --replay-concurrency, upReplayConcurrency, of them), so they can count
	// on both sides.
	if r.InvoicesRead != 143 || r.OrdersAccepted == 0 || r.Outstanding.SalesNotSent+r.OrdersAccepted > 136+upReplayConcurrency {
		t.Errorf("report counts: %+v", r)
	}
	checkConsistent(t, r)
}

// TestUpReportOnTimeout: when --timeout passes before every order is
// processed, the report is written anyway, with what was measured and what
// was outstanding, and the exit status is 1.
func TestUpReportOnTimeout(t *testing.T) {
	freshCluster(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	// 1ns: the wait gives up at its first look, before the last orders
	// accepted went through every service.
	cmd := upCommand(bin, upArgs(filepath.Join(dir, "data"), "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "1ns")...)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d (%v), want 1:\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "--timeout 1ns passed") {
		t.Errorf("output does not say the timeout passed:\n%s", out)
	}
	r := readReport(t, report)
	if r.Status != "timed_out" || !strings.Contains(r.Reason, "--timeout 1ns") || r.Outstanding == nil {
		t.Fatalf("report: status %q, reason %q, outstanding %+v", r.Status, r.Reason, r.Outstanding)
	}
	o := r.Outstanding
	if o.SalesNotSent != 0 || o.OrdersNotStored+o.PaymentsNotDecided+o.NotificationsMissing+o.ShipmentsNotSeen+o.OutboxPending == 0 || o.Summary == "" {
		t.Errorf("outstanding %+v: want something missing, every sale sent", o)
	}
	if r.InvoicesRead != 143 || r.OrdersAccepted == 0 || len(r.Invariants) < 5 || r.DLQRecords == nil {
		t.Errorf("report lacks what was measured: %+v", r)
	}
	checkConsistent(t, r)
}

// processed reads ordercast_consumer_records_processed_total for a group.
func processed(t *testing.T, base, group string) int {
	return int(metricSum(base, "ordercast_consumer_records_processed_total", `group="`+group+`"`))
}

// TestUpReplayGuestsAreNotRateLimited: the replay's guest orders carry no
// token, so checkout's per-client limit sees them as one client (the
// loopback address); `up --replay` without --rate-limit turns the limit off
// for its run, so 450 guest invoices (more than the default burst of 200)
// go through without a 429 or a retry. With --rate-limit given the limit
// applies: the same file meets 429s (what the replay of the whole data
// set met, 2,119 guest orders at 100/s).
func TestUpReplayGuestsAreNotRateLimited(t *testing.T) {
	if testkafka.Real() {
		t.Skip("the embedded stack is enough: the limit is checkout's")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	csv := filepath.Join(dir, "guests.csv")
	var b strings.Builder
	b.WriteString("InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n")
	const guests = 450
	for i := range guests {
		fmt.Fprintf(&b, "%d,85123A,WHITE HANGING HEART T-LIGHT HOLDER,1,2010-12-01 08:26:00,2.55,,United Kingdom\n", 900000+i)
	}
	if err := os.WriteFile(csv, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, extra ...string) Report {
		report := filepath.Join(dir, name+".json")
		args := append([]string{"--replay", csv, "--exit-when-done", "--report", report, "--timeout", "3m"}, extra...)
		out, err := upCommand(bin, upArgs(filepath.Join(dir, name), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ordercast up %v: %v\n%s", args, err, out)
		}
		return readReport(t, report)
	}
	r := run("default")
	if r.ReplayAccepted != guests || r.ReplayRetries != 0 || len(r.ReplayAttemptErrors) != 0 {
		t.Fatalf("without --rate-limit: %d of %d accepted, %d retries, attempt errors %v; want all at the first attempt",
			r.ReplayAccepted, guests, r.ReplayRetries, r.ReplayAttemptErrors)
	}
	r = run("limited", "--rate-limit", "100")
	if r.ReplayAccepted != guests || r.ReplayAttemptErrors["http 429 rate_limited"] == 0 {
		t.Fatalf("with --rate-limit 100: %d of %d accepted, attempt errors %v; want every one accepted after some 429s",
			r.ReplayAccepted, guests, r.ReplayAttemptErrors)
	}
}

// TestUpReportWhenReplayFileUnreadable: a --replay file that cannot be read
// (missing, or not an Online Retail CSV) fails before anything starts, and
// with --exit-when-done still writes a failed report that says why, as
// every other failure of the run does.
func TestUpReportWhenReplayFileUnreadable(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	notCSV := filepath.Join(dir, "notes.csv")
	if err := os.WriteFile(notCSV, []byte("a,b,c\n1,2,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "nope.csv"), "want an Online Retail CSV file"},
		{"not Online Retail", notCSV, "InvoiceNo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			report := filepath.Join(dir, c.name+".json")
			out, err := upCommand(bin, upArgs(filepath.Join(dir, "data"), "--replay", c.file, "--exit-when-done", "--report", report)...).CombinedOutput()
			if err == nil {
				t.Fatalf("up exited 0 with --replay %s:\n%s", c.file, out)
			}
			r := readReport(t, report)
			if r.Status != StatusFailed || !strings.Contains(r.Reason, c.file) || !strings.Contains(r.Reason, c.want) {
				t.Fatalf("report status %q reason %q, want failed naming %s and %q (output: %s)", r.Status, r.Reason, c.file, c.want, out)
			}
		})
	}
}

// TestUpReportsUncleanPreviousStop: a data directory whose RUNNING marker
// was left by a process that did not stop cleanly is reported as such, in
// the log and the report (previousStopUnclean, reason); the next run, after
// that one stopped cleanly, is not.
func TestUpReportsUncleanPreviousStop(t *testing.T) {
	if testkafka.Real() {
		t.Skip("the marker is the embedded stack's")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// What a killed `up` leaves: the marker it writes at start.
	if err := os.WriteFile(filepath.Join(data, "RUNNING"), []byte("pid 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.json")
	for i, unclean := range []bool{true, false} {
		cmd := upCommand(bin, upArgs(data, "--replay", oneDay, "--exit-when-done", "--report", report, "--timeout", "1ns")...)
		out, _ := cmd.CombinedOutput()
		r := readReport(t, report)
		logged := strings.Contains(string(out), "did not stop cleanly")
		if r.PreviousStopUnclean != unclean || strings.Contains(r.Reason, "did not stop cleanly") != unclean || logged != unclean {
			t.Errorf("run %d: previousStopUnclean %v, reason %q, logged %v; want %v\n%s", i+1, r.PreviousStopUnclean, r.Reason, logged, unclean, out)
		}
		if _, err := os.Stat(filepath.Join(data, "RUNNING")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("run %d stopped cleanly but left its marker: %v", i+1, err)
		}
	}
}
