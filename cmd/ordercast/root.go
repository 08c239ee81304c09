package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/system"
	"github.com/ordercast/ordercast/processor"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "ordercast",
		Short:         "An event-driven order system on Apache Kafka, and the resilient Kafka runtime under it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newUp(), newRun(), newReplay(), newLoad())
	root.AddCommand(newTopics(), newGroups(), newDLQ(), newProduce(), newACLs(), newConsole())
	root.AddCommand(newDevstack(), newChaos(), newVersion(), newToken())
	// Inherited by every subcommand (cobra looks up the parents'), so
	// that every numeric, duration and boolean flag of the CLI names
	// itself and what it expects on a bad value.
	root.SetFlagErrorFunc(flagError)
	return root
}

// flagError rewrites pflag's parse error for a value that does not parse
// as the flag's type ("invalid argument "abc" for "--partitions" flag:
// strconv.ParseInt: parsing "abc": invalid syntax") into one that names
// the flag and what it expects: `--partitions "abc": want a whole number
// (such as 6)`. Other errors (an unknown flag, a missing value) are pflag's,
// which already name the flag.
func flagError(_ *cobra.Command, err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	fl := ive.GetFlag()
	return fmt.Errorf("--%s %q: want %s", fl.Name, ive.GetValue(), expects(fl))
}

// expects says what a flag of fl's type takes, with its default as the
// example when it has one.
func expects(fl *pflag.Flag) string {
	example := func(def string) string {
		if fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "0s" && fl.DefValue != "[]" {
			def = fl.DefValue
		}
		return " (such as " + def + ")"
	}
	switch t := fl.Value.Type(); t {
	case "int", "int8", "int16", "int32", "int64":
		return "a whole number" + example("3")
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number >= 0" + example("3")
	case "float32", "float64":
		return "a number" + example("2.5")
	case "duration":
		return "a duration with its unit" + example("30s") + "; units ns, us, ms, s, m, h"
	case "bool":
		return "true or false (or the flag alone, for true)"
	default:
		return "a value of type " + t
	}
}

// common holds the flags shared by up and run.
type common struct {
	fs            *pflag.FlagSet
	brokers       string
	registry      string
	registryUser  string
	registryPass  string
	db            string
	httpAddr      string
	adminAddr     string
	consoleToken  string
	logLevel      string
	partitions    int32
	rf            int16
	minISR        int
	instances     string
	ordering      string
	blockKeys     string
	notifMode     string
	concurrency   int
	maxBatch      int
	fetchMinBytes int
	fetchMaxWait  time.Duration
	dbConns       int
	checkoutConns int
	checkoutBatch int
	openingCredit string
	seedData      string
	retryDelays   string
	maxAttempts   int
	memberID      string
	sessionTO     string
	startOffset   string
	txnTimeout    time.Duration
	schemaVers    string
	sec           security
	auth          authFlags
	otlpEndpoint  string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (c *common) register(cmd *cobra.Command, embedded bool) {
	f := cmd.Flags()
	c.fs = f
	// up runs its own broker and registry unless told otherwise; run, like
	// the operator commands (topics, groups, dlq, load), defaults to the
	// addresses of the stack `ordercast up` runs.
	brokersHelp := "Kafka bootstrap servers, comma separated (env KAFKA_BROKERS)"
	brokersDef, registryDef := os.Getenv("KAFKA_BROKERS"), os.Getenv("SCHEMA_REGISTRY_URL")
	registryHelp := "schema registry URL (env SCHEMA_REGISTRY_URL)"
	if embedded {
		brokersHelp += "; empty runs the embedded broker"
		registryHelp += "; empty runs the embedded registry"
	} else {
		brokersDef, registryDef = envOr("KAFKA_BROKERS", defaultBrokers), envOr("SCHEMA_REGISTRY_URL", defaultRegistry)
		brokersHelp += "; default: the embedded broker of 'ordercast up', as for the operator commands"
		registryHelp += "; default: the embedded registry of 'ordercast up', as for the operator commands"
	}
	f.StringVar(&c.brokers, "brokers", brokersDef, brokersHelp)
	f.StringVar(&c.registry, "registry", registryDef, registryHelp)
	f.StringVar(&c.registryUser, "registry-user", os.Getenv("SCHEMA_REGISTRY_USER"), "schema registry basic-auth user (env SCHEMA_REGISTRY_USER)")
	f.StringVar(&c.registryPass, "registry-password", os.Getenv("SCHEMA_REGISTRY_PASSWORD"), "schema registry basic-auth password (env SCHEMA_REGISTRY_PASSWORD)")
	f.StringVar(&c.db, "db", os.Getenv("ORDERCAST_DB"), "database: sqlite:PATH or postgres://... / postgresql://... (env ORDERCAST_DB)"+map[bool]string{true: "; empty uses SQLite in the data directory", false: ""}[embedded])
	f.StringVar(&c.httpAddr, "http", "127.0.0.1:8080", "public listen address (host:port; port 0: a free one): checkout's API, /openapi.json, /healthz and /readyz (its verdict only)")
	f.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "OpenTelemetry tracing: send spans over OTLP/HTTP to this URL (e.g. http://127.0.0.1:4318); empty: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT if set, else no tracing (docs/observability.md)")
	f.StringVar(&c.adminAddr, "admin-http", system.DefaultAdminAddr, "admin listen address (host:port; port 0: a free one): /metrics, /readyz with its reasons, /healthz, /debug/pprof and the web console /console; keep it on loopback (another address is logged as a warning): it shows client ids, group members and database errors")
	f.StringVar(&c.consoleToken, "console-token", os.Getenv(console.EnvToken), "operator token of the web console on the admin listener (/console), at least 16 bytes: with it an operator may replay and purge DLQ records and reset offsets (env "+console.EnvToken+"; empty: the console is read-only)")
	f.StringVar(&c.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	f.Int32Var(&c.partitions, "partitions", 6, "partitions of topics created at start")
	f.Int16Var(&c.rf, "replication-factor", 1, "replication factor of topics created at start (3 on a real cluster)")
	f.IntVar(&c.minISR, "min-insync-replicas", 0, "min.insync.replicas of topics created at start (0: broker default; 2 on a real cluster)")
	f.StringVar(&c.instances, "instances", "", "group members per service, e.g. payments=3,orders=2 (default 1 each)")
	f.StringVar(&c.ordering, "ordering", "key", "ordering mode of the consumer services: partition, key or unordered")
	f.StringVar(&c.blockKeys, "block-keys", "retries", "payments and orders keep each customer's order through their retry topics (key ordering only): retries (a customer's later records wait while one waits in a retry topic), dead-letters (also while it is in the DLQ, until replayed or purged) or off")
	f.StringVar(&c.notifMode, "notifications-mode", system.NotificationsGroup, "how the notifications service consumes: group (its consumer group, partitions shared among --instances members) or share (members of the share group "+system.NotificationsShareGroup+", KIP-932, Kafka 4.2+ with share groups enabled: records handed to any member, one at a time, so more members than partitions all get work; same inbox and DLQ)")
	f.IntVar(&c.concurrency, "concurrency", 16, "handler calls in parallel per group member")
	f.IntVar(&c.dbConns, "db-conns", 0, "PostgreSQL connections in the pool this process's services share (0: 16)")
	f.IntVar(&c.checkoutConns, "checkout-db-conns", 0, fmt.Sprintf("PostgreSQL connections in checkout's own pool, apart from the services' (0: %d; SQLite: checkout shares the services' database)", system.DefaultCheckoutDBConns))
	f.IntVar(&c.checkoutBatch, "checkout-max-batch", 0, fmt.Sprintf("most concurrent requests whose Idempotency-Key rows (and published marks) checkout writes in one batch (0: %d; 1: each request alone; at most %d)", checkout.DefaultMaxBatch, checkout.MaxMaxBatch))
	f.IntVar(&c.maxBatch, "max-batch", processor.DefaultMaxBatch, "most records the orders, payments and notifications groups apply in one database transaction, and fulfillment transforms with one payment lookup (0: one record at a time)")
	f.IntVar(&c.fetchMinBytes, "fetch-min-bytes", system.DefaultFetchMinBytes, "fetch.min.bytes of every consumer group member: the broker answers a fetch once this many bytes are there, or after --fetch-max-wait (1: Kafka's default, at the first record; larger: fewer fetches and bigger batches per database transaction, for up to --fetch-max-wait more latency per hop)")
	f.DurationVar(&c.fetchMaxWait, "fetch-max-wait", system.DefaultFetchMaxWait, fmt.Sprintf("fetch.max.wait.ms of every consumer group member: the longest the broker holds a fetch that has fewer than --fetch-min-bytes (%v to %v, whole milliseconds)", system.MinFetchMaxWait, system.MaxFetchMaxWait))
	f.StringVar(&c.openingCredit, "opening-credit", system.DefaultOpeningCredit.String(), "opening wallet balance of each known customer, in GBP")
	f.StringVar(&c.seedData, "seed-data", "", "Online Retail CSV (plain or .gz) the catalog and wallets are seeded from on first start (empty: the catalog and wallets of the full data set, "+system.DefaultSeedFile+", embedded in the binary, so no checkout is needed)")
	f.StringVar(&c.retryDelays, "retry-delays", "1s,10s", "delays of the retry topics, comma separated durations (empty: no retry topics, straight to the DLQ)")
	f.IntVar(&c.maxAttempts, "max-attempts", 3, "in-place attempts per record before a retry topic or the DLQ")
	f.StringVar(&c.memberID, "member-id", os.Getenv(system.EnvMemberID), "name of this process in fulfillment's transactional ids (ordercast-fulfillment-<id>-<n>): every process running fulfillment against one cluster needs its own, kept across restarts (env "+system.EnvMemberID+"; empty: the host name)")
	f.StringVar(&c.sessionTO, "session-timeout", os.Getenv(system.EnvSessionTimeout), "group session timeout of every member, e.g. 10s (session.timeout.ms; the rebalance timeout is twice it, the heartbeat interval a sixth); a member that stops heartbeating is out of its group after this long (env "+system.EnvSessionTimeout+"; empty: 45s)")
	f.StringVar(&c.startOffset, "start-offset", "earliest", "where a consumer group without a committed offset starts reading a partition: earliest, latest or an RFC 3339 time such as 2026-05-01T12:00:00Z (auto.offset.reset; the time looks up the first record stamped at or after it). Applies once per partition, never to the groups' retry topics, nor to a committed offset out of range (that resumes at the log start)")
	f.DurationVar(&c.txnTimeout, "transaction-timeout", 0, "fulfillment's transaction timeout (transaction.timeout.ms), e.g. 15s: how long a member that died without being restarted under its --member-id holds back read_committed readers of shipmentRequested; at most the broker's transaction.max.timeout.ms (0: Kafka's default, 60s)")
	f.StringVar(&c.schemaVers, "schema-version", "", "pin what this process writes to released schema versions for a rolling upgrade, e.g. orderCreated=1: it writes that topic as the build of that version did (checkout refuses a new order with fields that version lacks) and still reads every version fully (empty: the newest of this build; see docs/api.md, rolling out a schema change)")
	c.sec.register(f, true)
	c.auth.register(f, embedded)
}

func (c *common) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

// config turns the flags into a system.Config; brokers, registry and db are
// filled by the caller when empty.
func (c *common) config() (system.Config, error) {
	var cfg system.Config
	log, err := c.logger()
	if err != nil {
		return cfg, err
	}
	cfg.Logger = log
	cfg.Kafka.Brokers = splitList(c.brokers)
	cfg.Schema.RegistryURL = c.registry
	if c.registryUser != "" {
		cfg.Schema.RegistryOpts = append(cfg.Schema.RegistryOpts, sr.BasicAuth(c.registryUser, c.registryPass))
	}
	if cfg.Kafka.ClientOpts, err = c.sec.kafkaOpts(); err != nil {
		return cfg, err
	}
	if c.sec.saslUser != "" {
		cfg.Kafka.Principal = "User:" + c.sec.saslUser
	}
	if c.sec.registryCA != "" && !strings.HasPrefix(c.registry, "https://") {
		return cfg, fmt.Errorf("--registry-tls-ca needs an https --registry (or SCHEMA_REGISTRY_URL); the registry here is %q", c.registry)
	}
	regTLS, err := c.sec.registryOpts()
	if err != nil {
		return cfg, err
	}
	cfg.Schema.RegistryOpts = append(cfg.Schema.RegistryOpts, regTLS...)
	if c.registry != "" {
		if u, err := url.Parse(c.registry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, fmt.Errorf("--registry %q: want the schema registry's URL, such as http://127.0.0.1:8081", c.registry)
		}
	}
	if err := checkDSN(c.db, c.fs != nil && c.fs.Changed("db")); err != nil {
		return cfg, err
	}
	cfg.DB.DSN = c.db
	if err := checkListenAddr("http", c.httpAddr); err != nil {
		return cfg, err
	}
	cfg.HTTP.Addr = c.httpAddr
	if err := checkListenAddr("admin-http", c.adminAddr); err != nil {
		return cfg, err
	}
	cfg.HTTP.AdminAddr = c.adminAddr
	cfg.HTTP.ConsoleToken = c.consoleToken
	if err := c.auth.check(c.httpAddr); err != nil {
		return cfg, err
	}
	if c.partitions < 1 || c.partitions > maxPartitions {
		return cfg, fmt.Errorf("--partitions %d: want from 1 to %d", c.partitions, maxPartitions)
	}
	if c.rf < 1 {
		return cfg, fmt.Errorf("--replication-factor %d: want >= 1", c.rf)
	}
	if c.minISR < 0 || c.minISR > int(c.rf) {
		return cfg, fmt.Errorf("--min-insync-replicas %d: want 0 (the broker's default) to the replication factor (--replication-factor %d); RF-1 lets one replica fail without stopping acks=all writes", c.minISR, c.rf)
	}
	cfg.Kafka.Layout = ops.Layout{Partitions: c.partitions, ReplicationFactor: c.rf, MinInsyncReplicas: c.minISR}
	for _, d := range splitList(c.retryDelays) {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			return cfg, fmt.Errorf("--retry-delays %q: %q is not a positive duration like 1s or 500ms", c.retryDelays, d)
		}
		if v >= maxRetryDelay {
			return cfg, fmt.Errorf("--retry-delays %q: %v is too long: want each delay under %v, Kafka's default log retention (log.retention.hours=168) of the retry topics, which could delete a record before it is due", c.retryDelays, v, maxRetryDelay)
		}
		cfg.Kafka.Layout.RetryDelays = append(cfg.Kafka.Layout.RetryDelays, v)
	}
	if cfg.Instances, err = parseInstances(c.instances); err != nil {
		return cfg, err
	}
	if cfg.Consumers.Ordering, err = processor.ParseOrdering(c.ordering); err != nil {
		return cfg, fmt.Errorf("--ordering: %w", err)
	}
	if _, err := processor.ParseKeyBlock(c.blockKeys); err != nil {
		return cfg, fmt.Errorf("--block-keys %q: want off, retries or dead-letters", c.blockKeys)
	}
	cfg.Consumers.BlockKeys = c.blockKeys
	if c.notifMode != system.NotificationsGroup && c.notifMode != system.NotificationsShare {
		return cfg, fmt.Errorf("--notifications-mode %q: want %s (the notifications consumer group, the default) or %s (the share group %s, KIP-932)", c.notifMode, system.NotificationsGroup, system.NotificationsShare, system.NotificationsShareGroup)
	}
	cfg.Consumers.NotificationsMode = c.notifMode
	if c.concurrency < 1 || c.concurrency > maxConcurrency {
		return cfg, fmt.Errorf("--concurrency %d: want from 1 to %d handler calls per group member", c.concurrency, maxConcurrency)
	}
	cfg.Consumers.Concurrency = c.concurrency
	if c.dbConns < 0 {
		return cfg, fmt.Errorf("--db-conns %d: want >= 0 (0: the default, 16)", c.dbConns)
	}
	cfg.DB.Conns = c.dbConns
	if c.checkoutConns < 0 {
		return cfg, fmt.Errorf("--checkout-db-conns %d: want >= 0 (0: the default, %d)", c.checkoutConns, system.DefaultCheckoutDBConns)
	}
	cfg.DB.CheckoutConns = c.checkoutConns
	if d := strings.TrimSpace(c.db); !strings.HasPrefix(d, "postgres://") && !strings.HasPrefix(d, "postgresql://") {
		for _, name := range []string{"db-conns", "checkout-db-conns"} {
			if c.fs != nil && c.fs.Changed(name) {
				return cfg, fmt.Errorf("--%s applies only to PostgreSQL (--db postgres://...); the database here is SQLite, whose connections are its own (one writer at a time)", name)
			}
		}
	}
	if c.checkoutBatch < 0 || c.checkoutBatch > checkout.MaxMaxBatch {
		return cfg, fmt.Errorf("--checkout-max-batch %d: want 0 to %d (0: the default, %d)", c.checkoutBatch, checkout.MaxMaxBatch, checkout.DefaultMaxBatch)
	}
	cfg.Checkout.MaxBatch = c.checkoutBatch
	switch {
	case c.maxBatch < 0:
		return cfg, fmt.Errorf("--max-batch %d: want >= 0 (0: no batching)", c.maxBatch)
	case c.maxBatch == 0:
		cfg.Consumers.MaxBatch = -1
	default:
		cfg.Consumers.MaxBatch = c.maxBatch
	}
	if c.fetchMinBytes < 1 || c.fetchMinBytes > math.MaxInt32 {
		return cfg, fmt.Errorf("--fetch-min-bytes %d: want from 1 (Kafka's default: answer at the first record) to %d", c.fetchMinBytes, math.MaxInt32)
	}
	cfg.Consumers.FetchMinBytes = int32(c.fetchMinBytes)
	if err := system.CheckFetchMaxWait(c.fetchMaxWait); err != nil {
		return cfg, fmt.Errorf("--fetch-max-wait %w", err)
	}
	cfg.Consumers.FetchMaxWait = c.fetchMaxWait
	if c.maxAttempts < 1 {
		return cfg, fmt.Errorf("--max-attempts %d: want >= 1", c.maxAttempts)
	}
	cfg.Consumers.MaxAttempts = c.maxAttempts
	credit, err := order.ParseMoney(c.openingCredit)
	if err != nil || credit < 0 {
		return cfg, fmt.Errorf("--opening-credit %q: want a non-negative amount in GBP such as 2000 or 150.50", c.openingCredit)
	}
	cfg.OpeningCredit = credit
	if c.seedData != "" {
		// Found missing now, before anything (the data directory) is
		// created, not by the seeding after the start.
		if fi, err := os.Stat(c.seedData); err != nil || fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("is a directory")
			}
			return cfg, fmt.Errorf("--seed-data %s: %w (want the Online Retail CSV, plain or .gz; leave the flag out for the catalog embedded in the binary)", c.seedData, err)
		}
	}
	cfg.SeedFile = c.seedData
	if c.fs.Changed("member-id") && strings.TrimSpace(c.memberID) == "" {
		return cfg, fmt.Errorf("--member-id %q: want a non-empty name for this process, such as f1 (leave the flag out for the host name)", c.memberID)
	}
	cfg.Consumers.MemberID = strings.TrimSpace(c.memberID)
	if len(cfg.Consumers.MemberID) > system.MaxMemberIDLen {
		return cfg, fmt.Errorf("--member-id (or %s) of %d bytes: want at most %d; it becomes part of Kafka client ids and transactional ids (ordercast-fulfillment-<id>-<n>), which Kafka clients limit to 256 bytes", system.EnvMemberID, len(cfg.Consumers.MemberID), system.MaxMemberIDLen)
	}
	if c.sessionTO != "" {
		d, err := time.ParseDuration(c.sessionTO)
		name := "--session-timeout"
		if !c.fs.Changed("session-timeout") {
			name = system.EnvSessionTimeout + " (the default of --session-timeout)"
		}
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("%s %q: want a positive duration such as 10s (the group session timeout, session.timeout.ms), from %v to %v", name, c.sessionTO, minSessionTimeout, system.MaxSessionTimeout)
		}
		if d < minSessionTimeout {
			return cfg, fmt.Errorf("%s %v: want from %v (the Kafka client's least) to %v, such as 10s; a broker with Kafka's defaults (the embedded one too) takes 6s or more", name, d, minSessionTimeout, system.MaxSessionTimeout)
		}
		if d > system.MaxSessionTimeout {
			return cfg, fmt.Errorf("%s %v: want at most %v, Kafka's default group.max.session.timeout.ms (a broker answers longer ones with INVALID_SESSION_TIMEOUT at every join)", name, d, system.MaxSessionTimeout)
		}
		cfg.Consumers.SessionTimeout = d
	} else if c.fs.Changed("session-timeout") {
		return cfg, fmt.Errorf("--session-timeout \"\": want a positive duration such as 10s (leave the flag out for 45s)")
	}
	if cfg.Consumers.StartOffset, err = processor.ParseStart(c.startOffset); err != nil {
		return cfg, fmt.Errorf("--start-offset: %w", err)
	}
	if c.txnTimeout < 0 || (c.txnTimeout > 0 && c.txnTimeout < time.Second) || c.txnTimeout > maxTxnTimeout {
		return cfg, fmt.Errorf("--transaction-timeout %v: want a duration of 1s or more, such as 15s, up to the broker's transaction.max.timeout.ms (Kafka's default 15m; no broker takes more than %v) (0: Kafka's default, 60s)", c.txnTimeout, maxTxnTimeout)
	}
	cfg.Consumers.TransactionTimeout = c.txnTimeout
	if cfg.Schema.WriterVersions, err = parseSchemaVersions(c.schemaVers); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Bounds of the flags of up and run beyond their types'.
const (
	// maxPartitions bounds --partitions: each of the system's twenty-odd
	// topics gets that many, and the embedded broker holds every one in
	// memory.
	maxPartitions = 10_000
	// maxConcurrency bounds --concurrency: fulfillment's members start
	// that many goroutines each at once.
	maxConcurrency = 4096
	// minSessionTimeout is the least session timeout the Kafka client
	// (franz-go) accepts.
	minSessionTimeout = 100 * time.Millisecond
	// maxTxnTimeout is the longest transaction timeout the protocol
	// carries (int32 milliseconds), which the Kafka client checks.
	maxTxnTimeout = time.Duration(math.MaxInt32) * time.Millisecond
	// maxRetryDelay bounds each of --retry-delays: a retry topic created
	// with the broker's default retention (Kafka's is 7 days) keeps a
	// record for less than that.
	maxRetryDelay = 7 * 24 * time.Hour
)

// parseSchemaVersions parses --schema-version: comma-separated topic=N, each
// topic one with a contract and N a released version of it (1..newest).
func parseSchemaVersions(v string) (map[string]int, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, kv := range splitList(v) {
		topic, nstr, ok := strings.Cut(kv, "=")
		topic = strings.TrimSpace(topic)
		if !ok || topic == "" {
			return nil, fmt.Errorf("--schema-version %q: %q is not topic=version, e.g. orderCreated=1", v, kv)
		}
		newest := schema.Versions(topic)
		if newest == 0 {
			return nil, fmt.Errorf("--schema-version %q: topic %q has no schema; want one of %s", v, topic, strings.Join(schema.Topics(), ", "))
		}
		n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(nstr), "v"))
		if err != nil || n < 1 || n > newest {
			return nil, fmt.Errorf("--schema-version %q: version of %s must be a released one, 1 to %d", v, topic, newest)
		}
		if _, dup := out[topic]; dup {
			return nil, fmt.Errorf("--schema-version %q: %s is given twice", v, topic)
		}
		out[topic] = n
	}
	return out, nil
}

// checkListenAddr rejects a listen address flag whose value is not
// host:port; whether the address is free is for the listener to say.
func checkListenAddr(flag, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil || strings.ContainsAny(host, " /") {
		return fmt.Errorf("--%s %q is not a host:port address: want e.g. 127.0.0.1:8080, :8080 (every interface) or 127.0.0.1:0 (a free port)", flag, v)
	}
	return nil
}

// listenFlag is a listen-address flag (its name without the dashes) and
// its value.
type listenFlag struct{ flag, addr string }

// checkDistinctAddrs refuses two listen-address flags (already checked by
// checkListenAddr) that would listen on one address: the same port and
// host, or the same port with either host every interface ("", 0.0.0.0,
// ::), or host names that resolve to a common IP. The second listener
// would only fail with "address in use" once the first had started. Port
// 0 (a free port each) never clashes.
func checkDistinctAddrs(addrs ...listenFlag) error {
	for i, a := range addrs {
		for _, b := range addrs[i+1:] {
			if sameListenAddr(a.addr, b.addr) {
				return fmt.Errorf("--%s %s and --%s %s: both listen on one address; give each its own port (port 0: a free one)", a.flag, a.addr, b.flag, b.addr)
			}
		}
	}
	return nil
}

func sameListenAddr(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return false
	}
	na, err1 := net.LookupPort("tcp", pa)
	nb, err2 := net.LookupPort("tcp", pb)
	if err1 != nil || err2 != nil || na == 0 || na != nb {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	if wildcard(ha) || wildcard(hb) || strings.EqualFold(ha, hb) {
		return true
	}
	ips := func(h string) []net.IP {
		if ip := net.ParseIP(h); ip != nil {
			return []net.IP{ip}
		}
		out, _ := net.LookupIP(h)
		return out
	}
	for _, x := range ips(ha) {
		for _, y := range ips(hb) {
			if x.Equal(y) {
				return true
			}
		}
	}
	return false
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseInstances(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range splitList(s) {
		name, n, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--instances %q: %q is not service=count", s, kv)
		}
		valid := false
		for _, svc := range order.Groups {
			valid = valid || svc == name
		}
		if !valid {
			return nil, fmt.Errorf("--instances %q: unknown service %q (want one of %s)", s, name, strings.Join(order.Groups, ", "))
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 || v > 64 {
			return nil, fmt.Errorf("--instances %q: count %q for %s must be a whole number from 1 to 64", s, n, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--instances %q: %s is given twice (give each service once)", s, name)
		}
		out[name] = v
	}
	return out, nil
}

// checkDSN refuses a database other than "sqlite:PATH" (also sqlite://PATH)
// or a postgres:// or postgresql:// URL, so that a mistyped --db does not
// become an SQLite file of that name in the working directory. Empty is
// left to the caller (up: SQLite in the data directory; run: required).
// fromFlag says whether --db was given (else the value is ORDERCAST_DB's).
func checkDSN(dsn string, fromFlag bool) error {
	d := strings.TrimSpace(dsn)
	switch {
	case dsn == "",
		strings.HasPrefix(d, "postgres://"), strings.HasPrefix(d, "postgresql://"):
		return nil
	case strings.HasPrefix(d, "sqlite:"):
		if strings.TrimPrefix(strings.TrimPrefix(d, "sqlite:"), "//") == "" {
			return fmt.Errorf("%s %q: sqlite: needs a path, such as sqlite:/var/lib/ordercast/ordercast.db", dsnSource(fromFlag), system.RedactDSN(dsn))
		}
		return nil
	}
	return fmt.Errorf("%s %q: want sqlite:PATH (such as sqlite:ordercast.db) or postgres://user:pass@host:5432/db (also postgresql://)", dsnSource(fromFlag), system.RedactDSN(dsn))
}

func dsnSource(fromFlag bool) string {
	if fromFlag {
		return "--db"
	}
	return "ORDERCAST_DB (--db)"
}
