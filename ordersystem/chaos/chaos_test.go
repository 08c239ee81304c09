package chaos_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/chaos"
)

// logWriter sends each line to t.Log.
type logWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}

// TestChaosShort is the crash harness's short run: the services as separate
// processes (two per consumer group, two checkouts) on the embedded broker,
// the one-day data set plus synthetic orders, 40 s of every fault (SIGKILL,
// SIGTERM, SIGSTOP past the session timeout, scaling 1 -> 4 -> 1, broker
// restarts, crashes between effect and offset commit, inside fulfillment's
// transaction and between the relay's Kafka commit and its marking), then
// the drain and every invariant. The long soak is `ordercast chaos`
// (docs/crash-testing.md).
func TestChaosShort(t *testing.T) {
	testkafka.SkipIfReal(t, "the harness runs and restarts its own embedded broker (ordercast devstack); it runs in make test")
	if testing.Short() {
		t.Skip("crash harness: builds the binary and runs a dozen processes for about two minutes")
	}
	bin := filepath.Join(t.TempDir(), "ordercast")
	build := exec.Command("go", "build", "-o", bin, "./ordercast")
	build.Dir = filepath.Join("..", "..", "cmd") // the module github.com/ordercast/ordercast/cmd
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// On any failure, the harness's own included, the run's history, logs
	// and report are copied out of the temporary directory before it goes.
	defer func() {
		if !t.Failed() {
			return
		}
		keep := filepath.Join(os.TempDir(), "ordercast-chaos-failed")
		_ = os.RemoveAll(keep)
		if err := exec.Command("cp", "-r", dir, keep).Run(); err == nil {
			t.Logf("the run's history, logs and report are kept in %s", keep)
		}
	}()
	rep, err := chaos.Run(ctx, chaos.Config{
		Binary:       bin,
		DataDir:      dir,
		Duration:     40 * time.Second,
		Seed:         7,
		Workload:     "../../data/online-retail/online_retail_2010-12-01.csv",
		SeedData:     "../../data/online-retail/online_retail.csv.gz",
		Rate:         12,
		FaultEvery:   3 * time.Second,
		DrainTimeout: 150 * time.Second,
		CheckEvery:   10 * time.Second,
		Out:          &logWriter{t: t},
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, inv := range rep.Invariants {
		if !inv.OK {
			t.Errorf("invariant %s violated: %s", inv.Name, inv.Detail)
		}
	}
	// Proof that faults were injected and redeliveries happened.
	injected := 0
	for _, n := range rep.Injected {
		injected += n
	}
	dups := 0
	for _, n := range rep.InboxDuplicates {
		dups += n
	}
	hits := 0
	for _, n := range rep.CrashPointHits {
		hits += n
	}
	if injected < 5 || hits == 0 || dups == 0 {
		t.Errorf("too few faults to prove anything: %d injected (%v), %d crash points hit (%v), %d inbox duplicates",
			injected, rep.Injected, hits, rep.CrashPointHits, dups)
	}
	if a := rep.OrdersByKind["synthetic"].Accepted + rep.OrdersByKind["real"].Accepted; a < 200 {
		t.Errorf("only %d orders accepted", a)
	}
}
