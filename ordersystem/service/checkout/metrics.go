package checkout

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are checkout's Prometheus metrics:
//
//	ordercast_checkout_http_requests_total{route,method,code}     counter
//	ordercast_checkout_http_request_duration_seconds{route,method} histogram
//	ordercast_checkout_orders_accepted_total                       counter: orders first acknowledged by the broker
//	ordercast_checkout_orders_rejected_total{code}                 counter: POST /orders error answers by ErrorResponse code
//	ordercast_checkout_idempotent_replays_total                    counter: stored answers replayed
//	ordercast_checkout_republished_total                           counter: pending events produced again
//	ordercast_checkout_produce_duration_seconds{result}            histogram: ok, error or timeout
//	ordercast_checkout_db_write_duration_seconds{step}             histogram: claim or mark, queue included
//	ordercast_checkout_catalog_products                            gauge
//	ordercast_checkout_auth_failures_total{reason}                 counter: bearer tokens refused, by authn.Reason*
//
// route is one of a fixed set (routeLabels): the API route the request
// matched, "POST /orders" or "GET /orders/{id}" (HEAD included), else
// "other" (unknown paths, a known path with a method it does not allow,
// redirects), never a raw path; with method bounded to the standard methods
// and "other", the label sets are bounded.
type metrics struct {
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	accepted        prometheus.Counter
	rejected        *prometheus.CounterVec
	replays         prometheus.Counter
	republished     prometheus.Counter
	produceDuration *prometheus.HistogramVec
	dbWrite         *prometheus.HistogramVec
	catalogSize     prometheus.Gauge
	authFailures    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "ordercast", "checkout"
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "http_requests_total",
			Help: "HTTP requests answered by checkout, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "orders_accepted_total",
			Help: "Orders whose orderCreated event the broker acknowledged (each order counted once).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "orders_rejected_total",
			Help: "POST /orders answered with an error, by ErrorResponse code (validation rejections and 5xx alike).",
		}, []string{"code"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "idempotent_replays_total",
			Help: "Stored answers replayed for a repeated Idempotency-Key.",
		}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "republished_total",
			Help: "Pending orderCreated events produced again for a retried Idempotency-Key.",
		}),
		produceDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "produce_duration_seconds",
			Help:    "Time from producing an orderCreated event to its acknowledgement or failure, by result (ok, error, timeout).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"result"}),
		dbWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "db_write_duration_seconds",
			Help: "Time a request waited for its database write, by step: claim (its Idempotency-Key row, before the produce) or mark " +
				"(the row published, after the acknowledgement); the wait for a batch (group commit) included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"step"}),
		catalogSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "catalog_products",
			Help: "Products in checkout's in-memory catalog.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "auth_failures_total",
			Help: "Bearer tokens refused (401), by reason: malformed, bad_algorithm, bad_signature, unknown_key, expired, not_yet_valid, bad_issuer, bad_audience, no_customer, invalid.",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.accepted, m.rejected,
		m.replays, m.republished, m.produceDuration, m.dbWrite, m.catalogSize, m.authFailures} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("checkout: metrics already registered on this Registerer (one Service per Registerer, or wrap it with prometheus.WrapRegistererWith)")
			}
			return nil, err
		}
	}
	return m, nil
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real ResponseWriter.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Route labels of the HTTP metrics: the ServeMux patterns of the API's
// routes, as registered in New, label themselves; any other pattern (the
// method-not-allowed and not-found handlers) or none is routeOther.
const (
	routePlace = "POST /orders"
	routeGet   = "GET /orders/{id}"
	routeOther = "other"
)

var routeLabels = map[string]string{routePlace: routePlace, routeGet: routeGet}

// instrument counts and times every request served by mux. The route label
// is derived from the pattern the mux matched (it stores it in r.Pattern).
func (m *metrics) instrument(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		mux.ServeHTTP(rec, r)
		route, ok := routeLabels[r.Pattern]
		if !ok {
			route = routeOther
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodOptions:
		default:
			method = "other" // bounded cardinality
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}
