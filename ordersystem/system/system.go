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
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/proctrace"
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

// System is a running order system.
type System struct {
	cfg      Config
	tracer   *proctrace.Tracer // nil without Config.TracerProvider (tracing.go)
	DB       *store.DB
	Serde    *schema.Serde
	Checkout *checkout.Service
	Producer *kgo.Client
	adminCl  *kgo.Client
	Admin    *kadm.Client
	Relay    *outbox.Relay
	probe    *brokerProbe

	// checkoutDB is checkout's own pool on PostgreSQL (Config.DB.CheckoutConns); nil on SQLite.
	checkoutDB *store.DB

	rights []Right // the ACLs the services of this process need (Rights)
	procs  []*processor.Processor
	txns   []*processor.TxnProcessor
	queues []*processor.QueueProcessor // share group members (NotificationsShare)
	// queueDone[i] counts the records queues[i]'s handler finished
	// without an error (QueueMember.Handled).
	queueDone []*atomic.Int64
	httpSrv   *drainServer
	httpAddr  string

	runCtx context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	errs   []error
	// failed is closed when the first service stops with an error.
	failed chan struct{}

	adminSrv  *http.Server // the admin listener's (admin.go)
	adminAddr string
	console   *console.Console // served on the admin listener under /console
	registry  *sr.Client

	// What the start steps (start.go) hand on to the later ones.
	flt        *faults   // injected faults (EnvFault)
	kopts      []kgo.Opt // every Kafka client's base options: ClientOpts, seed brokers, the probe's hooks
	procMetric *processor.Metrics
	keyBlock   processor.KeyBlock // Consumers.BlockKeys, parsed
	svcMetric  *service.Metrics
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
			err = explainAuth(err, s.cfg.Kafka.Principal, name, s.rights)
			if errors.Is(err, kerr.InvalidSessionTimeout) {
				st := s.cfg.Consumers.SessionTimeout
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

// QueueMember is the readiness view of one share group member: the
// runtime's (processor.QueueHealth) and the records its handler finished
// without an error since it started (Handled: a redelivered record counts
// again, a dead-lettered one does not count), which shows how the work
// spreads over the members.
type QueueMember struct {
	processor.QueueHealth
	Handled int64 `json:"handled"`
}

// Health is the readiness view of every member in this process.
type Health struct {
	Ready   bool               `json:"ready"`
	Members []processor.Health `json:"members"`
	// QueueMembers are the share group members (notifications with
	// Consumers.NotificationsMode NotificationsShare): each one's records
	// held and its records blocked on a DLQ write.
	QueueMembers []QueueMember `json:"queueMembers,omitempty"`
	Outbox       int           `json:"outboxPending"`
	Reasons      []string      `json:"reasons,omitempty"`
}

// Health reports whether the broker answers, every member joined its group,
// no partition (nor, for a share group member, record) is blocked on a DLQ
// write and checkout's database answers
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
	for i, q := range s.queues {
		qh := q.Health()
		h.QueueMembers = append(h.QueueMembers, QueueMember{QueueHealth: qh, Handled: s.queueDone[i].Load()})
		if len(qh.Blocked) > 0 {
			h.Ready = false
			h.Reasons = append(h.Reasons, qh.ClientID+": "+fmt.Sprint(qh.Blocked))
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
	if s.console != nil {
		s.console.Close()
	}
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
func txnTimeout(d time.Duration) processor.TxnOpt {
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
