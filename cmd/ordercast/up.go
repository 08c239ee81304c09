package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/devstack"
	"github.com/ordercast/ordercast/ordersystem/replay"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/system"
)

type upFlags struct {
	common
	dataDir      string
	brokerAddr   string
	registryAddr string
	allowRemote  bool // --allow-remote-embedded
	replayFile   string
	rate         float64
	replayConc   int
	exitWhenDone bool
	report       string
	timeout      time.Duration
	maxRowErrors float64
	ordersBefore int // accepted orders in the database before the replay (Report.OrdersBeforeRun)
	// unclean: the embedded stack found that the previous one on
	// --data-dir did not stop cleanly (Report.PreviousStopUnclean).
	unclean bool
	// replayUnlimited: --replay without --rate-limit, so checkout runs
	// without its per-client limit (set by check).
	replayUnlimited bool
}

func newUp() *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole order system in one process (embedded broker, registry and SQLite by default)",
		Long: `Runs checkout and the orders, payments, notifications and fulfillment services, each its own
consumer group with --instances members, on an embedded Kafka-protocol broker, an embedded schema
registry and SQLite, all persisted in --data-dir, so a restart resumes where it stopped.
With --brokers, --registry or --db it uses those instead of the embedded ones.

With --replay it sends the file's sale invoices to checkout once the system is up. With
--exit-when-done too it is a job: it waits until every accepted order went through every
service, recomputes the invariants, writes --report (its "status": passed, failed, timed_out
or interrupted) and exits 0 only if it passed. If --timeout passes first, or on SIGINT/SIGTERM,
it still writes the report, with what was measured and what was outstanding, and exits 1.

SIGINT/SIGTERM (without --exit-when-done): stop taking requests, drain in-flight records,
commit, leave the groups, close the broker cleanly and exit 0. A replay in progress says how
far it got; running up again on the same --data-dir resumes it.`,
		Example: `  ordercast up
  ordercast up --replay data/online-retail/online_retail.csv.gz --exit-when-done --report report.json
  ordercast up --instances payments=3,orders=2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd.Flags()); err != nil {
				return err
			}
			return runUp(cmd.Context(), &f)
		},
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", ".ordercast", "directory of the embedded broker's log, the registry's schemas and the SQLite database")
	fl.StringVar(&f.brokerAddr, "broker-addr", "127.0.0.1:9092", "listen address (host:port) of the embedded broker")
	fl.StringVar(&f.registryAddr, "registry-addr", "127.0.0.1:8081", "listen address (host:port) of the embedded schema registry")
	fl.BoolVar(&f.allowRemote, "allow-remote-embedded", false, allowRemoteHelp)
	fl.StringVar(&f.replayFile, "replay", "", "replay this Online Retail CSV (plain or .gz) into checkout once the system is up (checkout's per-client --rate-limit is off for the run unless given: the replay's guest orders are all one client)")
	fl.Float64Var(&f.rate, "rate", 0, "with --replay: rate limit in orders per second (0: unlimited)")
	fl.IntVar(&f.replayConc, "replay-concurrency", upReplayConcurrency, "with --replay: requests in flight")
	fl.BoolVar(&f.exitWhenDone, "exit-when-done", false, "with --replay: wait until every accepted order went through every service, write --report and exit (0 only if every invariant held)")
	fl.StringVar(&f.report, "report", "", "with --exit-when-done: write the JSON report to this file (- for stdout), whatever the outcome; its \"status\" is passed, failed, timed_out or interrupted")
	fl.Float64Var(&f.maxRowErrors, "max-row-errors", replay.DefaultMaxRowErrorRate, "with --replay: fraction of the file's data rows that may be malformed (0.01: 1%; 0: none) before up fails without starting; a file with no sale invoice fails too (with --exit-when-done the report says failed and why)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "with --exit-when-done: how long to wait, once the replay is sent, for every order to be processed; then the report says timed_out and what was outstanding, and the exit status is 1")
	return cmd
}

// check refuses flags that mean nothing: without the flag they go with, or
// with a value out of range.
func (f *upFlags) check(fs *pflag.FlagSet) error {
	for _, d := range []struct {
		flag, needs, why string
		given, ok        bool
	}{
		{"exit-when-done", "replay FILE", "it exits once the replayed orders are processed", f.exitWhenDone, f.replayFile != ""},
		{"rate", "replay FILE", "it limits the replay", fs.Changed("rate"), f.replayFile != ""},
		{"replay-concurrency", "replay FILE", "it is the replay's requests in flight", fs.Changed("replay-concurrency"), f.replayFile != ""},
		{"report", "exit-when-done", "the report is written when up exits, once the replayed orders are processed (or the run ends early)", fs.Changed("report"), f.exitWhenDone},
		{"timeout", "exit-when-done", "it bounds the wait for the replayed orders to be processed", fs.Changed("timeout"), f.exitWhenDone},
	} {
		if d.given && !d.ok {
			return fmt.Errorf("--%s needs --%s: %s", d.flag, d.needs, d.why)
		}
	}
	// The replay's guest orders carry no token, so they are all one client
	// (the loopback address) to checkout's per-client limit: 2,119 of them
	// in the whole data set held every replay to 100/s past the burst
	// (19 s at least). The replay is paced by --rate and
	// --replay-concurrency; an explicit --rate-limit still applies.
	f.replayUnlimited = f.replayFile != "" && !fs.Changed("rate-limit")
	if f.replayFile != "" && f.auth.mode == authJWT {
		return fmt.Errorf("--replay with --auth jwt: the replay signs its customers' tokens with the development key; use --auth dev (the default) and replay, or replay from outside with tokens of your identity provider")
	}
	switch {
	case !(f.rate >= 0) || math.IsInf(f.rate, 0):
		return fmt.Errorf("--rate %v: want a number of orders per second >= 0, such as 50 (0: unlimited)", f.rate)
	case f.replayConc < 1:
		return fmt.Errorf("--replay-concurrency %d: want >= 1", f.replayConc)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration such as 10m", f.timeout)
	case fs.Changed("report") && f.report == "":
		return fmt.Errorf("--report \"\": want a file name, or - for stdout")
	case fs.Changed("max-row-errors") && f.replayFile == "":
		return fmt.Errorf("--max-row-errors needs --replay FILE: it bounds the malformed rows of the replayed file")
	case !(f.maxRowErrors >= 0 && f.maxRowErrors <= 1):
		return fmt.Errorf("--max-row-errors %v: want a fraction of the data rows from 0 to 1, such as 0.01 (1%%; 0: any malformed row fails the run)", f.maxRowErrors)
	}
	if f.report != "" {
		if err := checkWritable("report", f.report); err != nil {
			return err
		}
	}
	return nil
}

// Report is the JSON written by `up --exit-when-done --report`.
//
// Every database count (ordersAccepted to shipmentsRequested) is from one
// consistent reading (audit.ReadProgress: one read transaction) and counts
// only the orders accepted in it, so none exceeds ordersAccepted; they
// cover the whole database of --data-dir (or --db), earlier runs included
// (OrdersBeforeRun says how many of them there were). The replay counts
// (invoicesRead, rejectedByReason, notOrdersByReason, replayFailed,
// replayAccepted) are this run's replay. dlqRecords and shipmentRecordsRead
// are read from the topics (read_committed) after the database reading.
type Report struct {
	// Status is the verdict: StatusPassed, StatusFailed, StatusTimedOut or
	// StatusInterrupted.
	Status string `json:"status"`
	// Reason says why, when Status is not StatusPassed, and that the
	// previous stop was unclean (PreviousStopUnclean).
	Reason string `json:"reason,omitempty"`
	// CountsCover says what the database counts cover, for people.
	CountsCover string `json:"countsCover"`
	// Outstanding is what was not done when the run ended before every
	// accepted order was processed (timed out or interrupted); nil
	// otherwise.
	Outstanding       *Outstanding   `json:"outstanding,omitempty"`
	InvoicesRead      int            `json:"invoicesRead"`      // invoices in the replayed file
	ReplayAccepted    int            `json:"replayAccepted"`    // sales this run's replay got a 2xx for (a re-sent invoice gets its first answer)
	RejectedByReason  map[string]int `json:"rejectedByReason"`  // sales checkout refused in this run, by code
	NotOrdersByReason map[string]int `json:"notOrdersByReason"` // invoices not sent, by kind
	ReplayFailed      int            `json:"replayFailed"`      // sales given up after every attempt
	// ReplayRetries is the replay's attempts beyond the first, over all
	// sales, and ReplayAttemptErrors the attempts without a usable answer
	// by cause ("http 429 rate_limited", "http 503 database_unavailable",
	// a network error, a timeout): why a replay was slower than its
	// --rate and --replay-concurrency allow.
	ReplayRetries       int            `json:"replayRetries"`
	ReplayAttemptErrors map[string]int `json:"replayAttemptErrors"`
	// OrdersBeforeRun is the number of accepted orders in the database
	// before this run's replay started: 0 on a fresh --data-dir.
	OrdersBeforeRun    int `json:"ordersBeforeRun"`
	OrdersAccepted     int `json:"ordersAccepted"`     // checkout_requests published, in the database
	OrdersStored       int `json:"ordersStored"`       // of those, stored by the orders service
	PaymentsDecided    int `json:"paymentsDecided"`    // of those, with a payment decided (paid or refused)
	PaymentsDebited    int `json:"paymentsDebited"`    // paid from the wallet
	PaymentsByCard     int `json:"paymentsByCard"`     // paid by card
	PaymentsRefused    int `json:"paymentsRefused"`    // refused
	NotificationsSent  int `json:"notificationsSent"`  // notifications of those orders (two per order once done)
	ShipmentsRequested int `json:"shipmentsRequested"` // paid orders whose shipmentRequested the orders service recorded
	// ShipmentRecordsRead is the number of shipmentRequested records a
	// read_committed reader of the topic sees, when the invariants were
	// checked (passed, failed, timed out); nil otherwise.
	ShipmentRecordsRead *int `json:"shipmentRecordsRead,omitempty"`
	// DLQRecords counts the records of each group's DLQ as `ordercast dlq
	// list` does (read_committed, from the purge position on: a purged
	// record is not counted); never null: an empty map when they could not be read (Reason says
	// why).
	DLQRecords map[string]int `json:"dlqRecords"`
	// PreviousStopUnclean is true when the embedded stack found that the
	// previous process on this --data-dir did not stop cleanly (killed, out
	// of memory, power loss: its RUNNING marker was still there,
	// devstack.Stack.Unclean). The embedded broker's transactions open at
	// that moment may then be partially committed, so exactly-once results
	// across that crash are not assured; Reason says so too. Always false
	// with --brokers (a real cluster recovers its transactions).
	PreviousStopUnclean bool    `json:"previousStopUnclean"`
	ElapsedSeconds      float64 `json:"elapsedSeconds"`
	// PhaseSeconds splits ElapsedSeconds of a run that got to its audit:
	// "start" (the process's start until the replay begins: topics,
	// groups, seeding), "replay" (sending every invoice and the answers),
	// "drain" (until every accepted order went through every service) and
	// "audit" (the invariants' check); omitted otherwise.
	PhaseSeconds map[string]float64         `json:"phaseSeconds,omitempty"`
	Invariants   map[string]audit.Invariant `json:"invariants"`
}

// Values of Report.Status.
const (
	StatusPassed      = "passed"      // every order processed, every invariant holds, every invoice sent
	StatusFailed      = "failed"      // an invariant violated, invoices not sent, or the replay failed
	StatusTimedOut    = "timed_out"   // --timeout passed before every accepted order was processed
	StatusInterrupted = "interrupted" // SIGINT/SIGTERM before the end
)

// Outstanding is what a run that ended early had not done, from the
// database (audit.Progress) and the replay's summary.
type Outstanding struct {
	SalesNotSent         int    `json:"salesNotSent"`         // sale invoices the replay had not sent, or sent without getting an answer
	OrdersNotStored      int    `json:"ordersNotStored"`      // accepted orders not in the orders table
	PaymentsNotDecided   int    `json:"paymentsNotDecided"`   // accepted orders without a payment (paid or refused)
	NotificationsMissing int    `json:"notificationsMissing"` // of one per accepted order and one per payment
	ShipmentsNotSeen     int    `json:"shipmentsNotSeen"`     // paid orders whose shipment request the orders service has not seen
	OutboxPending        int    `json:"outboxPending"`        // paymentProcessed events not yet published
	Summary              string `json:"summary"`              // the same, for people
}

func runUp(parent context.Context, f *upFlags) error {
	start := time.Now()
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if err := checkListenAddr("broker-addr", f.brokerAddr); err != nil {
		return err
	}
	if err := checkListenAddr("registry-addr", f.registryAddr); err != nil {
		return err
	}
	embedded := len(cfg.Kafka.Brokers) == 0 || cfg.Schema.RegistryURL == ""
	listens := []listenFlag{{"http", f.httpAddr}, {"admin-http", f.adminAddr}}
	if embedded {
		listens = append(listens, listenFlag{"broker-addr", f.brokerAddr}, listenFlag{"registry-addr", f.registryAddr})
	}
	if err := checkDistinctAddrs(listens...); err != nil {
		return err
	}
	if len(cfg.Kafka.Brokers) == 0 && f.rf > 1 {
		return fmt.Errorf("--replication-factor %d: the embedded broker is one broker, so want 1 (more needs a cluster: --brokers)", f.rf)
	}
	if embedded {
		// Before anything is created: the embedded broker and registry
		// take any client without credentials.
		for _, a := range []struct{ flag, addr string }{{"broker-addr", f.brokerAddr}, {"registry-addr", f.registryAddr}} {
			if err := devstack.CheckAddr(a.flag, a.addr, f.allowRemote); err != nil {
				return err
			}
		}
	}
	var invoices []*replay.Invoice
	if f.replayFile != "" {
		if invoices, err = readInvoices(f.replayFile); err != nil {
			// A file that cannot be read (missing, not an Online Retail
			// CSV) fails here too; with --exit-when-done the report says so.
			err = fmt.Errorf("--replay %s: %w", f.replayFile, err)
			if errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("%w (want an Online Retail CSV file, plain or .gz)", err)
			}
			if f.exitWhenDone {
				rep := newReport(replay.Summary{}, audit.Progress{}, 0, start)
				rep.Status, rep.Reason = StatusFailed, err.Error()
				if werr := writeReport(f.report, rep); werr != nil {
					return werr
				}
			}
			return err
		}
		// A file that gives nothing to send fails before anything is
		// started or created; with --exit-when-done the report says so.
		if tally := replay.Tally(invoices); tally.CheckInput(f.maxRowErrors) != nil {
			msg := inputErrorMsg(f.replayFile, tally.CheckInput(f.maxRowErrors))
			fmt.Fprint(os.Stderr, tally.String())
			if f.exitWhenDone {
				rep := newReport(tally, audit.Progress{}, 0, start)
				rep.Status, rep.Reason = StatusFailed, msg
				if err := writeReport(f.report, rep); err != nil {
					return err
				}
			}
			return &exitError{code: 1, msg: "up: " + msg}
		}
	}
	// The data directory holds the embedded stack, the SQLite database or
	// the development key: made 0700, an existing one checked.
	if embedded || cfg.DB.DSN == "" || (f.auth.mode == authDev && f.auth.devKey == "") {
		if err := devstack.PrepareDataDir(f.dataDir, cfg.Logger); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
	}
	// Before anything is started: a wrong key file or JWKS URL stops up
	// here. The dev key is made in --data-dir (the first thing created).
	authLine, err := f.auth.apply(ctx, &cfg, f.dataDir)
	if err != nil {
		return err
	}
	if f.replayUnlimited {
		cfg.Checkout.RateLimit, cfg.Checkout.RateBurst = 0, 0
		cfg.Logger.Info("--replay without --rate-limit: checkout's per-client rate limit is off for this run (the replay's guest orders are all one client, its address); the replay is paced by --rate and --replay-concurrency")
	}
	var stack *devstack.Stack
	if embedded {
		if stack, err = devstack.Start(devstack.Config{DataDir: f.dataDir, BrokerAddr: f.brokerAddr, RegistryAddr: f.registryAddr,
			AllowRemote: f.allowRemote, Logger: cfg.Logger}); err != nil {
			return err
		}
		warnUnclean(stack, f.dataDir)
		if stack.Unclean && len(cfg.Kafka.Brokers) == 0 {
			// Only the embedded broker's transactions are in doubt: with
			// --brokers the stack serves the registry alone.
			f.unclean = true
			cfg.Logger.Warn("the previous process on this data directory did not stop cleanly (its RUNNING marker was left): transactions the embedded broker had open may be partially committed",
				"data_dir", f.dataDir)
		}
		defer stack.Close()
		if len(cfg.Kafka.Brokers) == 0 {
			cfg.Kafka.Brokers = stack.Brokers
		}
		if cfg.Schema.RegistryURL == "" {
			cfg.Schema.RegistryURL = stack.RegistryURL
		}
		if len(f.common.brokers) == 0 {
			// The embedded broker dies with this process: a fresh
			// transactional id per start (see
			// system.Config.Kafka.TransactionalIDSuffix).
			cfg.Kafka.TransactionalIDSuffix = fmt.Sprintf("-boot%d", time.Now().UnixNano())
		}
	}
	if cfg.DB.DSN == "" {
		cfg.DB.DSN = "sqlite:" + filepath.Join(f.dataDir, "ordercast.db")
	}
	flush, err := setupTracing(ctx, &cfg, f.otlpEndpoint, "ordercast")
	if err != nil {
		return err
	}
	defer flush()
	sys, err := startSystem(ctx, cfg)
	if err != nil {
		if ctx.Err() == nil {
			return err
		}
		msg := "interrupted while starting" + signalNote(ctx)
		if f.exitWhenDone {
			return &exitError{code: 1, msg: "up " + msg}
		}
		fmt.Fprintln(os.Stderr, "ordercast up: "+msg)
		return nil
	}
	if stack != nil {
		if err := stack.SaveRegistry(ctx); err != nil {
			cfg.Logger.Warn("saving the registry failed", "error", err)
		}
	}
	fmt.Fprintf(os.Stderr, "ordercast up: checkout on http://%s (POST /orders, GET /orders/{id}), admin on http://%s (/console, /metrics, /readyz, /debug/pprof); brokers %v, registry %s, db %s\n",
		sys.HTTPAddr(), sys.AdminAddr(), cfg.Kafka.Brokers, cfg.Schema.RegistryURL, system.RedactDSN(cfg.DB.DSN))
	fmt.Fprintf(os.Stderr, "ordercast up: checkout %s\n", authLine)

	if f.replayFile == "" {
		return waitAndStop(ctx, sys, "up")
	}
	// A service that stops with an error ends the replay as a signal
	// would (the report names it), and up then exits 1.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-sys.Failed():
			cancel(sys.Err())
		case <-rctx.Done():
		}
	}()
	runErr := replayAndReport(rctx, f, sys, invoices, start)
	fmt.Fprintln(os.Stderr, "ordercast up: shutting down: draining, committing, leaving the groups")
	if failure := sys.Err(); failure != nil {
		_ = sys.Stop(context.Background())
		return &exitError{code: 1, msg: "up: " + failure.Error()}
	}
	if err := sys.Stop(context.Background()); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// readInvoices reads an Online Retail file.
func readInvoices(path string) ([]*replay.Invoice, error) {
	rc, err := replay.Open(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return replay.ReadInvoices(rc)
}

// replayAndReport replays the invoices into checkout. Without
// --exit-when-done it then serves until ctx ends and returns nil, an
// interrupted replay included (SIGTERM is how up is stopped). With it, it
// waits until every accepted order is processed, writes the report and
// returns an *exitError unless the run passed.
func replayAndReport(ctx context.Context, f *upFlags, sys *system.System, invoices []*replay.Invoice, start time.Time) error {
	tReplay := time.Now()
	if before, err := audit.ReadProgress(ctx, sys.DB); err == nil {
		f.ordersBefore = before.Accepted
		if before.Accepted > 0 && f.exitWhenDone {
			fmt.Fprintf(os.Stderr, "ordercast up: the database already holds %d accepted orders (of earlier runs on this --data-dir or --db): the report counts them with this run's; a fresh --data-dir counts only this run\n", before.Accepted)
		}
	}
	var tokens func(string) (string, error)
	if f.auth.devKeyLoaded != nil {
		tokens = f.auth.devKeyLoaded.Tokens(authn.DevTokenTTL)
	}
	sum, err := replay.Run(ctx, invoices, replay.Options{
		Token:       tokens,
		BaseURL:     "http://" + sys.HTTPAddr(),
		Rate:        f.rate,
		Concurrency: f.replayConc,
		Progress:    os.Stderr,
	})
	fmt.Fprint(os.Stderr, sum.String())
	switch {
	case err != nil && ctx.Err() != nil:
		msg := "replay " + interrupted(ctx, sum)
		if !f.exitWhenDone {
			fmt.Fprintln(os.Stderr, "ordercast up: "+msg)
			return nil
		}
		return endEarly(f, sys, sum, start, StatusInterrupted, msg)
	case err != nil && f.exitWhenDone:
		return endEarly(f, sys, sum, start, StatusFailed, "replay: "+err.Error())
	case err != nil:
		return fmt.Errorf("replay: %w", err)
	case !f.exitWhenDone:
		<-ctx.Done()
		return nil
	}
	tDrain := time.Now()
	deadline := time.Now().Add(f.timeout)
	var prog audit.Progress
	lastNote := time.Now()
	for {
		t0 := time.Now()
		prog, err = audit.ReadProgress(ctx, sys.DB)
		took := time.Since(t0)
		if ctx.Err() != nil {
			return endEarly(f, sys, sum, start, StatusInterrupted, "interrupted"+signalNote(ctx)+" while waiting for every order to be processed")
		}
		if err != nil {
			return endEarly(f, sys, sum, start, StatusFailed, err.Error())
		}
		if prog.Done() || (prog.Accepted == 0 && sum.OrdersAccepted == 0) {
			break
		}
		if time.Now().After(deadline) {
			return endEarly(f, sys, sum, start, StatusTimedOut, fmt.Sprintf("--timeout %v passed before every order was processed", f.timeout))
		}
		if time.Since(lastNote) >= 5*time.Second {
			lastNote = time.Now()
			fmt.Fprintf(os.Stderr, "ordercast up: waiting for the services (%.0fs): %s\n", time.Since(tDrain).Seconds(), prog.Missing())
		}
		select {
		case <-ctx.Done():
		case <-time.After(audit.PollInterval(200*time.Millisecond, took)):
		}
	}
	tAudit := time.Now()
	res, err := audit.Check(ctx, sys.DB, sys.Producer, sys.Serde)
	if err != nil {
		if ctx.Err() != nil {
			return endEarly(f, sys, sum, start, StatusInterrupted, "interrupted"+signalNote(ctx)+" while checking the invariants")
		}
		return endEarly(f, sys, sum, start, StatusFailed, "audit: "+err.Error())
	}
	rep := newReport(sum, prog, f.ordersBefore, start)
	secs := func(a, b time.Time) float64 { return math.Round(b.Sub(a).Seconds()*10) / 10 }
	rep.PhaseSeconds = map[string]float64{"start": secs(start, tReplay), "replay": secs(tReplay, tDrain),
		"drain": secs(tDrain, tAudit), "audit": secs(tAudit, time.Now())}
	rep.addAudit(res)
	var why []string
	if bad := violated(res); len(bad) > 0 {
		for _, name := range bad {
			fmt.Fprintf(os.Stderr, "invariant %s violated: %s\n", name, res.Invariants[name].Detail)
		}
		why = append(why, "invariants violated: "+strings.Join(bad, ", "))
	}
	if sum.Failed > 0 {
		why = append(why, fmt.Sprintf("%d invoices could not be sent to checkout", sum.Failed))
	}
	rep.Status, rep.Reason = StatusPassed, strings.Join(why, "; ")
	if len(why) > 0 {
		rep.Status = StatusFailed
	}
	rep.Reason, rep.PreviousStopUnclean = withUnclean(f, rep.Reason), f.unclean
	if err := writeReport(f.report, rep); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ordercast up: %s in %.1fs (start %.1fs, replay %.1fs, drain %.1fs, audit %.1fs): %d orders accepted, %d stored, %d debited, %d by card, %d refused, %d notifications, %d shipments\n",
		rep.Status, rep.ElapsedSeconds, rep.PhaseSeconds["start"], rep.PhaseSeconds["replay"], rep.PhaseSeconds["drain"], rep.PhaseSeconds["audit"], rep.OrdersAccepted, rep.OrdersStored, rep.PaymentsDebited, rep.PaymentsByCard, rep.PaymentsRefused, rep.NotificationsSent, rep.ShipmentsRequested)
	if rep.Status != StatusPassed {
		return &exitError{code: 1, msg: rep.Reason + " (see the report)"}
	}
	return nil
}

// endEarly ends a --exit-when-done run that stopped before every accepted
// order was processed: it measures what it can within a minute (the
// progress from the database; after a timeout also the audit, whose
// processing invariants then fall short by what is outstanding), writes the
// report with status and reason, and returns the *exitError of exit status 1.
func endEarly(f *upFlags, sys *system.System, sum replay.Summary, start time.Time, status, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prog, err := audit.ReadProgress(ctx, sys.DB)
	rep := newReport(sum, prog, f.ordersBefore, start)
	rep.Status, rep.Reason = status, withUnclean(f, reason)
	rep.PreviousStopUnclean = f.unclean
	if err != nil {
		rep.Reason += "; progress not measured: " + err.Error()
	} else {
		rep.Outstanding = outstanding(sum, prog)
	}
	if status == StatusTimedOut {
		if res, err := audit.Check(ctx, sys.DB, sys.Producer, sys.Serde); err != nil {
			rep.Reason += "; invariants not checked: " + err.Error()
		} else {
			rep.addAudit(res)
		}
	} else if dlq, err := audit.CountDLQ(ctx, sys.Producer); err != nil {
		rep.Reason += "; DLQ records not counted: " + err.Error()
	} else {
		rep.DLQRecords = dlq
	}
	if err := writeReport(f.report, rep); err != nil {
		return err
	}
	msg := rep.Reason
	if rep.Outstanding != nil {
		msg += "; outstanding: " + rep.Outstanding.Summary
	}
	if f.report != "" && f.report != "-" {
		msg += " (report in " + f.report + ")"
	}
	return &exitError{code: 1, msg: msg}
}

// withUnclean appends to reason, when the previous stop on --data-dir was
// unclean (upFlags.unclean), a note saying so and what it means.
func withUnclean(f *upFlags, reason string) string {
	if !f.unclean {
		return reason
	}
	note := "the previous process on --data-dir " + f.dataDir + " did not stop cleanly: transactions the embedded broker had open then may be partially committed, so exactly-once results across that stop are not assured"
	if reason == "" {
		return note
	}
	return reason + "; " + note
}

// newReport fills the counts of a report from this run's replay summary and
// one database reading (prog); before is the number of orders accepted
// before the run (see Report.OrdersBeforeRun).
func newReport(sum replay.Summary, prog audit.Progress, before int, start time.Time) Report {
	cover := "the whole database, from one reading: this run's orders only (a fresh --data-dir)"
	if before > 0 {
		cover = fmt.Sprintf("the whole database, from one reading: %d orders accepted before this run, and this run's (a fresh --data-dir counts only this run)", before)
	}
	return Report{
		CountsCover:         cover,
		InvoicesRead:        sum.InvoicesRead,
		ReplayAccepted:      sum.OrdersAccepted,
		RejectedByReason:    sum.Rejected,
		NotOrdersByReason:   sum.NotOrders,
		ReplayFailed:        sum.Failed,
		ReplayRetries:       sum.Retries,
		ReplayAttemptErrors: nonNil(sum.AttemptErrors),
		OrdersBeforeRun:     before,
		OrdersAccepted:      prog.Accepted,
		OrdersStored:        prog.Stored,
		PaymentsDecided:     prog.Payments,
		PaymentsDebited:     prog.Debited,
		PaymentsByCard:      prog.PaidByCard,
		PaymentsRefused:     prog.Refused,
		NotificationsSent:   prog.Notifications,
		ShipmentsRequested:  prog.ShipmentsRecorded,
		DLQRecords:          map[string]int{},
		ElapsedSeconds:      time.Since(start).Seconds(),
	}
}

func (r *Report) addAudit(res *audit.Result) {
	n := res.ShipmentRecords
	r.ShipmentRecordsRead = &n
	r.DLQRecords = res.DLQRecords
	r.Invariants = res.Invariants
}

// violated returns the names of the violated invariants, sorted.
func violated(res *audit.Result) []string {
	var bad []string
	for name, inv := range res.Invariants {
		if !inv.OK {
			bad = append(bad, name)
		}
	}
	sort.Strings(bad)
	return bad
}

// outstanding is what is left to do, from the replay and the progress.
func outstanding(sum replay.Summary, p audit.Progress) *Outstanding {
	o := &Outstanding{
		SalesNotSent:         sum.Unfinished,
		OrdersNotStored:      max(p.Accepted-p.Stored, 0),
		PaymentsNotDecided:   max(p.Accepted-p.Payments, 0),
		NotificationsMissing: max(p.Accepted+p.Payments-p.Notifications, 0),
		ShipmentsNotSeen:     max(p.Paid-p.ShipmentsRecorded, 0),
		OutboxPending:        p.OutboxPending,
	}
	var parts []string
	for _, x := range []struct {
		n    int
		what string
	}{
		{o.SalesNotSent, "sales not sent (or sent without an answer)"},
		{o.OrdersNotStored, "orders not stored"},
		{o.PaymentsNotDecided, "payments not decided"},
		{o.NotificationsMissing, "notifications missing"},
		{o.ShipmentsNotSeen, "shipments not seen"},
		{o.OutboxPending, "paymentProcessed events not published"},
	} {
		if x.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing")
	}
	o.Summary = fmt.Sprintf("%s, of %d orders accepted", strings.Join(parts, ", "), p.Accepted)
	return o
}

// writeReport writes the report as indented JSON to path ("-": stdout; "":
// nowhere).
func writeReport(path string, rep Report) error {
	b, _ := json.MarshalIndent(rep, "", "  ")
	switch path {
	case "":
	case "-":
		fmt.Println(string(b))
	default:
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--report %s: %w", path, err)
		}
	}
	return nil
}

// signalNote is " (<signal> signal received)" when ctx was ended by a
// signal (signal.NotifyContext), and "" otherwise.
func signalNote(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && c.Error() != context.Canceled.Error() {
		return " (" + c.Error() + ")"
	}
	return ""
}

// upReplayConcurrency is up's default --replay-concurrency: as many requests
// in flight as checkout writes in one batch (checkout.DefaultMaxBatch, 64),
// so that one SQLite transaction claims (and one marks published) up to 64
// orders while the single writer is busy with the consumers' batches; with
// 16 in flight the embedded stack's replay waited for the writer four times
// as often per order (docs/benchmarks.md, "Embedded stack: the writer's path").
const upReplayConcurrency = 64

// nonNil returns m, or an empty map for nil (so the report says {}, not
// null, for a run stopped before its replay began).
func nonNil(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}
