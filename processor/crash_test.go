package processor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Crash scenarios (docs/scenarios.md S04, S06) need a real process to kill. The
// test binary re-executes itself with OC_CHILD set (see TestMain); the child
// runs a processor against the parent's embedded broker and appends its
// history to a file, one write per event, so that the history survives a
// SIGKILL.

const childEnv = "OC_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "consumer":
		os.Exit(consumerChild())
	case "broker":
		os.Exit(brokerChild())
	case "queue":
		os.Exit(queueChild())
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, os.Getenv(childEnv))
		os.Exit(2)
	}
}

// consumerChild runs one processor until SIGTERM/SIGINT (exit 0 after a
// clean shutdown) or until it SIGKILLs itself after OC_KILL_AFTER handled
// records.
func consumerChild() int {
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	atoi := func(k string, def int) int {
		n, err := strconv.Atoi(env(k, strconv.Itoa(def)))
		if err != nil {
			panic(err)
		}
		return n
	}
	dur := func(k string, def time.Duration) time.Duration {
		d, err := time.ParseDuration(env(k, def.String()))
		if err != nil {
			panic(err)
		}
		return d
	}
	f, err := os.OpenFile(env("OC_HISTORY", ""), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	h := &recorder{file: f}
	member := env("OC_MEMBER", "child")
	ordering, err := ParseOrdering(env("OC_ORDERING", "partition"))
	if err != nil {
		panic(err)
	}
	killAfter := int64(atoi("OC_KILL_AFTER", 0))
	killAt := int64(atoi("OC_KILL_AT", 0)) // SIGKILL at the start of this handler call, before its effect
	delivery, err := ParseDeliverySemantics(env("OC_DELIVERY", "at-least-once"))
	if err != nil {
		panic(err)
	}
	var calls atomic.Int64
	sleep := dur("OC_HANDLER_SLEEP", time.Millisecond)
	var handled atomic.Int64
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Println("READY") // SIGTERM is handled from here on
	p, err := New(Brokers(strings.Split(env("OC_BROKERS", ""), ",")...), Group(env("OC_GROUP", "g")), Topics(env("OC_TOPIC", "in")),
		WithOrdering(ordering), Concurrency(atoi("OC_CONCURRENCY", 8)), MaxInFlight(atoi("OC_MAX_IN_FLIGHT", 1000), 64<<20),
		CommitInterval(dur("OC_COMMIT_INTERVAL", time.Second)), DrainTimeout(4*time.Second),
		SessionTimeout(2*time.Second), RebalanceTimeout(5*time.Second), h.hooks(member),
		Delivery(delivery),
		WithHandler(func(ctx context.Context, r *kgo.Record) error {
			if n := calls.Add(1); n == killAt {
				h.add(event{Member: member, Kind: evCrashIn, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			if err := sleepOrCancel(ctx, sleep); err != nil {
				return err
			}
			h.applied(member, r)
			if n := handled.Add(1); n == killAfter {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return nil
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Run:", err)
		return 1
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	out   syncBuffer    // stdout and stderr
	ready chan struct{} // closed when the child printed READY
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), ready: make(chan struct{})}
	// The race detector sleeps a second before exiting by default.
	c.cmd.Env = append(append(os.Environ(), childEnv+"="+role, "GORACE=atexit_sleep_ms=0"), env...)
	c.cmd.Stderr = &c.out
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "READY" {
				close(c.ready)
				continue
			}
			fmt.Fprintln(&c.out, sc.Text())
		}
	}()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// wait waits for the child to exit (up to d) and returns its wait status.
func (c *child) wait(t *testing.T, d time.Duration) syscall.WaitStatus {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = c.cmd.Process.Kill()
		<-done
		t.Fatalf("child did not exit within %v; output:\n%s", d, c.out.String())
	}
	return c.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// contiguousEnds returns, per partition of topic, the end of the contiguous
// run of completed offsets from the start of the log.
func contiguousEnds(ev []event, logOffs map[tp][]int64) map[tp]int64 {
	done := map[tp]map[int64]bool{}
	for _, e := range ev {
		if e.Kind == evCompleted {
			if done[e.tp()] == nil {
				done[e.tp()] = map[int64]bool{}
			}
			done[e.tp()][e.Offset] = true
		}
	}
	out := map[tp]int64{}
	for k, offs := range logOffs {
		out[k] = 0
		for _, o := range offs {
			if !done[k][o] {
				break
			}
			out[k] = o + 1
		}
	}
	return out
}

// S04: 1,000 records on 2 partitions, unordered with 500 records in flight
// (a batch of 500 polled), commits every 5ms; the child process SIGKILLs
// itself right after handling its 250th record. After the crash, the
// committed offsets are not beyond the contiguous completed run of the
// crashed run's history (nothing after the last completed contiguous offset
// was committed); after a restart every record was handled; records handled
// twice are only those the crash left uncommitted.
func TestS04_CrashMidBatch(t *testing.T) {
	parallel(t)
	if testing.Short() {
		t.Skip("starts child processes")
	}
	addrs := testCluster(t, map[string]int32{"in": 2})
	const n = 1000
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Key: []byte(strconv.Itoa(i % 37)), Value: val(i)})
	}
	produce(t, addrs, recs...)
	hist := filepath.Join(t.TempDir(), "history.jsonl")
	env := []string{"OC_BROKERS=" + strings.Join(addrs, ","), "OC_HISTORY=" + hist, "OC_ORDERING=unordered",
		"OC_MAX_IN_FLIGHT=500", "OC_CONCURRENCY=8", "OC_COMMIT_INTERVAL=5ms", "OC_HANDLER_SLEEP=2ms"}

	run1 := startChild(t, "consumer", append(env, "OC_MEMBER=run1", "OC_KILL_AFTER=250")...)
	if ws := run1.wait(t, 60*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run 1 should have died of SIGKILL, got %v; output:\n%s", ws, run1.out.String())
	}
	logOffs := logOffsetsOf(t, addrs, "in")
	afterCrash := committed(t, addrs, "g", "in")
	ev1 := readHistory(t, hist)
	applied1 := 0
	for _, e := range ev1 {
		if e.Kind == evApplied {
			applied1++
		}
	}
	// The child SIGKILLs itself right after its 250th record; with
	// Concurrency 8 in unordered mode, up to 7 other handlers may record
	// theirs before the signal lands.
	if applied1 < 250 || applied1 > 257 {
		t.Fatalf("run 1 applied %d records before the kill, want 250 to 257 (Concurrency 8)", applied1)
	}
	ends1 := contiguousEnds(ev1, logOffs)
	for p, c := range afterCrash {
		if c > ends1[tp{"in", p}] {
			t.Fatalf("in[%d] committed %d after the crash, beyond the contiguous completed run %d", p, c, ends1[tp{"in", p}])
		}
	}
	checkHistory(t, ev1, logOffs, false)

	run2 := startChild(t, "consumer", append(env, "OC_MEMBER=run2")...)
	waitFor(t, 60*time.Second, "restart committed everything", func() bool {
		return committedEquals(t, addrs, "g", map[tp]int64{{"in", 0}: n / 2, {"in", 1}: n / 2})
	})
	_ = run2.cmd.Process.Signal(syscall.SIGTERM)
	if ws := run2.wait(t, 30*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("run 2 exited with %v; output:\n%s", ws, run2.out.String())
	}
	ev := readHistory(t, hist)
	rep := checkHistory(t, ev, logOffs, true)
	// Duplicates: only records at or after the committed offset at the
	// crash.
	for k, m := range rep.completions {
		for o, c := range m {
			if c > 1 && o < afterCrash[k.partition] {
				t.Fatalf("%s@%d handled %d times though committed before the crash (committed %d)", k, o, c, afterCrash[k.partition])
			}
		}
	}
	// The crash happened mid-batch: at least the record whose handler
	// killed the process had its effect applied and its offset not
	// committed, so the restart applied it again (at-least-once). Records
	// completed twice (rep.duplicates) need a completed record past the
	// commit at the kill, which is likely but not certain.
	applied := map[string]int{}
	for _, e := range ev {
		if e.Kind == evApplied {
			applied[fmt.Sprintf("%s@%d", e.tp(), e.Offset)]++
		}
	}
	again := 0
	for _, c := range applied {
		if c > 1 {
			again++
		}
	}
	if again == 0 {
		t.Fatalf("no record was applied twice: the crash left nothing in flight, the scenario did not happen")
	}
	t.Logf("committed after the crash %v (contiguous completed %v); applied again after restart: %d records, completed twice: %d", afterCrash, ends1, again, len(rep.duplicates))
}

// S06: steady input on 3 partitions, partition order, a commit interval (1s)
// longer than most rounds, so what a round completed is committed by its
// shutdown. 20 rounds: start the child process, SIGTERM it at a random point
// once it handles signals (sometimes before it even joined), restart. Every round exits 0, leaves the
// group (the group is empty right after the exit, without waiting for the
// session timeout), and has committed exactly what was completed (the
// committed offsets equal the contiguous completed run of the history).
// After the last round, input stops and a final round drains it: every record
// was handled exactly once (a graceful shutdown hands nothing on
// uncommitted) and the lag is 0.
func TestS06_GracefulShutdownRounds(t *testing.T) {
	parallel(t)
	if testing.Short() {
		t.Skip("starts child processes")
	}
	addrs := testCluster(t, map[string]int32{"in": 3})
	hist := filepath.Join(t.TempDir(), "history.jsonl")
	env := []string{"OC_BROKERS=" + strings.Join(addrs, ","), "OC_HISTORY=" + hist, "OC_ORDERING=partition",
		"OC_COMMIT_INTERVAL=1s", "OC_HANDLER_SLEEP=500us"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// Steady input: a record every 4 milliseconds, round-robin.
	var produced atomic.Int64
	stopProducing := make(chan struct{})
	var prodWG sync.WaitGroup
	var stopOnce sync.Once
	stopInput := func() {
		stopOnce.Do(func() { close(stopProducing) })
		prodWG.Wait()
	}
	defer stopInput()
	prodWG.Add(1)
	go func() {
		defer prodWG.Done()
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-tick.C:
			}
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Partition: int32(i % 3), Value: val(i)}).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			produced.Add(1)
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 6))
	t.Logf("seed %d", seed)
	round := func(i int, wait func(c *child)) {
		t.Helper()
		name := fmt.Sprintf("round%02d", i)
		c := startChild(t, "consumer", append(env, "OC_MEMBER="+name)...)
		select {
		case <-c.ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no READY within 30s; output:\n%s", name, c.out.String())
		}
		wait(c)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if ws := c.wait(t, 30*time.Second); ws.ExitStatus() != 0 || ws.Signaled() {
			t.Fatalf("round %d: exit %v; output:\n%s", i, ws, c.out.String())
		}
		groups, err := adm.DescribeGroups(context.Background(), "g")
		if err != nil {
			t.Fatal(err)
		}
		if g := groups["g"]; len(g.Members) != 0 {
			t.Fatalf("round %d: the group still has %d members after the exit: the child did not leave", i, len(g.Members))
		}
		ev := readHistory(t, hist)
		logOffs := logOffsetsOf(t, addrs, "in")
		ends := contiguousEnds(ev, logOffs)
		cur := committed(t, addrs, "g", "in")
		for k, e := range ends {
			if cur[k.partition] != e {
				t.Fatalf("round %d: %s committed %d, but the completed run ends at %d: shutdown did not commit what was completed", i, k, cur[k.partition], e)
			}
		}
	}
	for i := range 20 {
		d := time.Duration(rng.IntN(400)) * time.Millisecond
		round(i, func(*child) { time.Sleep(d) }) // the random point of the SIGTERM: a duration, not a synchronisation
	}
	stopInput()
	total := produced.Load()
	round(20, func(*child) {
		waitFor(t, 60*time.Second, "final round drained the input", func() bool {
			sum := int64(0)
			for _, o := range committed(t, addrs, "g", "in") {
				sum += o
			}
			return sum == total
		})
	})
	ev := readHistory(t, hist)
	rep := checkHistory(t, ev, logOffsetsOf(t, addrs, "in"), true)
	if len(rep.duplicates) > 0 {
		t.Fatalf("records handled twice across graceful restarts: %v", rep.duplicates)
	}
	if !committedEquals(t, addrs, "g", endOffsets(t, addrs, "in")) {
		t.Fatal("lag is not 0 after the final round")
	}
	t.Logf("%d records over 21 rounds, each handled once", total)
}
