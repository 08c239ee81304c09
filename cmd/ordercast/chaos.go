package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/chaos"
	"github.com/ordercast/ordercast/ordersystem/order"
)

func newChaos() *cobra.Command {
	var (
		cfg        chaos.Config
		faults     string
		crashRates string
		binary     string
		cluster    chaos.Cluster
		seeds      int
		table      string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Crash-test the system: services as separate processes, orders flowing, faults injected, invariants checked",
		Long: `Starts ` + "`ordercast devstack`" + ` and --instances processes of each consumer service (` + "`ordercast run SERVICE`" + `,
this same binary) plus --checkouts checkout processes, sends orders through checkout (the sale invoices of
--workload plus --rate synthetic orders per second), and for --duration injects faults at random (seeded
by --seed):

  kill    SIGKILL a random service process (restarted after a pause)
  term    SIGTERM a random service process (clean shutdown; restarted)
  stop    SIGSTOP a random process past the session timeout, then SIGCONT (a zombie)
  scale   one consumer group 1 -> 4 -> 1 processes, then back
  broker  restart the embedded broker and registry on the same data directory
  crash-after-effect        a consumer SIGKILLs itself after its inbox transaction, before the offset commit
  crash-after-txn-produce   fulfillment SIGKILLs itself after its output was acknowledged, before the commit
  crash-after-txn-offsets   fulfillment SIGKILLs itself after adding the offsets to its transaction (S13)
  crash-after-relay-commit  the outbox relay SIGKILLs itself after its Kafka commit, before marking the rows
  term-in-txn               fulfillment SIGTERMs itself right after a transform, its transaction open

With --kafka-script, --postgres-script and --db it runs on a real Kafka cluster (scripts/kafka.sh,
3 nodes: topics RF 3, min.insync.replicas 2) and PostgreSQL instead (the registry stays embedded), which
it empties first, and adds (broker is then not one of them):

  broker-kill    SIGKILL a Kafka node (every other time the active controller), start it 3-6 s later
  broker-pause   SIGSTOP a Kafka node for 15 s (past the broker session and request timeouts), SIGCONT
  pg-restart     crash and restart PostgreSQL (pg_ctl restart -m immediate)
  pg-terminate   pg_terminate_backend every service connection, under load
and with --proxy (a cluster created with ORDERCAST_KAFKA_PROXIED=1: each node advertises a fault
proxy of the harness) the network faults between the services and the brokers:
  net-latency    +200-800 ms per frame to one broker (or all) for 5-10 s
  net-reset      TCP RST every client connection to one broker (or all)
  net-hold       hold the next Produce/OffsetCommit/TxnOffsetCommit/EndTxn/AddOffsetsToTxn 15 s, past
                 the client's request timeout, then deliver it
  net-oneway     one broker's responses withheld for 20 s (its requests still arrive)

With --seeds N it is a soak: seeds --seed .. --seed+N-1 one after the other, each in DATA-DIR/seed-S,
with a Markdown table of the results in --table (rewritten after every seed).

Then it stops the faults, waits until every order went through every service and every lag is 0, and
checks: every accepted order stored exactly once, in orderCreated (nothing acknowledged lost), charged
at most once and shipped once; each DLQ holds exactly the records the harness made bad (--bad-records); each order charged at most once, and exactly once
when the credit sufficed (wallets replayed in commit order); one notification per (order, kind); exactly
one paymentProcessed per payment and one shipmentRequested per paid order for read_committed readers;
committed offsets never ahead of applied effects (also during the faults); lag 0. It prints the faults it
injected, the redeliveries they caused and, per fault kind, the time from a fault's end until every group
had consumed what was in its topics then, writes DATA-DIR/report.json, DATA-DIR/history.jsonl and one
log per process in DATA-DIR/logs/, and exits 1 on any violation.`,
		Example: `  ordercast chaos --duration 2m --seed 7 --data-dir /tmp/chaos
  ordercast chaos --duration 3m --seeds 3 --table soak.md --data-dir /tmp/soak --kafka-script scripts/kafka.sh \
    --postgres-script scripts/postgres.sh --db postgres://postgres@127.0.0.1:15432/postgres --proxy
  ordercast chaos --duration 30m --instances 3 --rate 40 --faults kill,stop,scale,broker,crash-after-effect --data-dir /tmp/soak`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Binary = binary
			if cfg.Binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--binary: cannot find this executable (%v); pass the ordercast binary's path", err)
				}
				cfg.Binary = exe
			}
			if err := checkChaosFlags(&cfg); err != nil {
				return err
			}
			cfg.Faults = splitList(faults)
			if crashRates != "" {
				cfg.CrashRates = map[string]float64{}
				for _, kv := range splitList(crashRates) {
					k, v, ok := strings.Cut(kv, "=")
					p, err := strconv.ParseFloat(v, 64)
					if !ok || err != nil || !(p >= 0 && p <= 1) {
						return fmt.Errorf("--crash-rates %q: %q is not point=probability (0..1)", crashRates, kv)
					}
					if _, known := chaos.CrashPoints[k]; !known {
						return fmt.Errorf("--crash-rates %q: unknown crash point %q; the points are %s", crashRates, k, strings.Join(slices.Sorted(maps.Keys(chaos.CrashPoints)), ", "))
					}
					cfg.CrashRates[k] = p
				}
			}
			if entries, err := os.ReadDir(cfg.DataDir); err == nil && len(entries) > 0 {
				return fmt.Errorf("--data-dir %s is not empty: the harness needs a fresh one (its checks count every order in it)", cfg.DataDir)
			}
			set := 0
			for _, v := range []string{cluster.KafkaScript, cluster.PostgresScript, cluster.DSN} {
				if v != "" {
					set++
				}
			}
			switch {
			case set == 3:
				cfg.Cluster = &cluster
			case set > 0:
				return fmt.Errorf("--kafka-script, --postgres-script and --db go together (a run on a real cluster and PostgreSQL)")
			case cluster.Proxied:
				return fmt.Errorf("--proxy needs a real cluster (--kafka-script, --postgres-script, --db)")
			}
			if seeds < 0 || (seeds > 1 && table == "") {
				return fmt.Errorf("--seeds %d: want 1 or more, and --table FILE with more than one", seeds)
			}
			cfg.Out = os.Stderr
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if seeds > 1 || table != "" {
				var list []int64
				for i := range max(seeds, 1) {
					list = append(list, cfg.Seed+int64(i))
				}
				results := chaos.Soak(ctx, cfg, list, table)
				fmt.Fprint(os.Stdout, chaos.SoakTable(results))
				for _, r := range results {
					if r.Err != nil || !r.Report.OK {
						return &exitError{code: 1, msg: "a seed failed or violated an invariant; see " + table + " and " + cfg.DataDir + "/seed-*/"}
					}
				}
				return nil
			}
			rep, err := chaos.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if !rep.OK {
				return &exitError{code: 1, msg: "invariants violated; see " + cfg.DataDir + "/report.json, history.jsonl and logs/"}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "fresh directory for the run's broker log, registry, SQLite, logs, history and report (required)")
	f.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long orders flow while faults are injected")
	f.Int64Var(&cfg.Seed, "seed", 1, "seed of the harness's random choices (faults, targets, timing, synthetic orders)")
	f.IntVar(&cfg.Instances, "instances", 2, "processes per consumer service (1 to 4)")
	f.IntVar(&cfg.Checkouts, "checkouts", 2, "checkout processes")
	f.StringVar(&faults, "faults", "", "comma-separated faults to inject (default all): kill, term, stop, scale, broker, crash-after-effect, crash-after-txn-produce, crash-after-txn-offsets, crash-after-relay-commit, term-in-txn")
	f.DurationVar(&cfg.FaultEvery, "fault-every", 4*time.Second, "mean pause between two injected process faults")
	f.StringVar(&crashRates, "crash-rates", "", "override crash point probabilities, e.g. crash-after-effect=0.01,crash-after-txn-offsets=0.05")
	f.StringVar(&cfg.Workload, "workload", "data/online-retail/online_retail_2010-12-01.csv", "Online Retail CSV whose sale invoices are sent as orders (empty: none)")
	f.Float64Var(&cfg.Rate, "rate", 15, "synthetic orders per second during --duration (0 or negative: none)")
	f.StringVar(&cfg.SeedData, "seed-data", "data/online-retail/online_retail.csv.gz", "Online Retail CSV the catalog and wallets are seeded from")
	f.StringVar(&cfg.OpeningCredit, "opening-credit", "400", "opening wallet balance in GBP (low, so that wallets run dry)")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", 6*time.Second, "group session timeout of every member; a SIGSTOP lasts this plus 2s")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 3*time.Minute, "after the faults, how long to wait for every order to be processed and every lag to be 0")
	f.DurationVar(&cfg.CheckEvery, "check-every", 15*time.Second, "interval of the committed-offsets check during the faults (negative: only at the end)")
	f.StringVar(&binary, "binary", "", "the ordercast binary the processes run (default: this executable)")
	f.StringVar(&cluster.KafkaScript, "kafka-script", "", "scripts/kafka.sh of a running real cluster (its ORDERCAST_KAFKA_* environment): run on it instead of the embedded broker")
	f.StringVar(&cluster.PostgresScript, "postgres-script", "", "scripts/postgres.sh of a running PostgreSQL (its ORDERCAST_PG_* environment), to restart it")
	f.StringVar(&cluster.DSN, "db", "", "PostgreSQL DSN (postgres://...) of --postgres-script's server; emptied by the run")
	f.BoolVar(&cluster.Proxied, "proxy", false, "route the services' Kafka connections through the harness's fault proxies (cluster created with ORDERCAST_KAFKA_PROXIED=1) and inject the net-* faults")
	f.IntVar(&cfg.BadRecords, "bad-records", 8, "undecodable records the harness produces during the faults, which the DLQs must hold exactly (0: none)")
	f.IntVar(&seeds, "seeds", 1, "soak: run this many seeds, --seed and up, one after the other")
	f.StringVar(&table, "table", "", "soak: write the results as a Markdown table to this file")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// checkChaosFlags refuses the values that chaos.Config would replace by its
// defaults without a word, and makes --rate 0 mean no synthetic orders.
func checkChaosFlags(cfg *chaos.Config) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"duration", cfg.Duration}, {"fault-every", cfg.FaultEvery}, {"session-timeout", cfg.SessionTimeout}, {"drain-timeout", cfg.DrainTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s %v: want a positive duration", d.flag, d.v)
		}
	}
	switch {
	case cfg.CheckEvery == 0:
		return fmt.Errorf("--check-every 0: want a positive interval, or a negative one to check only at the end")
	case cfg.Instances < 1 || cfg.Instances > 4:
		return fmt.Errorf("--instances %d: want 1 to 4 processes per service (the topics have 6 partitions, scaling goes to 4)", cfg.Instances)
	case cfg.Checkouts < 1:
		return fmt.Errorf("--checkouts %d: want >= 1", cfg.Checkouts)
	case math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return fmt.Errorf("--rate %v: want a number of orders per second, such as 15 (0 or negative: none)", cfg.Rate)
	}
	if cfg.Rate == 0 {
		cfg.Rate = -1 // chaos.Config: 0 is the default rate, negative none
	}
	if cfg.BadRecords == 0 {
		cfg.BadRecords = -1 // likewise
	}
	if credit, err := order.ParseMoney(cfg.OpeningCredit); err != nil || credit < 0 {
		return fmt.Errorf("--opening-credit %q: want a non-negative amount in GBP such as 400 or 150.50", cfg.OpeningCredit)
	}
	return nil
}
