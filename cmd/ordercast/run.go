package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/system"
)

func newRun() *cobra.Command {
	var f common
	cmd := &cobra.Command{
		Use:   "run SERVICE [SERVICE...]",
		Short: "Run services as this process against an external Kafka cluster",
		Long: `Runs one or more of: ` + strings.Join(system.AllServices, ", ") + `.
Several processes of one service form one consumer group and share its partitions.
Needs --db (or ORDERCAST_DB). --brokers (or KAFKA_BROKERS) and --registry (or
SCHEMA_REGISTRY_URL) default, as for the operator commands (topics, groups, dlq, load), to the
embedded broker and registry of 'ordercast up' (` + defaultBrokers + `, ` + defaultRegistry + `);
set them to an empty string to be told what is missing.`,
		Example: `  ordercast run payments --brokers 127.0.0.1:19092 --registry http://127.0.0.1:8081 --db postgres://ordercast@127.0.0.1/ordercast --http 127.0.0.1:9101 --admin-http 127.0.0.1:9201
  KAFKA_BROKERS=k1:9092,k2:9092 ordercast run checkout --http 0.0.0.0:8080 ...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				ok := false
				for _, s := range system.AllServices {
					ok = ok || a == s
				}
				if !ok {
					return fmt.Errorf("unknown service %q: want one of %s", a, strings.Join(system.AllServices, ", "))
				}
			}
			cfg, err := f.config()
			if err != nil {
				return err
			}
			if err := checkDistinctAddrs(listenFlag{"http", f.httpAddr}, listenFlag{"admin-http", f.adminAddr}); err != nil {
				return err
			}
			// Every missing one at once, not one per attempt.
			var missing []string
			if len(cfg.Kafka.Brokers) == 0 {
				missing = append(missing, "--brokers (or KAFKA_BROKERS): the Kafka bootstrap servers, e.g. 127.0.0.1:9092")
			}
			if cfg.Schema.RegistryURL == "" {
				missing = append(missing, "--registry (or SCHEMA_REGISTRY_URL): the schema registry URL, e.g. http://127.0.0.1:8081")
			}
			if cfg.DB.DSN == "" {
				missing = append(missing, "--db (or ORDERCAST_DB): sqlite:PATH or postgres://user:pass@host/db")
			}
			switch len(missing) {
			case 0:
			case 1:
				return errors.New(strings.Replace(missing[0], ":", " is required:", 1))
			default:
				return fmt.Errorf("required flags missing:\n  %s", strings.Join(missing, "\n  "))
			}
			for svc := range cfg.Instances {
				if !slices.Contains(args, svc) {
					return fmt.Errorf("--instances names %s, which this process does not run (it runs %s)", svc, strings.Join(args, ", "))
				}
			}
			if cfg.Consumers.TransactionTimeout > 0 && !slices.Contains(args, system.ServiceFulfillment) {
				return fmt.Errorf("--transaction-timeout applies only to %s, which this process does not run (it runs %s)", system.ServiceFulfillment, strings.Join(args, ", "))
			}
			if cmd.Flags().Changed("notifications-mode") && !slices.Contains(args, system.ServiceNotifications) {
				return fmt.Errorf("--notifications-mode applies only to %s, which this process does not run (it runs %s)", system.ServiceNotifications, strings.Join(args, ", "))
			}
			if !slices.Contains(args, system.ServiceCheckout) {
				for _, name := range checkoutFlags {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies only to %s, which this process does not run (it runs %s)", name, system.ServiceCheckout, strings.Join(args, ", "))
					}
				}
			}
			if !slices.Contains(args, system.ServiceCheckout) && !slices.Contains(args, system.ServicePayments) {
				for _, name := range []string{"seed-data", "opening-credit"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies only to %s and %s, which seed the catalog and wallets, and this process runs neither (it runs %s)", name, system.ServiceCheckout, system.ServicePayments, strings.Join(args, ", "))
					}
				}
			}
			if !slices.ContainsFunc(args, func(svc string) bool { return svc != system.ServiceCheckout }) {
				for _, name := range []string{"fetch-min-bytes", "fetch-max-wait", "max-batch"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies only to the consumer services (orders, payments, notifications, fulfillment), which this process does not run (it runs %s)", name, strings.Join(args, ", "))
					}
				}
			}
			cfg.Services = args
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			authLine := ""
			if slices.Contains(args, system.ServiceCheckout) {
				if authLine, err = f.auth.apply(ctx, &cfg, ""); err != nil {
					return err
				}
				authLine = " (checkout " + authLine + ")"
			}
			flush, err := setupTracing(ctx, &cfg, f.otlpEndpoint, "ordercast-"+strings.Join(args, "-"))
			if err != nil {
				return err
			}
			defer flush()
			sys, err := startSystem(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "ordercast run %s: serving on http://%s%s, admin (/console, /metrics, /readyz, /debug/pprof) on http://%s\n", strings.Join(args, " "), sys.HTTPAddr(), authLine, sys.AdminAddr())
			return waitAndStop(ctx, sys, "run "+strings.Join(args, " "))
		},
	}
	f.register(cmd, false)
	return cmd
}

// checkoutFlags are the flags of run that only checkout reads.
var checkoutFlags = []string{"checkout-db-conns", "checkout-max-batch", "rate-limit", "rate-burst",
	"auth", "auth-jwks-url", "auth-key-file", "auth-issuer", "auth-audience", "auth-token-types", "auth-algorithms",
	"auth-clock-skew", "auth-customer-claim", "auth-required", "auth-dev-key"}

// startSystem is system.Start; tests replace it to make a service fail.
var startSystem = system.Start

// waitAndStop serves until ctx ends (a signal) or a service stops with an
// error, then stops the system cleanly. A failed service makes it return
// that error, so that the process exits 1 and its supervisor restarts it
// instead of keeping a process whose /healthz still answers 200 while a
// service is gone.
func waitAndStop(ctx context.Context, sys *system.System, what string) error {
	failure := sys.Wait(ctx)
	if failure != nil {
		fmt.Fprintf(os.Stderr, "ordercast %s: %v; stopping the other services and exiting\n", what, failure)
	} else {
		fmt.Fprintf(os.Stderr, "ordercast %s: shutting down%s: draining, committing, leaving the groups\n", what, signalNote(ctx))
	}
	stopErr := sys.Stop(context.Background())
	if failure != nil {
		return failure
	}
	return stopErr
}
