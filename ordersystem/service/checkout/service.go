package checkout

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// Service is the checkout service. Create it with New; serve Handler. It is
// safe for concurrent use.
type Service struct {
	db       *store.DB
	serde    *schema.Serde
	producer *kgo.Client
	log      *slog.Logger
	cfg      Config
	metrics  *metrics
	handler  http.Handler

	catalog  atomic.Pointer[catalog]
	keys     keyLocks
	claims   batcher[*claimJob] // group commit of claims (batch.go)
	marks    batcher[*markJob]  // and of published marks
	dbHealth dbHealth
	bodies   bodyReads
	limits   *clientLimits

	// background counts produce completions followed after their request
	// answered 503 (see publish); Close waits for them.
	background sync.WaitGroup

	// now is time.Now; tests may replace it before serving.
	now func() time.Time
	// afterWrite, when set (tests only), runs after each successful write
	// of a batch (batch.go: write); an error it returns is that write's.
	afterWrite func() error
	// beforeInsert, when set (tests only), runs in a claim batch before
	// its INSERT: on SQLite after its SELECT, on PostgreSQL before the
	// statement that reads and inserts (readAndInsert).
	beforeInsert func()
}

// New returns a checkout Service: it checks cfg (ErrNoDB, ErrNoSerde,
// ErrNoProducer, or an error naming a negative limit), registers the
// metrics on cfg.Registerer (an error if they are already registered there)
// and loads the catalog table into memory (an error if the query fails; an
// empty catalog is only a warning). ctx bounds the catalog load.
//
// New does not check that the broker or the topic is reachable: a request
// finds out, and answers 503.
func New(ctx context.Context, cfg Config) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{
		db:       cfg.DB,
		serde:    cfg.Serde,
		producer: cfg.Producer,
		log:      cfg.Logger,
		cfg:      cfg,
		metrics:  m,
		now:      time.Now,
		limits:   newClientLimits(cfg.RateLimit, cfg.RateBurst),
	}
	runners := postgresRunners
	if cfg.DB.Dialect != store.Postgres {
		runners = sqliteRunners
	}
	s.claims = batcher[*claimJob]{max: cfg.MaxBatch, parallel: runners, run: s.runClaims}
	s.marks = batcher[*markJob]{max: cfg.MaxBatch, parallel: runners, run: s.runMarks}
	if err := s.ReloadCatalog(ctx); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc(routePlace, s.handlePlace)
	mux.HandleFunc("/orders", s.methodNotAllowed(http.MethodPost))
	mux.HandleFunc(routeGet, s.handleGet)
	mux.HandleFunc("/orders/{id}", s.methodNotAllowed("GET, HEAD"))
	mux.HandleFunc(routeOpenAPI, serveOpenAPI)
	mux.HandleFunc("/openapi.json", s.methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, reject(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such resource: %s %s", r.Method, r.URL.Path)))
	})
	s.handler = Guard(m.instrument(mux))
	return s, nil
}

// Handler returns the HTTP handler of the API (see the package doc). The
// same handler is returned every time; it is safe for concurrent use.
func (s *Service) Handler() http.Handler { return s.handler }

// Close waits until every produce that outlived its request's
// ProduceTimeout has completed and, if the broker acknowledged it, been
// marked published; or until ctx is done, returning ctx's error. The
// producer's own timeouts bound that wait (closing the producer client
// fails what is left). The HTTP server should be shut down first; Close
// does not stop the Handler from serving.
func (s *Service) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.background.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Accepted returns the number of orders checkout has accepted: the
// checkout_requests rows with status 'published' (requests with and without
// an Idempotency-Key alike, each order once). It is a read-only query, safe
// for concurrent use.
func (s *Service) Accepted(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkout_requests WHERE status = 'published'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("checkout: count accepted orders: %w", err)
	}
	return n, nil
}

func (s *Service) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		s.writeError(w, reject(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)))
	}
}

// writeError sends e as an order.ErrorResponse.
func (s *Service) writeError(w http.ResponseWriter, e *apiError) { writeError(w, e) }

func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if e.challenge != "" {
		w.Header().Set("WWW-Authenticate", e.challenge)
	}
	body := order.ErrorResponse{Code: e.code, Error: e.message}
	if e.orderID != "" {
		body.OrderID, body.StatusURL, body.IdempotencyKey = e.orderID, "/orders/"+e.orderID, e.key
		w.Header().Set("Location", body.StatusURL)
		w.Header().Set(HeaderIdempotencyKey, e.key)
	}
	writeJSON(w, e.status, body)
}

// marshal encodes v as the bodies of this API are: JSON and a newline.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // only our own plain structs are marshalled
		panic(fmt.Sprintf("checkout: marshal %T: %v", v, err))
	}
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, marshal(v))
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
