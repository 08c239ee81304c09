package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/devstack"
)

// devstackInfo is the line `ordercast devstack` prints on stdout once the
// broker and the registry listen: what `ordercast run` needs.
type devstackInfo struct {
	Brokers  []string `json:"brokers"`
	Registry string   `json:"registry"`
	DB       string   `json:"db"`
	DataDir  string   `json:"dataDir"`
}

// allowRemoteHelp is the help of --allow-remote-embedded (up, devstack).
const allowRemoteHelp = "let --broker-addr and --registry-addr be non-loopback addresses (refused without it): the embedded broker and registry take any client without credentials, so anyone who reaches them may write any topic and register schemas; a warning is logged. For a network you trust only; otherwise run Kafka with SASL and ACLs"

func newDevstack() *cobra.Command {
	var (
		dataDir, brokerAddr, registryAddr, logLevel string
		saveEvery                                   time.Duration
		allowRemote                                 bool
	)
	cmd := &cobra.Command{
		Use:   "devstack",
		Short: "Run only the embedded broker and schema registry, for services run as separate processes",
		Long: `Starts the embedded Kafka-protocol broker (franz-go kfake) and schema registry (srfake) that
` + "`ordercast up`" + ` embeds, persisting to --data-dir, and serves them until SIGTERM/SIGINT; then it
saves the registry, closes the broker (flushing its data directory) and exits 0. Starting it again on
the same --data-dir and addresses resumes: topics, records, committed offsets, producer and
transaction state, schemas.

It prints one JSON line on stdout once both listen: {"brokers":[...],"registry":"http://...",
"db":"sqlite:DIR/ordercast.db","dataDir":"DIR"}. Services run with ` + "`ordercast run SERVICE`" + ` against
them; they share the SQLite file (WAL mode, busy_timeout: one writer at a time across processes).

The registry is also saved every --save-every, so a killed devstack loses at most that much.`,
		Example: `  ordercast devstack --data-dir /tmp/oc --broker-addr 127.0.0.1:19092 --registry-addr 127.0.0.1:18081
  ordercast run payments --brokers 127.0.0.1:19092 --registry http://127.0.0.1:18081 --db sqlite:/tmp/oc/ordercast.db --http 127.0.0.1:9101 --admin-http 127.0.0.1:9201`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := common{logLevel: logLevel}
			log, err := c.logger()
			if err != nil {
				return err
			}
			if err := checkListenAddr("broker-addr", brokerAddr); err != nil {
				return err
			}
			if err := checkListenAddr("registry-addr", registryAddr); err != nil {
				return err
			}
			if err := checkDistinctAddrs(listenFlag{"broker-addr", brokerAddr}, listenFlag{"registry-addr", registryAddr}); err != nil {
				return err
			}
			if saveEvery < 0 {
				return fmt.Errorf("--save-every %v: want a duration >= 0 (0: only on shutdown)", saveEvery)
			}
			for _, a := range []struct{ flag, addr string }{{"broker-addr", brokerAddr}, {"registry-addr", registryAddr}} {
				if err := devstack.CheckAddr(a.flag, a.addr, allowRemote); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			st, err := devstack.Start(devstack.Config{DataDir: dataDir, BrokerAddr: brokerAddr, RegistryAddr: registryAddr, AllowRemote: allowRemote, Logger: log})
			if err != nil {
				return err
			}
			warnUnclean(st, dataDir)
			b, _ := json.Marshal(devstackInfo{Brokers: st.Brokers, Registry: st.RegistryURL, DB: st.DSN, DataDir: dataDir})
			fmt.Println(string(b))
			fmt.Fprintf(os.Stderr, "ordercast devstack: broker %v, registry %s, db %s; SIGTERM to stop\n", st.Brokers, st.RegistryURL, st.DSN)
			if saveEvery > 0 {
				t := time.NewTicker(saveEvery)
				defer t.Stop()
			loop:
				for {
					select {
					case <-ctx.Done():
						break loop
					case <-t.C:
						sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
						if err := st.SaveRegistry(sctx); err != nil && ctx.Err() == nil {
							log.Warn("saving the registry failed", "error", err)
						}
						cancel()
					}
				}
			} else {
				<-ctx.Done()
			}
			st.Close()
			fmt.Fprintln(os.Stderr, "ordercast devstack: stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".ordercast", "directory of the broker's log, the registry's schemas and the SQLite database")
	f.StringVar(&brokerAddr, "broker-addr", "127.0.0.1:9092", "listen address of the broker (port 0: a free port, printed)")
	f.StringVar(&registryAddr, "registry-addr", "127.0.0.1:8081", "listen address of the schema registry (port 0: a free port, printed)")
	f.BoolVar(&allowRemote, "allow-remote-embedded", false, allowRemoteHelp)
	f.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	f.DurationVar(&saveEvery, "save-every", 2*time.Second, "how often the registry's schemas are saved to the data directory (0: only on shutdown)")
	return cmd
}

// warnUnclean tells the user, on stderr, that the embedded stack on dataDir
// was not stopped cleanly last time and what that means (devstack.Stack
// Unclean).
func warnUnclean(st *devstack.Stack, dataDir string) {
	if st.Unclean {
		fmt.Fprintf(os.Stderr, "ordercast: warning: the embedded broker in %s was not stopped cleanly last time (killed?). "+
			"Transactions open at that moment may be partially committed (the embedded broker does not recover them atomically), "+
			"so exactly-once results across that crash are not assured; stop with SIGINT/SIGTERM, or test crashes on a real Kafka cluster.\n", dataDir)
	}
}
