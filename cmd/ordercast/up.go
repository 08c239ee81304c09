package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/audit"
	"github.com/ordercast/ordercast/devstack"
	"github.com/ordercast/ordercast/replay"
	"github.com/ordercast/ordercast/system"
)

type upFlags struct {
	common
	dataDir      string
	brokerAddr   string
	registryAddr string
	replayFile   string
	rate         float64
	replayConc   int
	exitWhenDone bool
	report       string
	timeout      time.Duration
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

SIGINT/SIGTERM: stop taking requests, drain in-flight records, commit, leave the groups, close the
broker cleanly and exit 0.`,
		Example: `  ordercast up
  ordercast up --replay data/online-retail/online_retail.csv.gz --exit-when-done --report report.json
  ordercast up --instances payments=3,orders=2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), &f) },
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", ".ordercast", "directory of the embedded broker's log, the registry's schemas and the SQLite database")
	fl.StringVar(&f.brokerAddr, "broker-addr", "127.0.0.1:9092", "listen address of the embedded broker")
	fl.StringVar(&f.registryAddr, "registry-addr", "127.0.0.1:8081", "listen address of the embedded schema registry")
	fl.StringVar(&f.replayFile, "replay", "", "replay this Online Retail CSV (plain or .gz) into checkout once the system is up")
	fl.Float64Var(&f.rate, "rate", 0, "replay rate limit in orders per second (0: unlimited)")
	fl.IntVar(&f.replayConc, "replay-concurrency", 16, "replay requests in flight")
	fl.BoolVar(&f.exitWhenDone, "exit-when-done", false, "with --replay: wait until every accepted order went through every service, write --report and exit")
	fl.StringVar(&f.report, "report", "", "with --exit-when-done: write the JSON report to this file (- for stdout)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "with --exit-when-done: give up (exit 1, saying what is missing) after this long")
	return cmd
}

// Report is the JSON written by `up --exit-when-done --report`.
type Report struct {
	InvoicesRead       int                        `json:"invoicesRead"`
	OrdersAccepted     int                        `json:"ordersAccepted"`
	RejectedByReason   map[string]int             `json:"rejectedByReason"`
	NotOrdersByReason  map[string]int             `json:"notOrdersByReason"`
	ReplayFailed       int                        `json:"replayFailed"`
	OrdersStored       int                        `json:"ordersStored"`
	PaymentsDebited    int                        `json:"paymentsDebited"`
	PaymentsByCard     int                        `json:"paymentsByCard"`
	PaymentsRefused    int                        `json:"paymentsRefused"`
	NotificationsSent  int                        `json:"notificationsSent"`
	ShipmentsRequested int                        `json:"shipmentsRequested"`
	DLQRecords         map[string]int             `json:"dlqRecords"`
	ElapsedSeconds     float64                    `json:"elapsedSeconds"`
	Invariants         map[string]audit.Invariant `json:"invariants"`
}

func runUp(parent context.Context, f *upFlags) error {
	start := time.Now()
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.exitWhenDone && f.replayFile == "" {
		return fmt.Errorf("--exit-when-done needs --replay FILE")
	}
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
	var stack *devstack.Stack
	if len(cfg.Brokers) == 0 || cfg.RegistryURL == "" {
		embedded := devstack.Config{DataDir: f.dataDir, BrokerAddr: f.brokerAddr, RegistryAddr: f.registryAddr, Logger: cfg.Logger}
		if stack, err = devstack.Start(embedded); err != nil {
			return err
		}
		defer stack.Close()
		if len(cfg.Brokers) == 0 {
			cfg.Brokers = stack.Brokers
		}
		if cfg.RegistryURL == "" {
			cfg.RegistryURL = stack.RegistryURL
		}
	}
	if cfg.DSN == "" {
		if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
			return fmt.Errorf("--data-dir %s: %w", f.dataDir, err)
		}
		cfg.DSN = "sqlite:" + filepath.Join(f.dataDir, "ordercast.db")
	}
	sys, err := system.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if stack != nil {
		if err := stack.SaveRegistry(ctx); err != nil {
			cfg.Logger.Warn("saving the registry failed", "error", err)
		}
	}
	fmt.Fprintf(os.Stderr, "ordercast up: checkout on http://%s (POST /orders, GET /orders/{id}), metrics on /metrics; brokers %v, registry %s, db %s\n",
		sys.HTTPAddr(), cfg.Brokers, cfg.RegistryURL, cfg.DSN)

	var runErr error
	if f.replayFile != "" {
		runErr = replayAndReport(ctx, f, sys, start)
	} else {
		<-ctx.Done()
	}
	fmt.Fprintln(os.Stderr, "ordercast up: shutting down: draining, committing, leaving the groups")
	if err := sys.Stop(context.Background()); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func replayAndReport(ctx context.Context, f *upFlags, sys *system.System, start time.Time) error {
	rc, err := replay.Open(f.replayFile)
	if err != nil {
		return fmt.Errorf("--replay %s: %w", f.replayFile, err)
	}
	invoices, err := replay.ReadInvoices(rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("--replay %s: %w", f.replayFile, err)
	}
	sum, err := replay.Run(ctx, invoices, replay.Options{
		BaseURL:     "http://" + sys.HTTPAddr(),
		Rate:        f.rate,
		Concurrency: f.replayConc,
		Progress:    os.Stderr,
	})
	fmt.Fprintln(os.Stderr, sum.String())
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted: a clean shutdown, the next run resumes
		}
		return fmt.Errorf("replay: %w", err)
	}
	if !f.exitWhenDone {
		<-ctx.Done()
		return nil
	}
	deadline := time.Now().Add(f.timeout)
	var prog audit.Progress
	for {
		if prog, err = audit.ReadProgress(ctx, sys.DB); err != nil {
			return err
		}
		if prog.Done() || (prog.Accepted == 0 && sum.OrdersAccepted == 0) {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return &exitError{code: 1, msg: fmt.Sprintf("--timeout %v passed before every order was processed: %s", f.timeout, prog.Missing())}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	res, err := audit.Check(ctx, sys.DB, sys.Producer, sys.Serde)
	if err != nil {
		return err
	}
	rep := Report{
		InvoicesRead:       sum.InvoicesRead,
		OrdersAccepted:     prog.Accepted,
		RejectedByReason:   sum.Rejected,
		NotOrdersByReason:  sum.NotOrders,
		ReplayFailed:       sum.Failed,
		OrdersStored:       prog.Stored,
		PaymentsDebited:    prog.Debited,
		PaymentsByCard:     prog.PaidByCard,
		PaymentsRefused:    prog.Refused,
		NotificationsSent:  prog.Notifications,
		ShipmentsRequested: res.ShipmentRecords,
		DLQRecords:         res.DLQRecords,
		ElapsedSeconds:     time.Since(start).Seconds(),
		Invariants:         res.Invariants,
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	switch f.report {
	case "":
	case "-":
		fmt.Println(string(b))
	default:
		if err := os.WriteFile(f.report, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--report %s: %w", f.report, err)
		}
	}
	fmt.Fprintf(os.Stderr, "ordercast up: done in %.1fs: %d orders accepted, %d stored, %d debited, %d by card, %d refused, %d notifications, %d shipments\n",
		rep.ElapsedSeconds, rep.OrdersAccepted, rep.OrdersStored, rep.PaymentsDebited, rep.PaymentsByCard, rep.PaymentsRefused, rep.NotificationsSent, rep.ShipmentsRequested)
	if !res.OK() || sum.Failed > 0 {
		for name, inv := range res.Invariants {
			if !inv.OK {
				fmt.Fprintf(os.Stderr, "invariant %s violated: %s\n", name, inv.Detail)
			}
		}
		if sum.Failed > 0 {
			return &exitError{code: 1, msg: fmt.Sprintf("%d invoices could not be sent to checkout", sum.Failed)}
		}
		return &exitError{code: 1, msg: "invariants violated (see the report)"}
	}
	return nil
}
