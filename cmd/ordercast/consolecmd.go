package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

func newConsole() *cobra.Command {
	var (
		f                         opsFlags
		listen, token             string
		registry, regUser, regPwd string
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the operators' web console (/console) against any cluster, on its own",
		Long: `Serves the web console that every 'ordercast up' and 'ordercast run' process also serves on its
admin listener: the topics, the consumer groups and their lag, the DLQs (with replay and purge),
offset resets and the events of an order. On its own it has no database: the order page shows
the order's events on the topics, not its stored status history.

It is read-only unless an operator token is given (--console-token or ` + console.EnvToken + `, at
least 16 bytes); then an operator who logs in with it may replay and purge DLQ records and reset
the offsets of a group without members. Keep --listen on loopback (see docs/console.md).`,
		Example: `  ordercast console                                  # against 'ordercast up', on http://127.0.0.1:9190/console/
  ORDERCAST_CONSOLE_TOKEN=$(openssl rand -hex 16) ordercast console --brokers kafka-1:9092 --registry http://registry:8081`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkListenAddr("listen", listen); err != nil {
				return err
			}
			f.timeout = max(f.timeout, time.Second)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cctx, cancel := context.WithTimeout(ctx, f.timeout)
			cl, _, opts, err := f.connect(cctx)
			cancel()
			if err != nil {
				return err
			}
			cl.Close()
			cfg := console.Config{Kafka: opts, Token: token}
			if registry != "" {
				ropts, err := f.sec.registryOpts()
				if err != nil {
					return err
				}
				ropts = append(ropts, sr.URLs(registry))
				if regUser != "" {
					ropts = append(ropts, sr.BasicAuth(regUser, regPwd))
				}
				if cfg.Registry, err = sr.NewClient(ropts...); err != nil {
					return fmt.Errorf("--registry %q: %w", registry, err)
				}
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if cfg.Serde, err = schema.New(sctx, cfg.Registry, schema.WithLookupOnly()); err != nil {
					fmt.Fprintf(os.Stderr, "ordercast console: contracts not checked: the registry at %s does not have this build's schemas or is unreachable: %v\n", registry, err)
					cfg.Serde = nil
				}
				cancel()
			}
			c, err := console.New(cfg)
			if err != nil {
				return fmt.Errorf("%w (--console-token, %s)", err, console.EnvToken)
			}
			defer c.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("console address %s (--listen): %w", listen, err)
			}
			mode := "read-only (no --console-token)"
			if token != "" {
				mode = "operator token set"
			}
			fmt.Fprintf(os.Stderr, "ordercast console: http://%s/console/ (%s); brokers %s\n", ln.Addr(), mode, f.brokers)
			srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 90 * time.Second,
				IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
			go func() { _ = c.Run(ctx) }()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:9190", "listen address of the console (host:port; keep it on loopback or behind a network policy)")
	fl.StringVar(&token, "console-token", os.Getenv(console.EnvToken), "operator token, at least 16 bytes (env "+console.EnvToken+"; empty: read-only)")
	fl.StringVar(&registry, "registry", envOr("SCHEMA_REGISTRY_URL", defaultRegistry), "schema registry URL to decode Avro payloads (env SCHEMA_REGISTRY_URL; empty: do not decode)")
	fl.StringVar(&regUser, "registry-user", envOr("SCHEMA_REGISTRY_USER", ""), "schema registry basic-auth user (env SCHEMA_REGISTRY_USER)")
	fl.StringVar(&regPwd, "registry-password", envOr("SCHEMA_REGISTRY_PASSWORD", ""), "schema registry basic-auth password (env SCHEMA_REGISTRY_PASSWORD)")
	return cmd
}
