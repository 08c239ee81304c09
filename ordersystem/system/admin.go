package system

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// The process's two HTTP listeners:
//
//	public (Config.HTTP.Addr, --http):       checkout's API (POST /orders, GET /orders/{id}, GET /openapi.json), GET /healthz, GET /readyz (no reasons)
//	admin (Config.HTTP.AdminAddr, --admin-http): GET /metrics, GET /readyz (with its reasons), GET /healthz, /debug/pprof/,
//	                                             the operators' web console under /console (ordersystem/console)
//
// What the admin listener shows (host and client ids, members and their
// assignments, refusal counts, the database errors behind a 503, profiles)
// is for the operator: it listens on loopback unless told otherwise. Each
// listener accepts a bounded number of connections at once
// (netutil.LimitListener: one more waits in the listen backlog) and bounds
// how long an answer may take to write.

// DefaultAdminAddr is the CLI's default --admin-http. Config.HTTP.AdminAddr left
// empty is "127.0.0.1:0" (a free loopback port, System.AdminAddr says
// which), so that processes and tests never collide on it.
const DefaultAdminAddr = "127.0.0.1:9180"

// DefaultMaxHTTPConns is Config.HTTP.MaxConns by default: the connections
// the public listener serves at once.
const DefaultMaxHTTPConns = 1024

// adminMaxConns is the admin listener's connection cap: a Prometheus
// scraper, a probe and an operator's curl or profile need a few.
const adminMaxConns = 16

// publicWriteTimeout is the public server's http.Server.WriteTimeout: the
// longest from the end of a request's header to the end of its answer. A
// POST /orders takes at most about 40 s with checkout's defaults (10 s body,
// 10 s waiting for its key, 5 s database, 10 s produce, 5 s marking it
// published); past 60 s the connection is closed, so a client that stops
// reading answers does not hold it for ever.
const publicWriteTimeout = 60 * time.Second

// adminWriteTimeout is the admin server's WriteTimeout: above pprof's
// default 30 s CPU profile (pprof refuses a ?seconds= that does not fit in
// it).
const adminWriteTimeout = 90 * time.Second

// adminReadTimeout bounds reading a whole request of the admin listener
// (all GETs without a body).
const adminReadTimeout = 10 * time.Second

// serveHTTP starts the public listener on Config.HTTP.Addr with mux (checkout's
// routes, if checkout runs) and /healthz, and the admin listener on
// Config.HTTP.AdminAddr. Errors name the address and its flag.
func (s *System) serveHTTP(mux *http.ServeMux) error {
	cfg := s.cfg
	healthz := getOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	// Registered without a method and checked inside, so that another
	// method gets 405 with Allow, not checkout's catch-all 404.
	mux.Handle("/healthz", healthz)
	mux.Handle("/readyz", getOnly(http.HandlerFunc(s.readyzPublic)))
	ln, err := listen(cfg.HTTP.Addr, "--http", "http")
	if err != nil {
		return err
	}
	s.httpAddr = ln.Addr().String()
	maxConns := cfg.HTTP.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxHTTPConns
	}
	// ReadHeaderTimeout bounds the header; checkout bounds each body
	// (checkout.Config.BodyTimeout), and stops reading them on Shutdown.
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, WriteTimeout: publicWriteTimeout, MaxHeaderBytes: checkout.ServerMaxHeaderBytes,
		IdleTimeout: 2 * time.Minute, Handler: withRequestID(cfg.Logger, mux)}
	var onDrain []func()
	if s.Checkout != nil {
		// JSON, not ServeMux's redirects and plain text (checkout.Guard).
		srv.Handler = withRequestID(cfg.Logger, checkout.Guard(mux))
		onDrain = append(onDrain, s.Checkout.StopReadingBodies)
	}
	// Stop drains it: see drainServer.Shutdown.
	s.httpSrv = newDrainServer(srv, netutil.LimitListener(ln, maxConns), onDrain...)
	go func() { _ = s.httpSrv.Serve() }()

	adminAddr := cfg.HTTP.AdminAddr
	if adminAddr == "" {
		adminAddr = "127.0.0.1:0"
	}
	aln, err := listen(adminAddr, "--admin-http", "admin http")
	if err != nil {
		return err
	}
	if !loopbackAddr(adminAddr) {
		cfg.Logger.Warn("the admin listener (/metrics, /readyz, /debug/pprof) is on a non-loopback address: anyone who reaches it sees host and client ids, group members, database errors and profiles, and can spend this process's CPU; keep it on 127.0.0.1 or behind a network policy",
			"admin_http", adminAddr)
	}
	s.adminAddr = aln.Addr().String()
	if err := s.newConsole(); err != nil {
		aln.Close()
		return err
	}
	s.adminSrv = &http.Server{Handler: s.adminMux(healthz), ReadHeaderTimeout: adminReadTimeout, ReadTimeout: adminReadTimeout,
		WriteTimeout: adminWriteTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	go func() { _ = s.adminSrv.Serve(netutil.LimitListener(aln, adminMaxConns)) }()
	return nil
}

// adminMux routes the admin listener.
func (s *System) adminMux(healthz http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle("/metrics", getOnly(promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{Registry: s.cfg.Metrics})))
	m.Handle("/readyz", getOnly(http.HandlerFunc(s.readyz)))
	m.Handle("/healthz", healthz)
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if s.console != nil {
		m.Handle(console.Prefix+"/", s.console)
		m.Handle(console.Prefix, s.console)
	}
	return m
}

// newConsole creates the web console over this process's cluster, registry
// and services, and starts its lag sampler.
func (s *System) newConsole() error {
	cfg := console.Config{Kafka: s.kopts, Registry: s.registry, Serde: s.Serde, Token: s.cfg.HTTP.ConsoleToken, Logger: s.cfg.Logger,
		Health: s.consoleHealth}
	if s.Checkout != nil {
		cfg.Order = s.Checkout.Order
	}
	c, err := console.New(cfg)
	if err != nil {
		return fmt.Errorf("%w (--console-token, %s)", err, console.EnvToken)
	}
	s.console = c
	s.goRun("console", c.Run)
	return nil
}

// consoleHealth is the console's view of Health: the broker, each member,
// checkout's database and the outbox.
func (s *System) consoleHealth(ctx context.Context) []console.ServiceHealth {
	h := s.Health(ctx)
	var out []console.ServiceHealth
	for _, m := range h.Members {
		d := fmt.Sprintf("group %s, %d partitions, %d in flight", m.Group, len(m.Partitions), m.InFlight)
		if len(m.Blocked) > 0 {
			d += fmt.Sprintf(", blocked %v", m.Blocked)
		}
		out = append(out, console.ServiceHealth{Name: m.ClientID, Ready: m.Joined && len(m.Blocked) == 0, Detail: d})
	}
	for _, q := range h.QueueMembers {
		d := fmt.Sprintf("share group %s, %d in flight, %d handled", q.Group, q.InFlight, q.Handled)
		if len(q.Blocked) > 0 {
			d += fmt.Sprintf(", blocked %v", q.Blocked)
		}
		out = append(out, console.ServiceHealth{Name: q.ClientID, Ready: len(q.Blocked) == 0, Detail: d})
	}
	if s.Checkout != nil {
		ch := console.ServiceHealth{Name: ServiceCheckout, Ready: true, Detail: "database answers"}
		if err := s.Checkout.Ready(ctx); err != nil {
			ch.Ready, ch.Detail = false, err.Error()
		}
		out = append(out, ch)
	}
	if s.Relay != nil {
		out = append(out, console.ServiceHealth{Name: "payments outbox", Ready: true, Detail: fmt.Sprintf("%d messages pending", h.Outbox)})
	}
	pr := console.ServiceHealth{Name: "process", Ready: h.Ready, Detail: "ready"}
	if !h.Ready {
		pr.Detail = strings.Join(h.Reasons, "; ")
	}
	return append([]console.ServiceHealth{pr}, out...)
}

// AdminAddr is the address the admin listener (/metrics, /readyz,
// /debug/pprof) listens on.
func (s *System) AdminAddr() string { return s.adminAddr }

// closeAdmin closes the admin listener and its connections; Stop runs it
// last, so that /metrics answers while the services drain.
func (s *System) closeAdmin() {
	if s.adminSrv != nil {
		_ = s.adminSrv.Close()
	}
}

// listen listens on addr, with an error naming the flag.
func listen(addr, flag, what string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s address %s is not free (%s): %w", what, addr, flag, err)
	}
	return nil, fmt.Errorf("%s address %s (%s): cannot listen there: %w", what, addr, flag, err)
}

// loopbackAddr reports whether the host of addr is a loopback IP or a name
// resolving only to them; an empty host (every interface) is not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}
