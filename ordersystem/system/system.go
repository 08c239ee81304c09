// Package system assembles the order system: it opens the database and the
// schema registry, makes sure the topics exist, seeds the catalog and the
// wallets, and runs checkout and the consumer services (each consumer group
// with its configured number of members) until the context ends.
//
// `ordercast up` runs every service in one process on the embedded stack;
// `ordercast run SERVICE` runs one service against an external cluster. Both
// go through Start.
package system

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// Service names accepted by Config.Services and `ordercast run`.
const (
	ServiceCheckout      = "checkout"
	ServiceOrders        = order.GroupOrders
	ServicePayments      = order.GroupPayments
	ServiceNotifications = order.GroupNotifications
	ServiceFulfillment   = order.GroupFulfillment
)

// AllServices lists every service in start order.
var AllServices = []string{ServiceOrders, ServicePayments, ServiceNotifications, ServiceFulfillment, ServiceCheckout}

// Config is the system's configuration. Zero values take the documented
// defaults in Defaults.
type Config struct {
	Brokers     []string
	RegistryURL string
	// RegistryOpts add schema registry client options (basic auth, TLS).
	RegistryOpts []sr.ClientOpt
	DSN          string
	// Services to run; default all.
	Services []string
	// Instances is the number of group members per consumer service
	// (default 1 each). Each member is a separate Kafka client and group
	// member, so the partition sharing of a group is real.
	Instances map[string]int
	// HTTPAddr is the public listen address: checkout's API (when checkout
	// runs), /healthz and a /readyz that answers 200 "ready" or 503 "not
	// ready" without reasons (/metrics, /readyz's reasons and /debug/pprof
	// are on AdminAddr). Default 127.0.0.1:8080.
	HTTPAddr    string
	Ordering    processor.Ordering
	Concurrency int
	// MaxBatch is the most records the orders, payments and notifications
	// groups apply in one database transaction (processor.WithBatchHandler,
	// processor.MaxBatch): 0 is processor.DefaultMaxBatch (100), a negative
	// value turns batching off (one transaction per record).
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
	// DBConns, if > 0, is the PostgreSQL pool size (every service of this
	// process shares the pool); 0 keeps sqldb.PostgresMaxOpenConns. SQLite
	// keeps its own (sqldb.SQLiteMaxOpenConns): its writers are serialised.
	DBConns int
	// CheckoutDBConns is the size of checkout's own PostgreSQL pool (a
	// second pool on the same DSN, so that the consumers' batch
	// transactions never hold the connections checkout's claims and
	// published marks wait for); 0 is DefaultCheckoutDBConns. On SQLite
	// checkout shares the services' DB (its writers must queue on one
	// write lock in this process). Only when checkout runs.
	CheckoutDBConns int
	// CheckoutMaxBatch is checkout.Config.MaxBatch: the most concurrent
	// requests' claims (and published marks) written in one batch; 0 is
	// checkout.DefaultMaxBatch, 1 writes each request alone.
	CheckoutMaxBatch int
	Layout           ops.Layout
	// OpeningCredit is each known customer's opening wallet balance.
	OpeningCredit order.Money
	// SeedFile is the Online Retail CSV the catalog and wallets are seeded
	// from when the catalog table is empty.
	SeedFile string
	// ClientOpts add franz-go options (TLS, SASL) to every Kafka client.
	ClientOpts []kgo.Opt
	// Principal is the Kafka principal ClientOpts authenticate as, such as
	// "User:ordercast-payments" (SASL user u is principal User:u), for
	// errors only: a refused login or a missing right names it. Empty: the
	// errors say the principal is unknown.
	Principal string
	Logger    *slog.Logger
	// Registerer receives all metrics; default a new registry served on
	// /metrics.
	Registry *prometheus.Registry
	// MaxAttempts and Backoff tune in-place retries of the consumer groups.
	MaxAttempts int
	// MemberID names this process among the processes running the same
	// services on one cluster. It is part of fulfillment's transactional
	// ids ("ordercast-fulfillment-<MemberID>-<n>"), which must be unique per
	// member and should survive its restarts: a restarted member then fences
	// its predecessor's open transaction at once instead of waiting for the
	// transaction timeout. Two processes with one MemberID fence each other
	// (still correct, much slower). Default: env ORDERCAST_MEMBER_ID, else
	// the host name.
	MemberID string
	// WriterSchemaVersions pins what this process writes, topic -> released
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
	// also in SchemaVersions.
	WriterSchemaVersions map[string]int
	// SchemaVersions makes this process read AND write topics as the build
	// that only knew a released version did (schema.WithVersion), dropping
	// the newer fields of what it reads. It emulates an old build in tests
	// (system TestRollingUpgradeSideBySide); in production pin writers with
	// WriterSchemaVersions instead. Default nil.
	SchemaVersions map[string]int
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
	// TransactionTimeout sets fulfillment's transaction.timeout.ms: how long
	// a transaction of a member that died (and is not restarted under the
	// same MemberID) holds back read_committed readers of
	// shipmentRequested before the coordinator aborts it. Default: the
	// runtime's, Kafka's 60 s. See processor.TransactionTimeout.
	TransactionTimeout time.Duration
	// TransactionalIDSuffix is appended to every transactional id of this
	// process (fulfillment's and the payments outbox relay's). Leave it
	// empty on a real cluster: the ids must be stable across restarts so
	// that a restarted member fences its zombie. `ordercast up` sets a
	// fresh one at each start when it runs the embedded broker, which dies
	// with the process (so there is no zombie to fence): kfake's recovery
	// after a crash aborts the transactions that were open without writing
	// their abort markers, and read_committed readers then skip the later
	// records of the same producer id, which a restarted producer with the
	// same transactional id keeps (found by a user review: SIGKILL of up
	// mid-replay hid half the shipments). A new transactional id gets a
	// new producer id.
	TransactionalIDSuffix string
	// CheckoutAuth verifies checkout's bearer tokens (checkout.Config.Auth):
	// nil, the zero value, means no authentication (--auth none). The CLI
	// builds it from --auth (dev by default).
	CheckoutAuth *authn.Verifier
	// CheckoutAuthRequired refuses guest orders and anonymous GETs
	// (checkout.Config.AuthRequired, --auth-required); needs CheckoutAuth.
	CheckoutAuthRequired bool
	// CheckoutRateLimit and CheckoutRateBurst are checkout's per-client
	// rate limit in requests per second and its burst
	// (checkout.Config.RateLimit, RateBurst; --rate-limit, --rate-burst).
	// Zero: no limit.
	CheckoutRateLimit float64
	CheckoutRateBurst int

	// AdminAddr is the admin listener's address (--admin-http): /metrics,
	// /readyz with its reasons, /healthz and /debug/pprof, which show host
	// and client ids, members, database errors and profiles, so keep it on
	// loopback (a non-loopback one is logged as a warning). Default
	// "127.0.0.1:0", a free loopback port (System.AdminAddr); the CLI's
	// default is DefaultAdminAddr.
	AdminAddr string
	// MaxHTTPConns caps the public listener's connections served at once;
	// one more waits in the listen backlog until one closes. Default (0)
	// DefaultMaxHTTPConns.
	MaxHTTPConns int
}

// System is a running order system.
type System struct {
	cfg      Config
	DB       *store.DB
	Serde    *schema.Serde
	Checkout *checkout.Service
	Producer *kgo.Client
	adminCl  *kgo.Client
	Admin    *kadm.Client
	Relay    *outbox.Relay
	probe    *brokerProbe

	// checkoutDB is checkout's own pool on PostgreSQL (Config.CheckoutDBConns); nil on SQLite.
	checkoutDB *store.DB

	rights   []Right // the ACLs the services of this process need (Rights)
	procs    []*processor.Processor
	txns     []*processor.TxnProcessor
	httpSrv  *drainServer
	httpAddr string

	runCtx context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	errs   []error
	// failed is closed when the first service stops with an error.
	failed chan struct{}

	adminSrv  *http.Server // the admin listener's (admin.go)
	adminAddr string
}

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

// DefaultFetchMinBytes and DefaultFetchMaxWait are Config.FetchMinBytes and
// Config.FetchMaxWait by default: a consumer's fetch is answered once 256
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
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.CheckoutDBConns == 0 {
		c.CheckoutDBConns = DefaultCheckoutDBConns
	}
	if c.FetchMinBytes == 0 {
		c.FetchMinBytes = DefaultFetchMinBytes
	}
	if c.FetchMaxWait == 0 {
		c.FetchMaxWait = DefaultFetchMaxWait
	}
	if c.Layout.Partitions == 0 {
		c.Layout.Partitions = 6
	}
	if c.Layout.ReplicationFactor == 0 {
		c.Layout.ReplicationFactor = 1
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.MemberID == "" {
		c.MemberID = os.Getenv(EnvMemberID)
	}
	if c.MemberID == "" {
		c.MemberID, _ = os.Hostname()
	}
	if c.MemberID == "" {
		c.MemberID = "local"
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

func (c *Config) instances(svc string) int {
	if n := c.Instances[svc]; n > 0 {
		return n
	}
	return 1
}

// Start opens the database (migrating it), registers the schemas, creates
// missing topics, seeds the catalog and wallets if the catalog is empty, and
// starts the services in the background. It returns once checkout is
// listening; use Wait to block and Stop to shut down. Errors name what is
// unreachable and which flag sets it.
func Start(ctx context.Context, cfg Config) (*System, error) {
	cfg.defaults()
	log := cfg.Logger
	s := &System{cfg: cfg, failed: make(chan struct{})}
	if len(cfg.MemberID) > MaxMemberIDLen {
		return nil, fmt.Errorf("member id of %d bytes (--member-id, %s): want at most %d (it is part of Kafka client and transactional ids)", len(cfg.MemberID), EnvMemberID, MaxMemberIDLen)
	}
	if cfg.FetchMinBytes < 0 {
		return nil, fmt.Errorf("fetch min bytes %d (--fetch-min-bytes): want >= 1 (1: Kafka's default, answer at the first record)", cfg.FetchMinBytes)
	}
	if err := CheckFetchMaxWait(cfg.FetchMaxWait); err != nil {
		return nil, fmt.Errorf("fetch max wait (--fetch-max-wait) %w", err)
	}
	flt, err := parseFaults(os.Getenv(EnvFault))
	if err != nil {
		return nil, err
	}
	if v := os.Getenv(EnvSessionTimeout); v != "" && cfg.SessionTimeout == 0 {
		if cfg.SessionTimeout, err = time.ParseDuration(v); err != nil || cfg.SessionTimeout <= 0 {
			return nil, fmt.Errorf("%s %q: want a positive duration such as 6s", EnvSessionTimeout, v)
		}
	}
	if s.DB, err = store.Open(ctx, cfg.DSN); err != nil {
		return nil, fmt.Errorf("database %q (--db): %w", RedactDSN(cfg.DSN), err)
	}
	if cfg.DBConns > 0 && s.DB.Dialect == sqldb.Postgres {
		s.DB.SetMaxOpenConns(cfg.DBConns)
	}
	if err := store.Migrate(ctx, s.DB); err != nil {
		s.DB.Close()
		return nil, err
	}
	regOpts := append([]sr.ClientOpt{sr.URLs(cfg.RegistryURL)}, cfg.RegistryOpts...)
	srCl, err := sr.NewClient(regOpts...)
	if err != nil {
		s.DB.Close()
		return nil, fmt.Errorf("schema registry %q (--registry): %w", cfg.RegistryURL, err)
	}
	var serdeOpts []schema.Opt
	for topic, n := range cfg.SchemaVersions {
		serdeOpts = append(serdeOpts, schema.WithVersion(topic, n))
	}
	for topic, n := range cfg.WriterSchemaVersions {
		serdeOpts = append(serdeOpts, schema.WithWriterVersion(topic, n))
	}
	if s.Serde, err = schema.New(ctx, srCl, serdeOpts...); err != nil {
		s.DB.Close()
		if len(serdeOpts) > 0 {
			return nil, fmt.Errorf("schema registry %q (--registry), schema versions %v, written %v (--schema-version): %w", cfg.RegistryURL, cfg.SchemaVersions, cfg.WriterSchemaVersions, err)
		}
		return nil, fmt.Errorf("schema registry %q (--registry): %w", cfg.RegistryURL, describeRegistryErr(err))
	}
	if len(serdeOpts) > 0 {
		log.Info("schema versions pinned", "read_and_written", cfg.SchemaVersions, "written", cfg.WriterSchemaVersions)
	}
	s.probe = &brokerProbe{brokers: cfg.Brokers}
	kopts := append(append([]kgo.Opt{}, cfg.ClientOpts...), kgo.SeedBrokers(cfg.Brokers...), kgo.WithHooks(s.probe))
	if s.adminCl, err = kgo.NewClient(kopts...); err != nil {
		s.DB.Close()
		return nil, fmt.Errorf("kafka client (--brokers %v): %w", cfg.Brokers, err)
	}
	s.Admin = kadm.NewClient(s.adminCl)
	s.probe.cl = s.adminCl
	// Before anything is read or written: a refused login, an untrusted
	// certificate or a missing ACL stops the start with an error naming it.
	// A cluster briefly away (a broker restarting, a connection dropped) is
	// waited for, within startWait, by each of these checks.
	if err := retryTransient(ctx, log, "reaching the broker", func() error { return s.probe.checkNow(ctx) }); err != nil {
		s.close()
		return nil, describeKafkaErr(err, s.probe.lastDialErr(), cfg.Principal)
	}
	for _, svc := range cfg.Services {
		s.rights = append(s.rights, Rights(svc, cfg.Layout)...)
	}
	if err := retryTransient(ctx, log, "checking the principal's rights", func() error {
		return checkRights(ctx, s.adminCl, cfg.Principal, cfg.Services, s.rights, cfg.MemberID+cfg.TransactionalIDSuffix)
	}); err != nil {
		s.close()
		return nil, err
	}
	if cfg.runs(ServicePayments) {
		if err := checkTxnWrite(ctx, kopts, cfg, outbox.DefaultTransactionalID(ServicePayments)+cfg.TransactionalIDSuffix); err != nil {
			s.close()
			return nil, err
		}
	}
	s.registerOpsMetrics()
	var created []string
	err = retryTransient(ctx, log, "checking the topics", func() (err error) {
		created, err = ops.EnsureTopics(ctx, s.Admin, topicsOf(cfg.Services, cfg.Layout))
		return err
	})
	if err != nil {
		s.close()
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return nil, fmt.Errorf("topics: kafka principal %s may not create the missing ones (its services need no CREATE right when they exist): create them as an admin with `ordercast topics create --system`: %w", principalName(cfg.Principal), err)
		}
		return nil, fmt.Errorf("topics (is the broker at %v reachable? --brokers): %w", cfg.Brokers, err)
	}
	if len(created) > 0 {
		log.Info("topics created", "topics", created)
	}
	if cfg.runs(ServiceCheckout) || cfg.runs(ServicePayments) {
		if err := Seed(ctx, s.DB, cfg.SeedFile, cfg.OpeningCredit, log); err != nil {
			s.close()
			return nil, err
		}
	}
	s.Producer, err = kgo.NewClient(append(kopts,
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent by default in franz-go
		kgo.ProducerLinger(0),
		kgo.ClientID("ordercast-producer"), kafkaHooks(cfg.Registry),
	)...)
	if err != nil {
		s.close()
		return nil, err
	}
	s.runCtx, s.stop = context.WithCancel(context.Background())
	metrics := processor.NewMetrics(cfg.Registry)
	svcMetrics := service.NewMetrics(cfg.Registry)
	popts := func(group string, topics []string, ordering processor.Ordering, retries bool) []processor.Opt {
		o := []processor.Opt{
			processor.Brokers(cfg.Brokers...), processor.Group(group), processor.Topics(topics...),
			processor.WithOrdering(ordering), processor.Concurrency(cfg.Concurrency),
			processor.MaxAttempts(cfg.MaxAttempts), processor.Logger(log),
			processor.WithMetrics(metrics), processor.ClientOpts(cfg.ClientOpts...),
			processor.Producer(s.Producer),
			processor.ClientOpts(kafkaHooks(cfg.Registry)), // one kprom per member client
			processor.StartOffset(cfg.StartOffset),
			processor.ClientOpts(kgo.FetchMinBytes(cfg.FetchMinBytes), kgo.FetchMaxWait(cfg.FetchMaxWait)),
		}
		if cfg.SessionTimeout > 0 {
			o = append(o, processor.SessionTimeout(cfg.SessionTimeout), processor.RebalanceTimeout(2*cfg.SessionTimeout),
				processor.ClientOpts(kgo.HeartbeatInterval(cfg.SessionTimeout/6)))
		}
		if retries && len(cfg.Layout.RetryDelays) > 0 {
			o = append(o, processor.RetryTopics(cfg.Layout.RetryDelays...))
		}
		return o
	}
	ordersSvc := &orders.Service{DB: s.DB, Serde: s.Serde, Logger: log, Metrics: svcMetrics}
	notifSvc := &notifications.Service{DB: s.DB, Serde: s.Serde, Logger: log, Metrics: svcMetrics}
	consumers := []struct {
		name    string
		topics  []string
		handler processor.Handler
		batch   processor.BatchHandler
	}{
		{ServiceOrders, consumes[ServiceOrders], ordersSvc.Handle, ordersSvc.HandleBatch},
		{ServiceNotifications, consumes[ServiceNotifications], notifSvc.Handle, notifSvc.HandleBatch},
	}
	if cfg.runs(ServicePayments) {
		// Exactly once for read_committed readers: a duplicate
		// paymentProcessed would make fulfillment (Kafka-only EOS) request a
		// second shipment. Every payments process runs one; they share the
		// transactional id, one publishes and the others stand by.
		s.Relay, err = outbox.NewTransactionalRelay(s.DB, ServicePayments, append(append([]kgo.Opt{}, kopts...), flt.relayHooks()...),
			outbox.Logger(log), outbox.MarkerTopicReplication(cfg.Layout.ReplicationFactor, cfg.Layout.MinInsyncReplicas),
			outbox.TransactionalIDSuffix(cfg.TransactionalIDSuffix),
			outbox.ClientOpts(relayClientOpts(cfg.Registry)))
		if err != nil {
			s.close()
			return nil, err
		}
		paySvc := &payments.Service{DB: s.DB, Serde: s.Serde, Logger: log, Relay: s.Relay, Metrics: svcMetrics}
		consumers = append(consumers, struct {
			name    string
			topics  []string
			handler processor.Handler
			batch   processor.BatchHandler
		}{ServicePayments, consumes[ServicePayments], paySvc.Handle, paySvc.HandleBatch})
		s.goRun("outbox relay", s.Relay.Run)
	}
	for _, c := range consumers {
		if !cfg.runs(c.name) {
			continue
		}
		for i := range cfg.instances(c.name) {
			p, err := processor.New(append(append(popts(c.name, c.topics, cfg.Ordering, true), flt.batchOpts(c.name, c.batch, cfg.MaxBatch)...),
				processor.WithHandler(flt.handler(c.name, c.handler)), processor.ClientID(fmt.Sprintf("%s-%d-%s", c.name, i+1, order.NewID("")[:6])))...)
			if err != nil {
				s.Stop(context.Background())
				return nil, err
			}
			s.procs = append(s.procs, p)
			s.goRun(c.name, p.Run)
		}
	}
	if cfg.runs(ServiceFulfillment) {
		f := &fulfillment.Service{Serde: s.Serde, Logger: log, Payments: fulfillment.DBRecords(s.DB)}
		for i := range cfg.instances(ServiceFulfillment) {
			txnID := fmt.Sprintf("ordercast-fulfillment-%s-%d%s", cfg.MemberID, i+1, cfg.TransactionalIDSuffix)
			if err := fenceTransactionalID(ctx, kopts, txnID, cfg.TransactionTimeout); errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
				s.Stop(context.Background())
				return nil, fmt.Errorf("fulfillment: transactional id %s: %w", txnID, explainAuth(err, cfg.Principal, ServiceFulfillment, s.rights))
			} else if errors.Is(err, kerr.InvalidTransactionTimeout) {
				s.Stop(context.Background())
				return nil, fmt.Errorf("fulfillment: the broker refuses transaction timeout %v (--transaction-timeout): it is above the broker's transaction.max.timeout.ms (Kafka's default 15m); lower the flag or raise the broker setting: %w", effectiveTxnTimeout(cfg.TransactionTimeout), err)
			} else if err != nil {
				log.Warn("could not fence the previous incarnation's transactions; they end at their timeout", "transactional_id", txnID, "error", err)
			}
			t, err := processor.NewTransactional(txnID, flt.txnHandler(txnID, f.Transform),
				append(popts(ServiceFulfillment, consumes[ServiceFulfillment], processor.OrderPartition, false), processor.ClientOpts(flt.txnHooks(txnID)...), txnTimeout(cfg.TransactionTimeout))...)
			if err != nil {
				s.Stop(context.Background())
				return nil, err
			}
			s.txns = append(s.txns, t)
			s.goRun(ServiceFulfillment, t.Run)
		}
	}
	s.registerMetrics()
	registerDBStats(cfg.Registry, s.DB.DB, "ordercast") // batch.go
	mux := http.NewServeMux()
	if cfg.runs(ServiceCheckout) {
		checkoutDB := s.DB
		if s.DB.Dialect == sqldb.Postgres {
			if s.checkoutDB, err = store.Open(ctx, cfg.DSN); err != nil {
				s.Stop(context.Background())
				return nil, fmt.Errorf("database %q (--db), checkout's pool: %w", RedactDSN(cfg.DSN), err)
			}
			s.checkoutDB.SetMaxOpenConns(cfg.CheckoutDBConns)
			s.checkoutDB.SetMaxIdleConns(cfg.CheckoutDBConns)
			registerDBStats(cfg.Registry, s.checkoutDB.DB, "checkout")
			checkoutDB = s.checkoutDB
		}
		s.Checkout, err = checkout.New(ctx, checkout.Config{DB: checkoutDB, Serde: s.Serde, Producer: s.Producer, Logger: log, Registerer: cfg.Registry,
			Auth: cfg.CheckoutAuth, AuthRequired: cfg.CheckoutAuthRequired, RateLimit: cfg.CheckoutRateLimit, RateBurst: cfg.CheckoutRateBurst,
			MaxBatch: cfg.CheckoutMaxBatch})
		if err != nil {
			s.Stop(context.Background())
			return nil, err
		}
		mux.Handle("/orders", s.Checkout.Handler())
		mux.Handle("/orders/", s.Checkout.Handler())
		mux.Handle("/", s.Checkout.Handler()) // unknown paths: checkout's JSON 404 {code, error}
	}
	if err := s.serveHTTP(mux); err != nil { // admin.go
		s.Stop(context.Background())
		return nil, err
	}
	log.Info("order system started", "http", s.httpAddr, "admin_http", s.adminAddr, "services", cfg.Services, "brokers", cfg.Brokers)
	return s, nil
}

// getOnly serves GET and HEAD with h and answers any other method 405
// Method Not Allowed with an Allow header (RFC 9110, section 15.5.6).
func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, r.Method+" is not allowed on "+r.URL.Path+": use GET", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// HTTPAddr is the address of the public listener (checkout, /healthz).
func (s *System) HTTPAddr() string { return s.httpAddr }

func (s *System) goRun(name string, run func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := run(s.runCtx); err != nil && !errors.Is(err, context.Canceled) {
			err = explainAuth(err, s.cfg.Principal, name, s.rights)
			if errors.Is(err, kerr.InvalidSessionTimeout) {
				st := s.cfg.SessionTimeout
				if st == 0 {
					st = processor.DefaultSessionTimeout
				}
				err = fmt.Errorf("%w; the session timeout (--session-timeout, %s) is %v, outside what the broker allows (group.min.session.timeout.ms to group.max.session.timeout.ms; Kafka's defaults are 6s to 30m)", err, EnvSessionTimeout, st)
			}
			s.cfg.Logger.Error("service stopped with an error", "service", name, "error", err)
			s.errMu.Lock()
			s.errs = append(s.errs, fmt.Errorf("service %s stopped: %w", name, err))
			if len(s.errs) == 1 {
				close(s.failed)
			}
			s.errMu.Unlock()
		}
	}()
}

// Failed returns a channel that is closed when the first service (a group
// member, the outbox relay) stops with an error while the system runs; Err
// then says which and why. A service that stops with an error is not
// restarted and the others keep running, so a process should then Stop and
// exit (non-zero) for its supervisor to restart it. The channel is never
// closed by Stop itself. Safe to call concurrently.
func (s *System) Failed() <-chan struct{} { return s.failed }

// Err returns the first error a service stopped with ("service NAME
// stopped: ..."), or nil while none has. Safe to call concurrently.
func (s *System) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if len(s.errs) == 0 {
		return nil
	}
	return s.errs[0]
}

// Wait blocks until ctx ends, returning nil, or until a service stops with an
// error, returning that error (see Failed). It does not stop the system:
// call Stop after it in either case.
func (s *System) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.failed:
		return s.Err()
	}
}

// Health is the readiness view of every member in this process.
type Health struct {
	Ready   bool               `json:"ready"`
	Members []processor.Health `json:"members"`
	Outbox  int                `json:"outboxPending"`
	Reasons []string           `json:"reasons,omitempty"`
}

// Health reports whether the broker answers, every member joined its group,
// no partition is blocked on a DLQ write and checkout's database answers
// (checkout.Service.Ready). The broker is asked at most
// once every 2 s (a metadata request bounded by 2 s); callers in between get
// the last answer. A member keeps counting as joined for a while after the
// broker went away, so the broker check is what turns /readyz 503 then.
func (s *System) Health(ctx context.Context) Health {
	h := Health{Ready: true}
	if err := s.probe.check(ctx); err != nil {
		h.Ready = false
		h.Reasons = append(h.Reasons, err.Error())
	}
	for _, p := range s.procs {
		ph := p.Health()
		h.Members = append(h.Members, ph)
		if !ph.Joined {
			h.Ready = false
			h.Reasons = append(h.Reasons, ph.ClientID+" has not joined group "+ph.Group)
		}
		if len(ph.Blocked) > 0 {
			h.Ready = false
			h.Reasons = append(h.Reasons, ph.ClientID+": "+fmt.Sprint(ph.Blocked))
		}
	}
	for _, t := range s.txns {
		th := t.Health()
		h.Members = append(h.Members, th)
		if !th.Joined {
			h.Ready = false
			h.Reasons = append(h.Reasons, th.ClientID+" has not joined group "+th.Group)
		}
	}
	if s.Checkout != nil {
		if err := s.Checkout.Ready(ctx); err != nil {
			h.Ready = false
			h.Reasons = append(h.Reasons, err.Error())
		}
	}
	if s.Relay != nil {
		h.Outbox, _ = s.Relay.Pending(ctx)
	}
	return h
}

func (s *System) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	h := s.Health(ctx)
	w.Header().Set("Content-Type", "application/json")
	if !h.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = jsonEncode(w, h)
}

// readyzPublic is the public listener's /readyz: the same verdict as the
// admin one's, without the reasons (which name brokers, database errors and
// other clients' orders): 200 "ready" or 503 "not ready".
func (s *System) readyzPublic(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.Health(ctx).Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready (the admin listener's /readyz says why)\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Stop stops taking HTTP requests and drains the HTTP server: it stops
// accepting connections, answers each request it reads with "Connection:
// close", and waits (at most 10 s in all) until every connection has closed,
// closing those left idle for a second, so that every request the server
// read gets its answer and none a connection reset (drainServer.Shutdown).
// Then it stops every member (each drains its in-flight records, commits and
// leaves its group), and closes the clients and the database. It returns the
// errors services stopped with.
func (s *System) Stop(ctx context.Context) error {
	defer s.closeAdmin() // admin.go: /metrics answers while the services drain
	if s.httpSrv != nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = s.httpSrv.Shutdown(sctx)
		cancel()
	}
	if s.Checkout != nil {
		// Records whose acknowledgement outlived their request are
		// recorded as published before the producer closes.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = s.Checkout.Close(cctx)
		cancel()
	}
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
	s.close()
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return errors.Join(s.errs...)
}

func (s *System) close() {
	if s.Producer != nil {
		s.Producer.Close()
	}
	if s.adminCl != nil {
		s.adminCl.Close()
	}
	if s.checkoutDB != nil {
		s.checkoutDB.Close()
	}
	if s.DB != nil {
		s.DB.Close()
	}
}

// txnTimeout is processor.TransactionTimeout(d), or no option for d == 0
// (the runtime's default).
func txnTimeout(d time.Duration) processor.Opt {
	if d == 0 {
		return processor.ClientOpts()
	}
	return processor.TransactionTimeout(d)
}

// effectiveTxnTimeout is d, or Kafka's default transaction.timeout.ms (60 s)
// for 0.
func effectiveTxnTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return 60 * time.Second
	}
	return d
}

// RedactDSN returns dsn with the password of a URL DSN
// (postgres://user:PASSWORD@host/db) replaced by "xxxxx" (url.URL.Redacted),
// for errors and logs. A DSN that does not parse as a URL loses everything
// between "://" and its last "@". Others (sqlite:PATH) are returned as is.
func RedactDSN(dsn string) string {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(dsn, "@"); at > i {
		return dsn[:i+3] + "xxxxx" + dsn[at:]
	}
	return dsn
}

// fenceTransactionalID initialises the transactional id once
// (InitProducerID) and lets it go. The coordinator then aborts the
// transaction a previous incarnation of this member left open (a SIGKILL
// between produce and commit) at once: the member's own session initialises
// only when it first produces, which may be long after (no partition, no
// input), and meanwhile the open transaction holds back the last stable
// offset of every partition it wrote to, stalling read_committed readers
// until transaction.timeout.ms.
//
// It uses the member's transaction timeout (d, 0: Kafka's default 60 s):
// a broker may keep the first one it saw, and one above the broker's
// transaction.max.timeout.ms fails here with kerr.InvalidTransactionTimeout,
// which Start reports instead of letting the member fail at every join.
func fenceTransactionalID(ctx context.Context, kopts []kgo.Opt, txnID string, d time.Duration) error {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...), kgo.TransactionalID(txnID), kgo.TransactionTimeout(effectiveTxnTimeout(d)))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err = cl.ProducerID(ctx)
	return err
}
