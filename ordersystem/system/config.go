package system

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/processor"
)

// Config is the system's configuration, in groups: the Kafka cluster, the
// schema registry, the database, the consumer groups, checkout and the HTTP
// listeners. The zero value of a field takes the default its doc names; Start
// fills the defaults in (the CLI's flags set the same fields).
type Config struct {
	// Services to run (ServiceCheckout, ServiceOrders, ...); default
	// AllServices.
	Services []string
	// Instances is the number of group members per consumer service
	// (default 1 each). Each member is a separate Kafka client and group
	// member, so the partition sharing of a group is real.
	Instances map[string]int

	Kafka     KafkaConfig
	Schema    SchemaConfig
	DB        DBConfig
	Consumers ConsumerConfig
	Checkout  CheckoutConfig
	HTTP      HTTPConfig

	// OpeningCredit is each known customer's opening wallet balance.
	OpeningCredit order.Money
	// SeedFile is the Online Retail CSV the catalog and wallets are seeded
	// from when the catalog table is empty.
	SeedFile string

	// Logger receives the system's logs; default a logger that discards.
	Logger *slog.Logger
	// TracerProvider, if set, traces the system with OpenTelemetry: a span
	// per checkout request, the W3C trace context in the headers of every
	// record produced, the runtime's spans (package processor/proctrace),
	// the outbox rows' trace context, and trace_id and span_id on the log
	// lines of a request or record. Default nil: no tracing, nothing
	// recorded.
	TracerProvider trace.TracerProvider
	// Metrics receives every metric of the system (served on the admin
	// listener's /metrics); default a new registry.
	Metrics *prometheus.Registry
}

// KafkaConfig is the Kafka cluster the system uses and how it connects.
type KafkaConfig struct {
	// Brokers are the seed brokers (host:port); needed.
	Brokers []string
	// ClientOpts add franz-go options (TLS, SASL) to every Kafka client.
	ClientOpts []kgo.Opt
	// Principal is the Kafka principal ClientOpts authenticate as, such as
	// "User:ordercast-payments" (SASL user u is principal User:u), for
	// errors only: a refused login or a missing right names it. Empty: the
	// errors say the principal is unknown.
	Principal string
	// Layout is the topics' partitions, replication and retry delays
	// (default 6 partitions, replication factor 1).
	Layout ops.Layout
	// TransactionalIDSuffix is appended to every transactional id of this
	// process (fulfillment's and the payments outbox relay's). Leave it
	// empty on a real cluster: the ids must be stable across restarts so
	// that a restarted member fences its zombie. `ordercast up` sets a
	// fresh one at each start when it runs the embedded broker, which dies
	// with the process (so there is no zombie to fence): kfake's recovery
	// after a crash aborts the transactions that were open without writing
	// their abort markers, and read_committed readers then skip the later
	// records of the same producer id, which a restarted producer with the
	// same transactional id keeps (a SIGKILL of `up` mid-replay hid half
	// the shipments that way). A new transactional id gets a new producer
	// id.
	TransactionalIDSuffix string
}

// SchemaConfig is the schema registry and the schema versions this process
// reads and writes.
type SchemaConfig struct {
	// RegistryURL is the schema registry's URL; needed.
	RegistryURL string
	// RegistryOpts add schema registry client options (basic auth, TLS).
	RegistryOpts []sr.ClientOpt
	// WriterVersions pins what this process writes, topic -> released
	// version (schema.WithWriterVersion, the --schema-version flag): it
	// encodes those topics as the build that only knew that version did
	// (its schema id, without the fields it lacks; checkout then refuses a
	// new order with a channel) and still reads every record with its
	// newest schema. It is the rolling-upgrade tool: the registry's BACKWARD
	// level lets consumers be upgraded first, so pin the upgraded producers
	// to the version the old instances know until every instance runs the
	// new build, then remove the pin. Default nil: every topic written at
	// its newest version. Start fails on a topic without a schema, a version
	// that was not released (schema.Versions gives the newest), or a topic
	// also in Versions.
	WriterVersions map[string]int
	// Versions makes this process read AND write topics as the build that
	// only knew a released version did (schema.WithVersion), dropping the
	// newer fields of what it reads. It emulates an old build in tests
	// (system TestRollingUpgradeSideBySide); in production pin writers with
	// WriterVersions instead. Default nil.
	Versions map[string]int
}

// DBConfig is the database the services share.
type DBConfig struct {
	// DSN names the database: a PostgreSQL URL or an SQLite file (see
	// store.Open); needed.
	DSN string
	// Conns, if > 0, is the PostgreSQL pool size (every service of this
	// process shares the pool); 0 keeps sqldb.PostgresMaxOpenConns. SQLite
	// keeps its own (sqldb.SQLiteMaxOpenConns): its writers are serialised.
	Conns int
	// CheckoutConns is the size of checkout's own PostgreSQL pool (a second
	// pool on the same DSN, so that the consumers' batch transactions never
	// hold the connections checkout's claims and published marks wait for);
	// 0 is DefaultCheckoutDBConns. On SQLite checkout shares the services'
	// DB (its writers must queue on one write lock in this process). Only
	// when checkout runs.
	CheckoutConns int
}

// ConsumerConfig tunes the members of the consumer groups (orders,
// payments, notifications, fulfillment).
type ConsumerConfig struct {
	// Ordering is the groups' processor ordering mode (default
	// processor.OrderPartition; fulfillment always runs in partition order).
	Ordering processor.Ordering
	// Concurrency is each member's records in flight (default 16).
	Concurrency int
	// BlockKeys is how the payments and orders groups (ops.KeyBlockGroups)
	// keep each customer's order through their retry topics
	// (processor.BlockKeys, the --block-keys flag): "" or "retries" (the
	// default: a customer's later records wait while one waits in a retry
	// topic), "dead-letters" (also while it is in the DLQ, until replayed or
	// purged), or "off". It applies only in key order (Ordering
	// processor.OrderKey, the CLI's default) with retry topics; Start
	// refuses another value.
	BlockKeys string
	// MaxBatch is the most records the orders, payments and notifications
	// groups apply in one database transaction (processor.WithBatchHandler,
	// processor.MaxBatch), and fulfillment transforms together with one
	// read of their payment records (processor.WithTxnBatchHandler): 0 is
	// processor.DefaultMaxBatch (100), a negative value turns batching off
	// (one transaction, or one payment lookup, per record).
	MaxBatch int
	// FetchMinBytes and FetchMaxWait are every consumer group member's
	// fetch.min.bytes and fetch.max.wait.ms (kgo.FetchMinBytes,
	// kgo.FetchMaxWait; the --fetch-min-bytes and --fetch-max-wait flags):
	// the broker answers a fetch once this many bytes are there for it, or
	// once it has waited this long. 0 is DefaultFetchMinBytes (256 KiB) and
	// DefaultFetchMaxWait (100 ms); FetchMinBytes 1 is Kafka's default, an
	// answer as soon as one record is there; FetchMaxWait is whole
	// milliseconds from MinFetchMaxWait to MaxFetchMaxWait, and Start
	// refuses a negative FetchMinBytes or a FetchMaxWait out of that range.
	// See DefaultFetchMinBytes for the trade.
	FetchMinBytes int32
	FetchMaxWait  time.Duration
	// MaxAttempts is how many times a record is handled in place before it
	// goes to the next retry topic or the DLQ (default 3).
	MaxAttempts int
	// MemberID names this process among the processes running the same
	// services on one cluster. It is part of fulfillment's transactional
	// ids ("ordercast-fulfillment-<MemberID>-<n>"), which must be unique per
	// member and should survive its restarts: a restarted member then fences
	// its predecessor's open transaction at once instead of waiting for the
	// transaction timeout. Two processes with one MemberID fence each other
	// (still correct, much slower). At most MaxMemberIDLen bytes. Default:
	// env ORDERCAST_MEMBER_ID, else the host name.
	MemberID string
	// SessionTimeout sets every member's group session timeout (and the
	// rebalance timeout to twice it, the heartbeat interval to a sixth).
	// Default: env ORDERCAST_SESSION_TIMEOUT, else the runtime's (45 s).
	// Kafka settings: session.timeout.ms, max.poll.interval.ms.
	SessionTimeout time.Duration
	// StartOffset is where a consumer group without a committed offset
	// starts reading a partition (processor.StartOffset, the --start-offset
	// flag): processor.Earliest (the zero value and default),
	// processor.Latest or processor.AtTime. Kafka setting:
	// auto.offset.reset.
	StartOffset processor.Start
	// NotificationsMode is how the notifications service consumes
	// (the --notifications-mode flag): NotificationsGroup ("" or "group",
	// the default) runs its members in the consumer group "notifications"
	// (processor.New: partitions, retry topics, batches); NotificationsShare
	// ("share") runs them as members of the share group
	// NotificationsShareGroup (processor.NewQueue, KIP-932; Kafka 4.2+ with
	// share groups enabled): the broker hands each record to one member at
	// a time, in no order, so any number of members share the work however
	// few partitions there are. Start refuses another value. See
	// NotificationsShare.
	NotificationsMode string
	// TransactionTimeout sets fulfillment's transaction.timeout.ms: how long
	// a transaction of a member that died (and is not restarted under the
	// same MemberID) holds back read_committed readers of
	// shipmentRequested before the coordinator aborts it. Default: the
	// runtime's, Kafka's 60 s. See processor.TransactionTimeout.
	TransactionTimeout time.Duration
}

// CheckoutConfig is checkout's part (only when checkout runs).
type CheckoutConfig struct {
	// MaxBatch is checkout.Config.MaxBatch: the most concurrent requests'
	// claims (and published marks) written in one batch; 0 is
	// checkout.DefaultMaxBatch, 1 writes each request alone.
	MaxBatch int
	// Auth verifies checkout's bearer tokens (checkout.Config.Auth): nil,
	// the zero value, means no authentication (--auth none). The CLI builds
	// it from --auth (dev by default).
	Auth *authn.Verifier
	// AuthRequired refuses guest orders and anonymous GETs
	// (checkout.Config.AuthRequired, --auth-required); needs Auth.
	AuthRequired bool
	// RateLimit and RateBurst are checkout's per-client rate limit in
	// requests per second and its burst (checkout.Config.RateLimit,
	// RateBurst; --rate-limit, --rate-burst). Zero: no limit.
	RateLimit float64
	RateBurst int
}

// HTTPConfig is the process's two listeners.
type HTTPConfig struct {
	// Addr is the public listen address: checkout's API (when checkout
	// runs), /openapi.json, /healthz and a /readyz that answers 200 "ready"
	// or 503 "not ready" without reasons (/metrics, /readyz's reasons and
	// /debug/pprof are on AdminAddr). Default 127.0.0.1:8080.
	Addr string
	// AdminAddr is the admin listener's address (--admin-http): /metrics,
	// /readyz with its reasons, /healthz and /debug/pprof, which show host
	// and client ids, members, database errors and profiles, so keep it on
	// loopback (a non-loopback one is logged as a warning). Default
	// "127.0.0.1:0", a free loopback port (System.AdminAddr); the CLI's
	// default is DefaultAdminAddr.
	AdminAddr string
	// MaxConns caps the public listener's connections served at once; one
	// more waits in the listen backlog until one closes. Default (0)
	// DefaultMaxHTTPConns.
	MaxConns int
	// ConsoleToken is the operator token of the web console the admin
	// listener serves under /console (--console-token, env
	// console.EnvToken): at least console.MinTokenLen bytes. Empty: the
	// console is read-only (no replay, purge or offset reset).
	ConsoleToken string
}

// Notifications modes (ConsumerConfig.NotificationsMode, --notifications-mode).
const (
	// NotificationsGroup runs the notifications members in the consumer
	// group "notifications" (the default).
	NotificationsGroup = "group"
	// NotificationsShare runs them in the share group
	// NotificationsShareGroup, each a processor.NewQueue member with a
	// per-record handler (the queue mode has no batch handler) and at
	// most Consumers.Concurrency records held. Every notification is
	// still sent exactly once in effect: the inbox (keyed by the service,
	// "notifications", not by the group) skips a redelivered event, and
	// the notification id is stable. A record that fails permanently, or
	// transiently on its last delivery (the group's
	// share.delivery.count.limit, default 5), goes to the same DLQ as in
	// group mode, notifications.dlq, with the runtime's headers. There are
	// no retry topics (a transient failure is released to the broker,
	// which delivers it again), no MaxAttempts and no key order, and
	// FetchMinBytes, FetchMaxWait, SessionTimeout and StartOffset do not
	// apply (a new share group starts at the earliest offsets).
	NotificationsShare = "share"
	// NotificationsShareGroup is the share group of NotificationsShare:
	// not "notifications", since Kafka keeps one group id per type (a
	// share group cannot join under the id of the consumer group's
	// committed offsets, nor the reverse), so that the modes can be
	// switched on one cluster. Switching reads the topics again from the
	// group's start; the shared inbox skips what was already notified.
	NotificationsShareGroup = "notifications-share"
)

// MaxMemberIDLen is the longest Config.MemberID (--member-id) in bytes. The
// id is part of fulfillment's transactional ids, which are also the
// members' Kafka client ids ("ordercast-fulfillment-<MemberID>-<n>" plus
// `up`'s TransactionalIDSuffix), and a client id may have at most 256
// bytes (franz-go's limit, the client.id a broker accepts in a request
// header); 200 leaves room for the rest. A longer id makes Start fail.
const MaxMemberIDLen = 200

// DefaultCheckoutDBConns is the default Config.CheckoutDBConns: checkout's
// own PostgreSQL pool. Its claims and published marks are written in
// batches by at most two runners each (one connection each while a
// statement runs), which leaves four for GET /orders/{id}, readiness and
// the claims written alone after a failed batch.
const DefaultCheckoutDBConns = 8

// DefaultFetchMinBytes and DefaultFetchMaxWait are Config.Consumers.FetchMinBytes
// and FetchMaxWait by default: a consumer's fetch is answered once 256
// KiB are there for it or after 100 ms, where Kafka's defaults (1 byte, 500
// ms) answer it as soon as one record is. With Kafka's, each group fetched,
// handled and committed a database transaction for the few records each
// produce brought (at 1,000 orders/s, 130-140 fetches a second per group), and
// the smaller the load the smaller the batches: the consumers took the
// machine's CPU at any rate from 300 orders/s up, and checkout, sharing it,
// answered in 75-114 ms at p99 (106-109 ms at 1,000/s). Batched, the groups
// fetch about 9 times a second at 1,000/s and write tens of records per
// transaction; checkout's p99 went to 47-58 ms (docs/benchmarks.md, "Consumers'
// fetch batching"). The price is latency when the load is light:
// a record waits up to 100 ms for its fetch at each hop (orderCreated,
// paymentProcessed, shipmentRequested), so up to 300 ms end to end; and an
// idle member fetches 10 times a second instead of 2.
const (
	DefaultFetchMinBytes = 256 << 10
	DefaultFetchMaxWait  = 100 * time.Millisecond
)

// MinFetchMaxWait and MaxFetchMaxWait bound Config.FetchMaxWait, which must
// also be whole milliseconds (fetch.max.wait.ms): franz-go refuses less
// than 10 ms, and a fetch the broker holds longer than 10 s would near
// franz-go's request timeout for it.
const (
	MinFetchMaxWait = 10 * time.Millisecond
	MaxFetchMaxWait = 10 * time.Second
)

// CheckFetchMaxWait returns an error saying what Config.FetchMaxWait (and
// the --fetch-max-wait flag) wants if d is not whole milliseconds from
// MinFetchMaxWait to MaxFetchMaxWait, else nil. Start runs it; the CLI runs
// it too, so that a bad flag is refused before anything starts.
func CheckFetchMaxWait(d time.Duration) error {
	if d < MinFetchMaxWait || d > MaxFetchMaxWait || d%time.Millisecond != 0 {
		return fmt.Errorf("%v: want whole milliseconds from %v to %v, such as 100ms", d, MinFetchMaxWait, MaxFetchMaxWait)
	}
	return nil
}

// MaxSessionTimeout is Kafka's default group.max.session.timeout.ms (30
// minutes): a broker with its default answers a longer session timeout
// with INVALID_SESSION_TIMEOUT at every join.
const MaxSessionTimeout = 30 * time.Minute

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.Services) == 0 {
		c.Services = AllServices
	}
	if c.HTTP.Addr == "" {
		c.HTTP.Addr = "127.0.0.1:8080"
	}
	if c.Consumers.Concurrency == 0 {
		c.Consumers.Concurrency = 16
	}
	if c.DB.CheckoutConns == 0 {
		c.DB.CheckoutConns = DefaultCheckoutDBConns
	}
	if c.Consumers.FetchMinBytes == 0 {
		c.Consumers.FetchMinBytes = DefaultFetchMinBytes
	}
	if c.Consumers.FetchMaxWait == 0 {
		c.Consumers.FetchMaxWait = DefaultFetchMaxWait
	}
	if c.Kafka.Layout.Partitions == 0 {
		c.Kafka.Layout.Partitions = 6
	}
	if c.Kafka.Layout.ReplicationFactor == 0 {
		c.Kafka.Layout.ReplicationFactor = 1
	}
	if c.Consumers.NotificationsMode == "" {
		c.Consumers.NotificationsMode = NotificationsGroup
	}
	if c.Consumers.MaxAttempts == 0 {
		c.Consumers.MaxAttempts = 3
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	if c.Consumers.MemberID == "" {
		c.Consumers.MemberID = os.Getenv(EnvMemberID)
	}
	if c.Consumers.MemberID == "" {
		c.Consumers.MemberID, _ = os.Hostname()
	}
	if c.Consumers.MemberID == "" {
		c.Consumers.MemberID = "local"
	}
}

func (c *Config) runs(svc string) bool {
	for _, s := range c.Services {
		if s == svc {
			return true
		}
	}
	return false
}

// shareNotifications reports whether the notifications service runs in
// its share group (NotificationsShare).
func (c *Config) shareNotifications() bool {
	return c.Consumers.NotificationsMode == NotificationsShare
}

// groupOf is the Kafka group id of consumer service svc's members: the
// service's name, NotificationsShareGroup for notifications in share mode.
func (c *Config) groupOf(svc string) string {
	if svc == ServiceNotifications && c.shareNotifications() {
		return NotificationsShareGroup
	}
	return svc
}

func (c *Config) instances(svc string) int {
	if n := c.Instances[svc]; n > 0 {
		return n
	}
	return 1
}
