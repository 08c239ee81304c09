package system

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/sqldb"
)

// Start opens the database (migrating it), registers the schemas, creates
// missing topics, seeds the catalog and wallets if the catalog is empty, and
// starts the services in the background. It returns once checkout is
// listening; use Wait to block and Stop to shut down. Errors name what is
// unreachable and which flag sets it; a failed start has released
// everything it opened.
//
// The steps, in order (each a method below): check the configuration, open
// the database, open the schema registry, connect to Kafka and check the
// principal's rights, make sure the topics exist, seed, create the shared
// producer, start the consumer groups and the outbox relay, start
// fulfillment's transactional members, start checkout and the listeners.
func Start(ctx context.Context, cfg Config) (*System, error) {
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	flt, err := parseFaults(os.Getenv(EnvFault))
	if err != nil {
		return nil, err
	}
	kb, err := parseBlockKeys(cfg.Consumers.BlockKeys)
	if err != nil {
		return nil, fmt.Errorf("%w (--block-keys)", err)
	}
	s := &System{cfg: cfg, failed: make(chan struct{}), flt: flt, keyBlock: kb}
	s.setupTracing() // tracing.go
	for _, step := range []func(context.Context) error{
		s.openDB, s.openSerde, s.connectKafka, s.ensureTopics, s.seed, s.newProducer,
		s.startConsumers, s.startFulfillment, s.startCheckout,
	} {
		if err := step(ctx); err != nil {
			s.Stop(context.Background())
			return nil, err
		}
	}
	cfg.Logger.Info("order system started", "http", s.httpAddr, "admin_http", s.adminAddr, "services", cfg.Services, "brokers", cfg.Kafka.Brokers)
	return s, nil
}

// check refuses what Start cannot run with, naming the flag, and takes the
// session timeout from EnvSessionTimeout when none is set.
func (cfg *Config) check() error {
	if len(cfg.Consumers.MemberID) > MaxMemberIDLen {
		return fmt.Errorf("member id of %d bytes (--member-id, %s): want at most %d (it is part of Kafka client and transactional ids)", len(cfg.Consumers.MemberID), EnvMemberID, MaxMemberIDLen)
	}
	if cfg.Consumers.FetchMinBytes < 0 {
		return fmt.Errorf("fetch min bytes %d (--fetch-min-bytes): want >= 1 (1: Kafka's default, answer at the first record)", cfg.Consumers.FetchMinBytes)
	}
	if err := CheckFetchMaxWait(cfg.Consumers.FetchMaxWait); err != nil {
		return fmt.Errorf("fetch max wait (--fetch-max-wait) %w", err)
	}
	if m := cfg.Consumers.NotificationsMode; m != NotificationsGroup && m != NotificationsShare {
		return fmt.Errorf("notifications mode %q (--notifications-mode): want %s (a consumer group, the default) or %s (a share group, KIP-932)", m, NotificationsGroup, NotificationsShare)
	}
	if v := os.Getenv(EnvSessionTimeout); v != "" && cfg.Consumers.SessionTimeout == 0 {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s %q: want a positive duration such as 6s", EnvSessionTimeout, v)
		}
		cfg.Consumers.SessionTimeout = d
	}
	return nil
}

// openDB opens and migrates the services' database.
func (s *System) openDB(ctx context.Context) error {
	cfg := &s.cfg
	var err error
	if s.DB, err = store.Open(ctx, cfg.DB.DSN); err != nil {
		return fmt.Errorf("database %q (--db): %w", RedactDSN(cfg.DB.DSN), err)
	}
	if cfg.DB.Conns > 0 && s.DB.Dialect == sqldb.Postgres {
		s.DB.SetMaxOpenConns(cfg.DB.Conns)
	}
	return store.Migrate(ctx, s.DB)
}

// openSerde connects to the schema registry and registers (or finds) the
// event schemas, pinned to the configured versions.
func (s *System) openSerde(ctx context.Context) error {
	cfg := &s.cfg
	regOpts := append([]sr.ClientOpt{sr.URLs(cfg.Schema.RegistryURL)}, cfg.Schema.RegistryOpts...)
	srCl, err := sr.NewClient(regOpts...)
	if err != nil {
		return fmt.Errorf("schema registry %q (--registry): %w", cfg.Schema.RegistryURL, err)
	}
	s.registry = srCl
	var serdeOpts []schema.Opt
	for topic, n := range cfg.Schema.Versions {
		serdeOpts = append(serdeOpts, schema.WithVersion(topic, n))
	}
	for topic, n := range cfg.Schema.WriterVersions {
		serdeOpts = append(serdeOpts, schema.WithWriterVersion(topic, n))
	}
	if s.Serde, err = schema.New(ctx, srCl, serdeOpts...); err != nil {
		if len(serdeOpts) > 0 {
			return fmt.Errorf("schema registry %q (--registry), schema versions %v, written %v (--schema-version): %w", cfg.Schema.RegistryURL, cfg.Schema.Versions, cfg.Schema.WriterVersions, err)
		}
		return fmt.Errorf("schema registry %q (--registry): %w", cfg.Schema.RegistryURL, describeRegistryErr(err))
	}
	if len(serdeOpts) > 0 {
		cfg.Logger.Info("schema versions pinned", "read_and_written", cfg.Schema.Versions, "written", cfg.Schema.WriterVersions)
	}
	return nil
}

// connectKafka creates the admin client and, before anything is read or
// written, checks the connection and the principal's rights: a refused
// login, an untrusted certificate or a missing ACL stops the start with an
// error naming it. A cluster briefly away (a broker restarting, a
// connection dropped) is waited for, within startWait, by each check.
func (s *System) connectKafka(ctx context.Context) error {
	cfg := &s.cfg
	log := cfg.Logger
	s.probe = &brokerProbe{brokers: cfg.Kafka.Brokers}
	s.kopts = append(append([]kgo.Opt{}, cfg.Kafka.ClientOpts...), kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.WithHooks(s.probe))
	var err error
	if s.adminCl, err = kgo.NewClient(s.kopts...); err != nil {
		return fmt.Errorf("kafka client (--brokers %v): %w", cfg.Kafka.Brokers, err)
	}
	s.Admin = kadm.NewClient(s.adminCl)
	s.probe.cl = s.adminCl
	if err := retryTransient(ctx, log, "reaching the broker", func() error { return s.probe.checkNow(ctx) }); err != nil {
		return describeKafkaErr(err, s.probe.lastDialErr(), cfg.Kafka.Principal)
	}
	for _, svc := range cfg.Services {
		s.rights = append(s.rights, Rights(svc, cfg.Kafka.Layout)...)
	}
	if err := retryTransient(ctx, log, "checking the principal's rights", func() error {
		return checkRights(ctx, s.adminCl, cfg.Kafka.Principal, cfg.Services, s.rights, cfg.Consumers.MemberID+cfg.Kafka.TransactionalIDSuffix)
	}); err != nil {
		return err
	}
	if cfg.runs(ServicePayments) {
		if err := checkTxnWrite(ctx, s.kopts, *cfg, outbox.DefaultTransactionalID(ServicePayments)+cfg.Kafka.TransactionalIDSuffix); err != nil {
			return err
		}
	}
	s.registerOpsMetrics()
	return nil
}

// ensureTopics creates the missing topics of the services this process
// runs.
func (s *System) ensureTopics(ctx context.Context) error {
	cfg := &s.cfg
	var created []string
	var differ []ops.CreateResult
	err := retryTransient(ctx, cfg.Logger, "checking the topics", func() (err error) {
		created, differ, err = ops.EnsureTopics(ctx, s.Admin, topicsOf(cfg.Services, cfg.Kafka.Layout))
		return err
	})
	if err != nil {
		l := cfg.Kafka.Layout
		switch {
		case errors.Is(err, kerr.InvalidReplicationFactor):
			return fmt.Errorf("topics: replication factor %d (--replication-factor) refused by the broker: want from 1 to the cluster's number of brokers (the embedded broker is one): %w", l.ReplicationFactor, err)
		case errors.Is(err, kerr.InvalidPartitions):
			return fmt.Errorf("topics: %d partitions (--partitions) refused by the broker: %w", l.Partitions, err)
		}
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return fmt.Errorf("topics: kafka principal %s may not create the missing ones (its services need no CREATE right when they exist): create them as an admin with `ordercast topics create --system`: %w", principalName(cfg.Kafka.Principal), err)
		}
		return fmt.Errorf("topics (is the broker at %v reachable? --brokers): %w", cfg.Kafka.Brokers, err)
	}
	if len(created) > 0 {
		cfg.Logger.Info("topics created", "topics", created)
	}
	warnTopicsDiffer(cfg.Logger, differ)
	return nil
}

// warnTopicsDiffer logs a WARN for the existing topics that are not as the
// layout asks (ops.EnsureTopics): the partitions and replication factor
// (--partitions, --replication-factor) apply only to the topics a start
// creates. Topics with the same differences share one line.
func warnTopicsDiffer(log *slog.Logger, differ []ops.CreateResult) {
	var notes []string
	byNote := map[string][]string{}
	for _, r := range differ {
		if _, ok := byNote[r.Note]; !ok {
			notes = append(notes, r.Note)
		}
		byNote[r.Note] = append(byNote[r.Note], r.Topic)
	}
	for _, n := range notes {
		log.Warn("existing topics differ from --partitions / --replication-factor, which apply only to topics created at start; they were left unchanged",
			"topics", byNote[n], "differences", n)
	}
}

// seed fills the catalog and the wallets when checkout or payments runs
// and the catalog is empty.
func (s *System) seed(ctx context.Context) error {
	cfg := &s.cfg
	if !cfg.runs(ServiceCheckout) && !cfg.runs(ServicePayments) {
		return nil
	}
	return Seed(ctx, s.DB, cfg.SeedFile, cfg.OpeningCredit, cfg.Logger)
}

// newProducer creates the producer checkout and the groups' retry and DLQ
// writes share (acks=all, idempotent), the metrics, and the context the
// services run in.
func (s *System) newProducer(context.Context) error {
	cfg := &s.cfg
	var err error
	s.Producer, err = kgo.NewClient(append(append(s.kopts,
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent by default in franz-go
		kgo.ProducerLinger(0),
		kgo.ClientID("ordercast-producer"), kafkaHooks(cfg.Metrics),
	), s.clientTraceHooks("")...)...)
	if err != nil {
		return err
	}
	s.runCtx, s.stop = context.WithCancel(context.Background())
	if s.procMetric, err = processor.NewMetrics(cfg.Metrics); err != nil {
		return err
	}
	s.svcMetric = service.NewMetrics(cfg.Metrics)
	return nil
}

// memberOpts are the runtime options of one member of group reading
// topics, those of both modes (processor.TxnOpt).
func (s *System) memberOpts(group string, topics []string) []processor.TxnOpt {
	cfg := &s.cfg
	o := []processor.TxnOpt{
		processor.Brokers(cfg.Kafka.Brokers...), processor.Group(group), processor.Topics(topics...),
		processor.MaxAttempts(cfg.Consumers.MaxAttempts), processor.Logger(cfg.Logger),
		processor.WithMetrics(s.procMetric), processor.ClientOpts(cfg.Kafka.ClientOpts...),
		processor.ClientOpts(kafkaHooks(cfg.Metrics)), // one kprom per member client
		processor.StartOffset(cfg.Consumers.StartOffset),
		processor.ClientOpts(kgo.FetchMinBytes(cfg.Consumers.FetchMinBytes), kgo.FetchMaxWait(cfg.Consumers.FetchMaxWait)),
	}
	o = append(o, s.memberTraceOpts(group)...)
	if cfg.Consumers.SessionTimeout > 0 {
		o = append(o, processor.SessionTimeout(cfg.Consumers.SessionTimeout), processor.RebalanceTimeout(2*cfg.Consumers.SessionTimeout),
			processor.ClientOpts(kgo.HeartbeatInterval(cfg.Consumers.SessionTimeout/6)))
	}
	return o
}

// consumerOpts are memberOpts and the at-least-once mode's own: the
// ordering, the records in flight, the shared producer for retry and DLQ
// writes, and the group's retry topics.
func (s *System) consumerOpts(group string, topics []string) []processor.Opt {
	cfg := &s.cfg
	var o []processor.Opt
	for _, m := range s.memberOpts(group, topics) {
		o = append(o, m)
	}
	o = append(o, processor.WithOrdering(cfg.Consumers.Ordering), processor.Concurrency(cfg.Consumers.Concurrency),
		processor.Producer(s.Producer))
	if len(cfg.Kafka.Layout.RetryDelays) > 0 {
		o = append(o, processor.RetryTopics(cfg.Kafka.Layout.RetryDelays...))
		if kb := s.keyBlock; kb != processor.KeyBlockOff && cfg.Consumers.Ordering == processor.OrderKey && slices.Contains(ops.KeyBlockGroups, group) {
			o = append(o, processor.BlockKeys(kb))
		}
	}
	return o
}

// parseBlockKeys reads Consumers.BlockKeys ("" is "retries").
func parseBlockKeys(s string) (processor.KeyBlock, error) {
	if s == "" {
		return processor.KeyBlockRetries, nil
	}
	kb, err := processor.ParseKeyBlock(s)
	if err != nil {
		return 0, fmt.Errorf("system: Consumers.BlockKeys %q: want off, retries or dead-letters", s)
	}
	return kb, nil
}

// consumer is one at-least-once consumer service: its group (the
// service's name), topics and handlers.
type consumer struct {
	name    string
	topics  []string
	handler processor.Handler
	batch   processor.BatchHandler
}

// startConsumers starts the members of the orders, notifications and
// payments groups this process runs, and payments' outbox relay.
func (s *System) startConsumers(context.Context) error {
	cfg := &s.cfg
	log := cfg.Logger
	ordersSvc := &orders.Service{DB: s.DB, Serde: s.Serde, Logger: log, Metrics: s.svcMetric}
	notifSvc := &notifications.Service{DB: s.DB, Serde: s.Serde, Logger: log, Metrics: s.svcMetric}
	consumers := []consumer{
		{ServiceOrders, consumes[ServiceOrders], ordersSvc.Handle, ordersSvc.HandleBatch},
		{ServiceNotifications, consumes[ServiceNotifications], notifSvc.Handle, notifSvc.HandleBatch},
	}
	if cfg.runs(ServicePayments) {
		// Exactly once for read_committed readers: a duplicate
		// paymentProcessed would make fulfillment (Kafka-only EOS) request a
		// second shipment. Every payments process runs one; they share the
		// transactional id, one publishes and the others stand by.
		var err error
		s.Relay, err = outbox.NewTransactionalRelay(s.DB, ServicePayments, append(append([]kgo.Opt{}, s.kopts...), s.flt.relayHooks()...),
			outbox.Logger(log), outbox.MarkerTopicReplication(cfg.Kafka.Layout.ReplicationFactor, cfg.Kafka.Layout.MinInsyncReplicas),
			outbox.TransactionalIDSuffix(cfg.Kafka.TransactionalIDSuffix),
			outbox.ClientOpts(func(role string) []kgo.Opt {
				return append(relayClientOpts(cfg.Metrics)(role), s.clientTraceHooks("")...)
			}))
		if err != nil {
			return err
		}
		paySvc := &payments.Service{DB: s.DB, Serde: s.Serde, Logger: log, Relay: s.Relay, Metrics: s.svcMetric}
		consumers = append(consumers, consumer{ServicePayments, consumes[ServicePayments], paySvc.Handle, paySvc.HandleBatch})
		s.goRun("outbox relay", s.Relay.Run)
	}
	for _, c := range consumers {
		if !cfg.runs(c.name) {
			continue
		}
		if c.name == ServiceNotifications && cfg.shareNotifications() {
			if err := s.startQueue(c); err != nil {
				return err
			}
			continue
		}
		handler, batch := s.flt.transient(c.name, cfg.Consumers.MaxAttempts, c.handler, c.batch)
		for i := range cfg.instances(c.name) {
			p, err := processor.New(append(append(s.consumerOpts(c.name, c.topics), s.flt.batchOpts(c.name, batch, cfg.Consumers.MaxBatch)...),
				processor.WithHandler(s.flt.handler(c.name, handler)), processor.ClientID(fmt.Sprintf("%s-%d-%s", c.name, i+1, order.NewID("")[:6])))...)
			if err != nil {
				return err
			}
			s.procs = append(s.procs, p)
			s.goRun(c.name, p.Run)
		}
	}
	return nil
}

// startQueue starts the members of consumer service c in its share group
// (Config.groupOf; NotificationsShare), each a processor.NewQueue member
// with c's per-record handler, the service's DLQ (processor.DLQTopic of
// its name, as in group mode) and the shared producer.
func (s *System) startQueue(c consumer) error {
	cfg := &s.cfg
	group := cfg.groupOf(c.name)
	handler, _ := s.flt.transient(c.name, cfg.Consumers.MaxAttempts, c.handler, nil)
	for i := range cfg.instances(c.name) {
		done := new(atomic.Int64)
		h := s.flt.handler(c.name, handler)
		counted := func(ctx context.Context, r *kgo.Record) error {
			err := h(ctx, r)
			if err == nil {
				done.Add(1)
			}
			return err
		}
		opts := []processor.Opt{
			processor.Brokers(cfg.Kafka.Brokers...), processor.Group(group), processor.Topics(c.topics...),
			processor.Logger(cfg.Logger), processor.WithMetrics(s.procMetric),
			processor.ClientOpts(cfg.Kafka.ClientOpts...), processor.ClientOpts(kafkaHooks(cfg.Metrics)),
			processor.Concurrency(cfg.Consumers.Concurrency), processor.Producer(s.Producer),
			processor.DeadLetterTopic(processor.DLQTopic(c.name)),
			processor.WithHandler(counted),
			processor.ClientID(fmt.Sprintf("%s-%d-%s", group, i+1, order.NewID("")[:6])),
		}
		for _, o := range s.memberTraceOpts(group) {
			opts = append(opts, o)
		}
		q, err := processor.NewQueue(opts...)
		if err != nil {
			return fmt.Errorf("%s (--notifications-mode %s): %w", c.name, NotificationsShare, err)
		}
		s.queues = append(s.queues, q)
		s.queueDone = append(s.queueDone, done)
		s.goRun(c.name, q.Run)
	}
	return nil
}

// startFulfillment starts fulfillment's members in the runtime's
// exactly-once mode, each under its own transactional id
// ("ordercast-fulfillment-<MemberID>-<n><TransactionalIDSuffix>"), fencing
// a previous incarnation's open transaction first.
func (s *System) startFulfillment(ctx context.Context) error {
	cfg := &s.cfg
	if !cfg.runs(ServiceFulfillment) {
		return nil
	}
	f := &fulfillment.Service{Serde: s.Serde, Logger: cfg.Logger, Payments: fulfillment.DBRecords(s.DB)}
	for i := range cfg.instances(ServiceFulfillment) {
		txnID := fmt.Sprintf("ordercast-fulfillment-%s-%d%s", cfg.Consumers.MemberID, i+1, cfg.Kafka.TransactionalIDSuffix)
		if err := fenceTransactionalID(ctx, s.kopts, txnID, cfg.Consumers.TransactionTimeout); errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return fmt.Errorf("fulfillment: transactional id %s: %w", txnID, explainAuth(err, cfg.Kafka.Principal, ServiceFulfillment, s.rights))
		} else if errors.Is(err, kerr.InvalidTransactionTimeout) {
			return fmt.Errorf("fulfillment: the broker refuses transaction timeout %v (--transaction-timeout): it is above the broker's transaction.max.timeout.ms (Kafka's default 15m); lower the flag or raise the broker setting: %w", effectiveTxnTimeout(cfg.Consumers.TransactionTimeout), err)
		} else if err != nil {
			cfg.Logger.Warn("could not fence the previous incarnation's transactions; they end at their timeout", "transactional_id", txnID, "error", err)
		}
		opts := append(s.memberOpts(ServiceFulfillment, consumes[ServiceFulfillment]), processor.ClientOpts(s.flt.txnHooks(txnID)...), txnTimeout(cfg.Consumers.TransactionTimeout))
		if max := cfg.Consumers.MaxBatch; max >= 0 {
			// Records ready together are transformed together: their
			// payment records read in one query.
			opts = append(opts, processor.WithTxnBatchHandler(s.flt.txnBatchHandler(txnID, f.TransformBatch)))
			if max > 0 {
				opts = append(opts, processor.MaxBatch(max))
			}
		}
		t, err := processor.NewTransactional(txnID, s.flt.txnHandler(txnID, f.Transform), opts...)
		if err != nil {
			return err
		}
		s.txns = append(s.txns, t)
		s.goRun(ServiceFulfillment, t.Run)
	}
	return nil
}

// startCheckout registers the system's metrics, starts checkout (with its
// own database pool on PostgreSQL) when this process runs it, and opens the
// public and admin listeners.
func (s *System) startCheckout(ctx context.Context) error {
	cfg := &s.cfg
	s.registerMetrics()
	registerDBStats(cfg.Metrics, s.DB.DB, "ordercast") // batch.go
	mux := http.NewServeMux()
	if cfg.runs(ServiceCheckout) {
		checkoutDB := s.DB
		if s.DB.Dialect == sqldb.Postgres {
			var err error
			if s.checkoutDB, err = store.Open(ctx, cfg.DB.DSN); err != nil {
				return fmt.Errorf("database %q (--db), checkout's pool: %w", RedactDSN(cfg.DB.DSN), err)
			}
			s.checkoutDB.SetMaxOpenConns(cfg.DB.CheckoutConns)
			s.checkoutDB.SetMaxIdleConns(cfg.DB.CheckoutConns)
			registerDBStats(cfg.Metrics, s.checkoutDB.DB, "checkout")
			checkoutDB = s.checkoutDB
		}
		var err error
		s.Checkout, err = checkout.New(ctx, checkout.Config{DB: checkoutDB, Serde: s.Serde, Producer: s.Producer, Logger: cfg.Logger, Registerer: cfg.Metrics,
			Auth: cfg.Checkout.Auth, AuthRequired: cfg.Checkout.AuthRequired, RateLimit: cfg.Checkout.RateLimit, RateBurst: cfg.Checkout.RateBurst,
			MaxBatch: cfg.Checkout.MaxBatch})
		if err != nil {
			return err
		}
		mux.Handle("/orders", s.traceHTTP(s.Checkout.Handler(), "/orders"))
		mux.Handle("/orders/", s.traceHTTP(s.Checkout.Handler(), "/orders/{id}"))
		mux.Handle("/", s.Checkout.Handler()) // unknown paths: checkout's JSON 404 {code, error}
	}
	return s.serveHTTP(mux) // admin.go
}
