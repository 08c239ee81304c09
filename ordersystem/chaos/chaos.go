package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/outbox"
)

// markerTopic is the payments outbox relay's progress marker topic.
var markerTopic = outbox.DefaultMarkerTopic(system.ServicePayments)

// TopicCounts are a topic's records as each isolation level sees them.
type TopicCounts struct {
	Committed     int `json:"committed"`     // data records a read_committed reader sees
	Uncommitted   int `json:"uncommitted"`   // data records in the log (read_uncommitted), aborted ones included
	AbortMarkers  int `json:"abortMarkers"`  // ABORT control records
	CommitMarkers int `json:"commitMarkers"` // COMMIT control records
}

// Report is what a run did, saw and checked; report.json in the data
// directory.
type Report struct {
	Seed           int64                  `json:"seed"`
	FaultSeconds   int                    `json:"faultSeconds"`
	Instances      int                    `json:"instances"`
	Checkouts      int                    `json:"checkouts"`
	Faults         string                 `json:"faults"`
	OrdersByKind   map[string]OrderCounts `json:"ordersByKind"`
	ClientRetries  int                    `json:"clientRetries"`
	Injected       map[string]int         `json:"injected"`       // process faults by kind
	CrashPointHits map[string]int         `json:"crashPointHits"` // self-SIGKILLs by point, from the process logs
	ProcessStarts  int                    `json:"processStarts"`
	// Redeliveries caused, as the services counted them (lower bounds:
	// a process's counts since its last scrape die with it).
	InboxDuplicates    map[string]int         `json:"inboxDuplicates"` // by group
	TxnAborted         int                    `json:"fulfillmentTxnAborted"`
	TxnCommitted       int                    `json:"fulfillmentTxnCommitted"`
	RelayAborted       int                    `json:"relayTxnAborted"`
	RelayCommitted     int                    `json:"relayTxnCommitted"`
	RelayRecoveredRows int                    `json:"relayRecoveredRows"`
	RelayFenced        int                    `json:"relayFenced"`
	Topics             map[string]TopicCounts `json:"topics"`
	DLQRecords         map[string]int         `json:"dlqRecords"`
	Progress           audit.Progress         `json:"progress"`
	OffsetSamples      int                    `json:"offsetSamples"` // checks of committed offsets during the fault phase
	DrainSeconds       float64                `json:"drainSeconds"`
	// StaleMembers lists, when the drain made no progress, the members of
	// groups where the broker kept more members than processes ran (dead
	// members never expired by their session timeout); the harness then
	// restarted the broker. A defect of the embedded broker: reported, and
	// the drain must still reach lag 0.
	StaleMembers []string `json:"staleMembers,omitempty"`
	// Backend is "embedded" (kfake, SQLite) or "kafka+postgres" (with
	// "+proxies" when the clients go through the fault proxies).
	Backend string `json:"backend"`
	// Recoveries: per fault end and group, the time until the group had
	// consumed what was in its topics then; RecoveryByFault summarises them.
	Recoveries      []Recovery                 `json:"recoveries"`
	RecoveryByFault map[string]RecoverySummary `json:"recoveryByFault"`
	BadRecords      []badRecord                `json:"badRecords"`
	Lag             map[string]int             `json:"lagRecords"`
	Invariants      []Invariant                `json:"invariants"`
	OK              bool                       `json:"ok"`
}

// OrderCounts are the client's answers for one kind of order.
type OrderCounts struct {
	Accepted   int `json:"accepted"`
	Rejected   int `json:"rejected"`
	Unanswered int `json:"unanswered"`
}

// Run runs the harness: it starts `ordercast devstack` and the services as
// separate processes, sends orders through checkout while injecting faults
// for cfg.Duration, stops the faults, waits until every order went through
// every service and every lag is 0, checks the invariants, stops every
// process and returns the report (also written to DataDir/report.json).
// An error means the harness itself could not run (a process that does not
// start, a broker it cannot reach after the faults); violations are in the
// report (Report.OK false), with the history in DataDir/history.jsonl and
// each process's log in DataDir/logs/.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	out := cfg.Out
	logDir := filepath.Join(cfg.DataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	hist, err := newHistory(filepath.Join(cfg.DataDir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	defer hist.close()
	rep := &Report{Seed: cfg.Seed, FaultSeconds: int(cfg.Duration.Seconds()), Instances: cfg.Instances, Checkouts: cfg.Checkouts,
		Faults: strings.Join(cfg.Faults, ","), Topics: map[string]TopicCounts{}, OrdersByKind: map[string]OrderCounts{}}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0xc4a05))

	superCtx, stopSupervising := context.WithCancel(context.Background())
	c := &cluster{cfg: &cfg, hist: hist, logDir: logDir, ctx: superCtx}
	defer func() {
		stopSupervising()
		c.shutdown()
	}()
	ds, err := c.addProc("devstack", 1)
	if err != nil {
		return nil, err
	}
	if c.regPort, err = freePort(); err != nil {
		return nil, err
	}
	c.brokers = fmt.Sprintf("%s:%d", procHost, ds.port)
	c.regURL = fmt.Sprintf("http://%s:%d", procHost, c.regPort)
	c.dsn = "sqlite:" + filepath.Join(cfg.DataDir, "ordercast.db")
	direct := []string{c.brokers} // the harness's own clients
	rep.Backend = "embedded"
	var rc *realCluster
	if cfg.Cluster != nil {
		if rc, err = openRealCluster(ctx, cfg.Cluster); err != nil {
			return nil, err
		}
		defer rc.close()
		rc.crashesPG = cfg.enabled(FaultPGRestart)
		fmt.Fprintf(out, "chaos: emptying the cluster %s and the database\n", strings.Join(rc.direct, ","))
		if err := rc.reset(ctx); err != nil {
			return nil, err
		}
		c.rc = rc
		c.brokers, c.dsn, direct = rc.serviceBrokers(), cfg.Cluster.DSN, rc.direct
		rep.Backend = "kafka+postgres"
		if rc.proxy != nil {
			rep.Backend += "+proxies"
		}
	}
	fmt.Fprintf(out, "chaos: seed %d; %v of faults (%s); %d processes per service, %d checkouts; data in %s\n",
		cfg.Seed, cfg.Duration, rep.Faults, cfg.Instances, cfg.Checkouts, cfg.DataDir)
	if err := c.start(ds); err != nil {
		return nil, err
	}

	// The first checkout migrates and seeds the database alone.
	first, _ := c.addProc("checkout", 1)
	if err := c.start(first); err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, c, first, 2*time.Minute); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.faultsArmed = true // disarmed by SIGUSR1 at the end of the fault phase
	c.mu.Unlock()
	for i := 2; i <= cfg.Checkouts; i++ {
		if _, err := c.addProc("checkout", i); err != nil {
			return nil, err
		}
	}
	for _, s := range Services {
		for i := 1; i <= cfg.Instances; i++ {
			if _, err := c.addProc(s, i); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range c.list("") {
		if err := c.start(p); err != nil {
			return nil, err
		}
	}
	for _, p := range c.list("") {
		if err := waitHealthy(ctx, c, p, 2*time.Minute); err != nil {
			return nil, err
		}
	}
	setupArmed := map[*proc]int{} // processes whose crash points only SIGUSR1 disarms, by incarnation
	for _, p := range c.list("") {
		if p.service != "checkout" && cfg.faultEnv(time.Time{}) != "" {
			_, incarn, _, _ := p.snapshot()
			setupArmed[p] = incarn
		}
	}

	// The harness's own clients.
	cl, err := kgo.NewClient(kgo.SeedBrokers(direct...), kgo.RetryTimeout(time.Minute))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	db, err := store.Open(ctx, c.dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	srCl, err := sr.NewClient(sr.URLs(c.regURL))
	if err != nil {
		return nil, err
	}
	serde, err := schema.New(ctx, srCl)
	if err != nil {
		return nil, err
	}
	chk := &checker{cl: cl, adm: kadm.NewClient(cl), db: db, serde: serde}

	real, err := realOrders(cfg.Workload)
	if err != nil {
		return nil, fmt.Errorf("chaos: workload %s: %w", cfg.Workload, err)
	}
	var gen *generator
	if cfg.Rate > 0 {
		if gen, err = newGenerator(ctx, db, cfg.Seed, int(cfg.Rate*cfg.Duration.Seconds())); err != nil {
			return nil, err
		}
	}
	var checkouts []string
	for _, p := range c.list("checkout") {
		checkouts = append(checkouts, fmt.Sprintf("http://%s:%d", procHost, p.port))
	}

	// The fault phase.
	phaseStart := time.Now()
	c.mu.Lock()
	c.faultsUntil = phaseStart.Add(cfg.Duration)
	c.mu.Unlock()
	hist.add(event{Ev: "phase", Detail: "faults start"})
	scr := newScraper()
	scrapeCtx, stopScraping := context.WithCancel(ctx)
	defer stopScraping()
	go scr.loop(scrapeCtx, c, time.Second)
	phaseCtx, endPhase := context.WithDeadline(ctx, phaseStart.Add(cfg.Duration))
	defer endPhase()
	drainCtx, cancelDrain := context.WithDeadline(ctx, phaseStart.Add(cfg.Duration+cfg.DrainTimeout))
	defer cancelDrain()
	wl, err := newWorkload(&cfg, hist, checkouts)
	if err != nil {
		return nil, err
	}
	wl.startWorkers(drainCtx, 16)
	go wl.feed(phaseCtx, real, cfg.Duration/2, gen, cfg.Rate)
	rec := &recoveries{adm: kadm.NewClient(cl)}
	go rec.loop(scrapeCtx)
	in := &injector{cfg: &cfg, c: c, hist: hist, scr: scr, rng: rng, rc: rc, db: db, adminCl: cl, rec: rec}
	badDone := make(chan []badRecord, 1)
	go func() { badDone <- produceBad(phaseCtx, cl, cfg.Seed, cfg.BadRecords, cfg.Duration/2, hist) }()
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		in.run(phaseCtx)
	}()
	var sampleBad []Invariant
	if cfg.CheckEvery > 0 {
		t := time.NewTicker(cfg.CheckEvery)
	sampling:
		for {
			select {
			case <-phaseCtx.Done():
				break sampling
			case <-t.C:
				sctx, cancel := context.WithTimeout(phaseCtx, cfg.CheckEvery)
				inv, _, err := chk.offsets(sctx)
				cancel()
				if err != nil {
					continue // the broker may be restarting
				}
				rep.OffsetSamples++
				hist.add(event{Ev: "check", Detail: fmt.Sprintf("%s ok=%v %s", inv.Name, inv.OK, inv.Detail)})
				if !inv.OK {
					sampleBad = append(sampleBad, inv)
				}
			}
		}
		t.Stop()
	}
	<-phaseCtx.Done()
	<-injected
	rep.BadRecords = <-badDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// Stop the faults: disarm the crash points, bring everything back.
	c.mu.Lock()
	c.faultsArmed = false
	c.mu.Unlock()
	for p, incarn := range setupArmed {
		if _, cur, running, _ := p.snapshot(); running && cur == incarn {
			c.signal(p, syscall.SIGCONT)
			c.signal(p, syscall.SIGUSR1)
		}
	}
	fmt.Fprintln(out, "chaos: faults stopped; restoring every process and draining")
	hist.add(event{Ev: "phase", Detail: "faults stop"})
	in.finish()
	if rc != nil {
		if err := rc.restoreNodes(ctx); err != nil {
			fmt.Fprintf(out, "chaos: restoring the Kafka nodes: %v\n", err)
		}
	}
	drainStart := time.Now()

	// Drain: every order answered, processed by every service, lag 0.
	wl.wg.Wait()
	var lagInv Invariant
	lastNote := time.Now()
	lastLag, lagSince := -1, time.Now()
	lastProg, progSince := audit.Progress{}, time.Now()
	for {
		prog, err := audit.ReadProgress(drainCtx, db)
		if err == nil {
			rep.Progress = prog
		}
		if time.Since(lastNote) >= 5*time.Second {
			lastNote = time.Now()
			if _, lag, err := chk.offsets(drainCtx); err == nil {
				rep.Lag = lag
			}
			fmt.Fprintf(out, "chaos: draining for %.0fs: %s; lag (records) %v\n", time.Since(drainStart).Seconds(), prog.Missing(), rep.Lag)
			total := 0
			for _, n := range rep.Lag {
				total += n
			}
			if prog != lastProg {
				lastProg, progSince = prog, time.Now()
			}
			if total == 0 && chk.undecided == 0 && time.Since(progSince) >= stuckAfter {
				// Every group consumed everything and no transaction is
				// open: what is missing will not come. Stop waiting.
				fmt.Fprintf(out, "chaos: every lag is 0 and no transaction is open, but the progress has not moved for %v: giving up the drain\n", stuckAfter)
				break
			}
			if total != lastLag {
				lastLag, lagSince = total, time.Now()
			} else if total > 0 && rc == nil && time.Since(lagSince) >= stuckAfter && len(rep.StaleMembers) < 2 {
				// (the embedded broker's defect; a real cluster is not restarted for it)
				if stale := staleMembers(drainCtx, chk.adm, c, rep.Lag); len(stale) > 0 {
					rep.StaleMembers = append(rep.StaleMembers, stale...)
					fmt.Fprintf(out, "chaos: no progress for %v and the broker keeps more members than processes: %s; restarting the broker, whose restore drops members past their session timeout\n",
						stuckAfter, strings.Join(stale, "; "))
					hist.add(event{Ev: "remedy", Detail: "broker restart for stale members: " + strings.Join(stale, "; ")})
					in.restartBroker()
					lagSince = time.Now()
				}
			}
		}
		if err == nil && prog.Done() {
			inv, lag, err := chk.offsets(drainCtx)
			if err == nil {
				rep.Lag = lag
				lagInv = inv
				total := 0
				for _, n := range lag {
					total += n
				}
				if total == 0 {
					break
				}
			}
		}
		if drainCtx.Err() != nil {
			break
		}
		ctxtime.Sleep(drainCtx, 500*time.Millisecond)
	}
	rep.DrainSeconds = time.Since(drainStart).Seconds()
	stopScraping() // the recovery sampler too
	rep.Recoveries = rec.settle(time.Now())
	rep.RecoveryByFault = summarizeRecoveries(rep.Recoveries)
	drained := drainCtx.Err() == nil && rep.Progress.Done()
	hist.add(event{Ev: "phase", Detail: fmt.Sprintf("drained=%v after %.1fs", drained, rep.DrainSeconds)})
	fmt.Fprintf(out, "chaos: drained=%v in %.1fs\n", drained, rep.DrainSeconds)

	// Last scrape of everything, then the checks, with the processes idle.
	for _, p := range c.list("") {
		scr.scrape(ctx, p)
	}
	stopScraping()
	checkCtx, cancelCheck := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelCheck()
	if err := rep.check(checkCtx, chk, wl, rec, lagInv, drained, sampleBad); err != nil {
		return nil, err
	}
	rep.fillCounts(wl, scr.totals(), hist)
	stopSupervising()
	c.shutdown()
	rep.CrashPointHits = crashPointHits(logDir)
	rep.ProcessStarts = hist.starts
	b, _ := json.MarshalIndent(rep, "", "  ")
	_ = os.WriteFile(filepath.Join(cfg.DataDir, "report.json"), append(b, '\n'), 0o644)
	rep.print(out)
	return rep, nil
}

// check runs every check and sets rep.Invariants and rep.OK.
func (rep *Report) check(ctx context.Context, chk *checker, wl *workload, rec *recoveries, lagInv Invariant, drained bool, sampleBad []Invariant) error {
	add := func(inv Invariant) { rep.Invariants = append(rep.Invariants, inv) }
	progress := Invariant{Name: "drained_every_order_processed_lag_0", OK: drained,
		Detail: fmt.Sprintf("%s; lag (records) %v", rep.Progress.Missing(), rep.Lag)}
	if !drained {
		progress.Violations = 1
	}
	add(progress)
	auditInv, dlq, err := chk.auditInvariants(ctx)
	if err != nil {
		return fmt.Errorf("chaos: audit: %w", err)
	}
	rep.DLQRecords = dlq
	for _, inv := range auditInv {
		add(inv)
	}
	hinv, err := chk.history(ctx, wl.snapshot())
	if err != nil {
		return fmt.Errorf("chaos: history check: %w", err)
	}
	add(hinv)
	ainv, err := chk.acknowledged(ctx, wl.snapshot(), rec.downAt)
	if err != nil {
		return fmt.Errorf("chaos: acknowledged orders check: %w", err)
	}
	add(ainv)
	dinv, err := chk.dlqExact(ctx, rep.BadRecords)
	if err != nil {
		return fmt.Errorf("chaos: DLQ check: %w", err)
	}
	add(dinv)
	cinv, err := chk.charges(ctx)
	if err != nil {
		return fmt.Errorf("chaos: charges check: %w", err)
	}
	add(cinv)
	ninv, err := chk.notificationsMatchPayments(ctx)
	if err != nil {
		return fmt.Errorf("chaos: notifications check: %w", err)
	}
	add(ninv)
	einv, err := chk.exactlyOnceTopics(ctx, rep)
	if err != nil {
		return fmt.Errorf("chaos: topic check: %w", err)
	}
	for _, inv := range einv {
		add(inv)
	}
	if lagInv.Name == "" { // not drained: check the offsets anyway
		if lagInv, _, err = chk.offsets(ctx); err != nil {
			return fmt.Errorf("chaos: offsets check: %w", err)
		}
	}
	for _, s := range sampleBad {
		lagInv.OK = false
		lagInv.Violations += s.Violations
		lagInv.Detail += "; during the faults: " + s.Detail
	}
	lagInv.Detail += fmt.Sprintf(" (checked at the end and %d times during the faults)", rep.OffsetSamples)
	add(lagInv)
	rep.OK = true
	for _, inv := range rep.Invariants {
		rep.OK = rep.OK && inv.OK
	}
	return nil
}

// fillCounts sets the workload and redelivery counts.
func (rep *Report) fillCounts(wl *workload, totals map[string]float64, hist *history) {
	byKind, _, retries := wl.summary()
	for k, c := range byKind {
		rep.OrdersByKind[k] = OrderCounts{Accepted: c[0], Rejected: c[1], Unanswered: c[2]}
	}
	rep.ClientRetries = retries
	rep.Injected = hist.faultCounts()
	rep.InboxDuplicates = map[string]int{}
	for _, g := range order.Groups {
		if g != order.GroupFulfillment {
			rep.InboxDuplicates[g] = sum(totals, "ordercast_inbox_duplicates_total", `group="`+g+`"`)
		}
	}
	rep.TxnAborted = sum(totals, "ordercast_txn_transactions_total", `result="aborted"`)
	rep.TxnCommitted = sum(totals, "ordercast_txn_transactions_total", `result="committed"`)
	rep.RelayAborted = sum(totals, "ordercast_outbox_transactions_total", `result="aborted"`)
	rep.RelayCommitted = sum(totals, "ordercast_outbox_transactions_total", `result="committed"`)
	rep.RelayRecoveredRows = sum(totals, "ordercast_outbox_rows_recovered_total")
	rep.RelayFenced = sum(totals, "ordercast_outbox_fenced_total")
}

// crashPointHits counts the "ordercast fault: <point>" lines of the logs.
func crashPointHits(dir string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "ordercast fault: "); ok {
				point, _, _ := strings.Cut(rest, " ")
				if point != "disarmed" {
					out[point]++
				}
			}
		}
		fh.Close()
	}
	return out
}

// print writes the summary.
func (rep *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\nordercast chaos: seed %d, %ds of faults, %d processes per service, %d checkouts, on %s\n", rep.Seed, rep.FaultSeconds, rep.Instances, rep.Checkouts, rep.Backend)
	kinds := sortedKeys(rep.OrdersByKind)
	var parts []string
	for _, k := range kinds {
		c := rep.OrdersByKind[k]
		parts = append(parts, fmt.Sprintf("%s %d accepted / %d rejected / %d unanswered", k, c.Accepted, c.Rejected, c.Unanswered))
	}
	fmt.Fprintf(w, "  orders:          %s; %d client retries\n", strings.Join(parts, "; "), rep.ClientRetries)
	fmt.Fprintf(w, "  faults injected: %s; %d process starts\n", fmtCounts(rep.Injected, append(append([]string{}, ProcessFaults...), "cont")), rep.ProcessStarts)
	fmt.Fprintf(w, "  crash points:    %s (processes that SIGKILLed themselves there; SIGTERM for term-in-txn)\n", fmtCounts(rep.CrashPointHits, sortedKeys(CrashPoints)))
	fmt.Fprintf(w, "  redeliveries:    inbox duplicates %s; fulfillment transactions %d aborted / %d committed; relay transactions %d aborted / %d committed, %d rows recovered from the marker, fenced %d times\n",
		fmtCounts(rep.InboxDuplicates, nil), rep.TxnAborted, rep.TxnCommitted, rep.RelayAborted, rep.RelayCommitted, rep.RelayRecoveredRows, rep.RelayFenced)
	for _, t := range sortedKeys(rep.Topics) {
		tc := rep.Topics[t]
		fmt.Fprintf(w, "  %-26s read_committed %d, in the log %d, abort markers %d, commit markers %d\n", t+":", tc.Committed, tc.Uncommitted, tc.AbortMarkers, tc.CommitMarkers)
	}
	fmt.Fprintf(w, "  drained in %.1fs; lag %v; DLQ %v (%d records made bad)\n", rep.DrainSeconds, rep.Lag, rep.DLQRecords, len(rep.BadRecords))
	fmt.Fprintf(w, "  recovery (fault end to the slowest group caught up): %s\n", fmtRecoveries(rep.RecoveryByFault))
	if len(rep.StaleMembers) > 0 {
		fmt.Fprintf(w, "  NOTE the embedded broker kept dead group members past their session timeout; the harness restarted it: %s\n", strings.Join(rep.StaleMembers, "; "))
	}
	for _, inv := range rep.Invariants {
		mark := "ok  "
		if !inv.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, inv.Name, inv.Detail)
	}
	if rep.OK {
		fmt.Fprintln(w, "ordercast chaos: every invariant holds")
	} else {
		fmt.Fprintln(w, "ordercast chaos: INVARIANTS VIOLATED")
	}
}

func fmtCounts(m map[string]int, first []string) string {
	keys := first
	for k := range m {
		if !contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if first == nil {
		sort.Strings(keys)
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// shutdown stops every process: services with SIGTERM first, then the
// broker. Safe to call more than once.
func (c *cluster) shutdown() {
	done := make(chan struct{})
	procs := c.list("")
	for _, p := range procs {
		go func() {
			c.stopSlot(p, syscall.SIGTERM, 30*time.Second)
			done <- struct{}{}
		}()
	}
	for range procs {
		<-done
	}
	for _, p := range c.list("devstack") {
		c.stopSlot(p, syscall.SIGTERM, 30*time.Second)
	}
	c.restarts.Wait()
}

// stuckAfter is how long the drain may make no progress before the harness
// looks for stale group members.
const stuckAfter = 30 * time.Second

// staleMembers describes the groups with lag whose broker-side member count
// exceeds the processes running that service (each process is one member),
// listing every member as group/member (partitions) so the report shows
// which one no process runs.
func staleMembers(ctx context.Context, adm *kadm.Client, c *cluster, lag map[string]int) []string {
	var out []string
	for group, n := range lag {
		if n == 0 {
			continue
		}
		live := 0
		for _, p := range c.list(group) {
			if _, _, running, _ := p.snapshot(); running {
				live++
			}
		}
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			continue
		}
		d, ok := described[group]
		if !ok || d.Err != nil || len(d.Members) <= live {
			continue
		}
		for _, m := range d.Members {
			parts := ""
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					parts += fmt.Sprintf(" %s%v", t.Topic, t.Partitions)
				}
			}
			out = append(out, fmt.Sprintf("%s/%s (%d members, %d processes;%s)", group, m.MemberID, len(d.Members), live, parts))
		}
	}
	return out
}
