// Package console is the operators' web console of the order system: pages
// rendered on the server (html/template, everything embedded with go:embed,
// no script) over what ordersystem/ops shows and does.
//
//	GET  /console/                           overview: topics, groups and their lag (with a chart of the last minutes), DLQ counts, health
//	GET  /console/groups/{group}             members, partitions, committed and end offsets, lag; offset reset form
//	POST /console/groups/{group}/reset       ops.ResetOffsets (dry run or apply)
//	GET  /console/topics/{topic}             partitions, end offsets, the lag of every group reading it
//	GET  /console/dlq/{group}                records by error class and original topic
//	GET  /console/dlq/{group}/{p}/{offset}   one record: headers and decoded payload
//	POST /console/dlq/{group}/replay         ops.DLQ.Replay of the selected records (dry run or apply)
//	POST /console/dlq/{group}/purge          ops.DLQ.Purge (dry run or apply)
//	GET  /console/orders?id=ORDER            status history, events on each topic, notifications, shipment
//	POST /console/login, /console/logout     the operator session (see Config.Token)
//
// It is read-only unless Config.Token is set; see auth.go for the operator
// session and the cross-site request protections.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console"

// EnvToken is the environment variable the CLI reads the operator token
// from when --console-token is not given.
const EnvToken = "ORDERCAST_CONSOLE_TOKEN"

// Defaults of Config.
const (
	DefaultSampleEvery = 5 * time.Second
	DefaultSamples     = 120 // 10 minutes at DefaultSampleEvery
	DefaultReplayRate  = 50  // records per second
	// MinTokenLen is the shortest Config.Token accepted: 16 bytes.
	MinTokenLen = 16
)

// ServiceHealth is one service's health as the overview shows it.
type ServiceHealth struct {
	Name   string // service or member (client id)
	Ready  bool
	Detail string // why not ready, or what it holds
}

// Config configures a Console. Kafka is required; every other field may be
// left zero.
type Config struct {
	// Kafka are the franz-go options that reach the cluster (seed brokers,
	// TLS, SASL).
	Kafka []kgo.Opt
	// Registry decodes Avro payloads (nil: shown as bytes); Serde checks
	// them against their topic's contract (nil: not checked).
	Registry *sr.Client
	Serde    *schema.Serde
	// Token is the operator token. Empty: the console is read-only (no
	// replay, purge or offset reset, and no login form). At least
	// MinTokenLen bytes otherwise.
	Token string
	// Groups are the consumer groups whose DLQs the console shows; default
	// order.Groups.
	Groups []string
	// Health returns the health of the services of this process (nil: the
	// overview derives each group's health from its state and members).
	Health func(context.Context) []ServiceHealth
	// Order returns an order's status history and notifications
	// (checkout.Service.Order; nil: the order page shows its events only).
	Order func(context.Context, string) (*checkout.OrderView, error)
	// Logger receives a line per operator action; default discards.
	Logger *slog.Logger
	// SampleEvery and Samples size the in-memory ring of lag samples the
	// overview charts: one sample per SampleEvery (default
	// DefaultSampleEvery), the last Samples kept (default DefaultSamples).
	SampleEvery time.Duration
	Samples     int
	// ReplayRate caps the records per second a replay writes (default
	// DefaultReplayRate), as `ordercast dlq replay --rate` does.
	ReplayRate float64
	// Timeout bounds each page's cluster calls (default 20 s).
	Timeout time.Duration
}

// Console serves the pages. Create it with New, serve it (it is an
// http.Handler for the paths under Prefix), run its sampler with Run, and
// Close it when done. Safe for concurrent use.
type Console struct {
	cfg   Config
	cl    *kgo.Client
	adm   *kadm.Client
	pages map[string]*template.Template
	mux   *http.ServeMux
	auth  *auth

	mu      sync.Mutex
	samples []sample // ring, oldest first

	// dlqs holds one ops.DLQ per group, made on first use by newDLQ and
	// kept until Close (each holds a Kafka client).
	dlqMu  sync.Mutex
	dlqs   map[string]*ops.DLQ
	closed bool
	newDLQ func(group string, opts ...kgo.Opt) (*ops.DLQ, error)
}

// sample is one lag sample: the total lag of each group.
type sample struct {
	at  time.Time
	lag map[string]int64
}

// New returns a console over the cluster cfg.Kafka reaches. It fails on
// invalid options or a Token shorter than MinTokenLen; it dials nothing.
func New(cfg Config) (*Console, error) {
	if cfg.Token != "" && len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("console token: %d bytes; want at least %d (such as the output of `openssl rand -hex 16`)", len(cfg.Token), MinTokenLen)
	}
	if len(cfg.Groups) == 0 {
		cfg.Groups = order.Groups
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Samples <= 0 {
		cfg.Samples = DefaultSamples
	}
	if cfg.ReplayRate <= 0 {
		cfg.ReplayRate = DefaultReplayRate
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	cl, err := kgo.NewClient(cfg.Kafka...)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), pages: map[string]*template.Template{}, auth: newAuth(cfg.Token),
		dlqs: map[string]*ops.DLQ{}, newDLQ: ops.NewDLQ}
	for _, p := range []string{"overview", "group", "topic", "dlq", "record", "order", "error"} {
		t, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/base.html", "templates/"+p+".html")
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("console template %s: %w", p, err)
		}
		c.pages[p] = t
	}
	c.routes()
	return c, nil
}

// Close closes the console's Kafka clients: its own and those of the DLQ
// tools it keeps per group. A request served after Close fails.
func (c *Console) Close() {
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	c.closed = true
	for g, d := range c.dlqs {
		d.Close()
		delete(c.dlqs, g)
	}
	c.cl.Close()
}

// dlq returns the console's ops.DLQ of group, made on first use and kept
// for the console's lifetime (ops.DLQ is safe for concurrent use), so that
// pages do not open a Kafka client per request. Safe for concurrent use.
func (c *Console) dlq(group string) (*ops.DLQ, error) {
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	if c.closed {
		return nil, errors.New("console: closed")
	}
	if d := c.dlqs[group]; d != nil {
		return d, nil
	}
	d, err := c.newDLQ(group, c.cfg.Kafka...)
	if err != nil {
		return nil, err
	}
	c.dlqs[group] = d
	return d, nil
}

// ServeHTTP serves the console's paths (under Prefix) with its security
// headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	c.mux.ServeHTTP(w, r)
}

// Run samples every group's total lag each Config.SampleEvery into the ring
// the overview charts, until ctx ends; it returns nil then. A failed sample
// is skipped.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	for {
		c.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Console) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	gs, err := ops.DescribeGroups(ctx, c.adm)
	if err != nil {
		return
	}
	c.record(time.Now(), gs)
}

func (c *Console) record(at time.Time, gs []ops.GroupInfo) {
	s := sample{at: at, lag: map[string]int64{}}
	for _, g := range gs {
		if g.Error == "" {
			s.lag[g.Group] = g.TotalLag
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples = append(c.samples, s)
	if n := len(c.samples) - c.cfg.Samples; n > 0 {
		c.samples = append(c.samples[:0:0], c.samples[n:]...)
	}
}

func (c *Console) ring() []sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sample(nil), c.samples...)
}

// render executes page with data into w; a template error is logged and
// answered 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	data["Operator"] = c.auth.operator(r)
	data["TokenSet"] = c.auth.enabled()
	data["CSRF"] = c.auth.csrf(r)
	data["Path"] = r.URL.RequestURI()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages[page].ExecuteTemplate(w, "base", data); err != nil {
		c.cfg.Logger.Error("console: render", "page", page, "error", err)
	}
}

// fail answers an error page with status and the error's text (escaped).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	c.render(w, r, status, "error", map[string]any{"Title": http.StatusText(status), "Error": err.Error()})
}

// ctx bounds one page's cluster calls.
func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.cfg.Timeout)
}

// errForbidden is the answer to an action without an operator session.
var errForbidden = errors.New("this action needs an operator session: log in with the operator token (--console-token)")
