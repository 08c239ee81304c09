package checkout

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// Limits of POST /orders.
const (
	// DefaultMaxBodyBytes is the default Config.MaxBodyBytes: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultProduceTimeout is the default Config.ProduceTimeout.
	DefaultProduceTimeout = 10 * time.Second
	// DefaultBodyTimeout is the default Config.BodyTimeout.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultDBTimeout is the default Config.DBTimeout.
	DefaultDBTimeout = 5 * time.Second
	// MaxLines is the most lines one order may have (422 too_many_lines
	// above it).
	MaxLines = 5_000
	// MaxQuantity is the largest quantity of one line (422 bad_quantity
	// above it, and at or below 0).
	MaxQuantity = 1_000_000
	// MaxCustomerIDLen is the longest customer id accepted; a customer id
	// is 1 to MaxCustomerIDLen characters of [A-Za-z0-9_-].
	MaxCustomerIDLen = 64
	// MaxChannelLen is the longest channel accepted; a channel is 1 to
	// MaxChannelLen characters of [a-z0-9_-] starting with a letter
	// (order.ValidChannel, the rule the consumers check too).
	MaxChannelLen = order.MaxChannelLen
	// MaxCountryLen is the longest country accepted, in characters (422
	// bad_country above it).
	MaxCountryLen = 64
	// MaxReferenceLen is the longest reference accepted, in characters
	// (422 bad_reference above it).
	MaxReferenceLen = 128
	// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted, in
	// bytes (keys are printable ASCII).
	MaxIdempotencyKeyLen = 200
	// MaxJSONDepth is the deepest nesting of a POST /orders body: 32 levels
	// (an order needs 3: the body, lines, a line); a deeper one is 400
	// too_deep, refused before the rest of the body is read
	// (internal/jsonlimit).
	MaxJSONDepth = jsonlimit.DefaultMaxDepth
)

// Config configures a Service. DB, Serde and Producer are required; every
// other field has a default for its zero value.
type Config struct {
	// DB is the database holding the catalog, checkout_requests and the
	// tables GET /orders/{id} reads (orders, order_status, notifications).
	// It must be migrated (store.Migrate). Required.
	DB *store.DB

	// Serde encodes the orderCreated event (Confluent wire-format Avro) and
	// decodes stored payloads. Required.
	Serde *schema.Serde

	// Producer publishes the orderCreated events. The caller owns it and
	// configures it for durability: idempotent (kgo's default) with
	// acks=all (kgo.RequiredAcks(kgo.AllISRAcks()), also kgo's default), so
	// that "acknowledged" means written to every in-sync replica. It must
	// not be transactional. Required.
	Producer *kgo.Client

	// Logger receives the service's logs (quiet: errors and warnings,
	// debug for each acceptance). Nil discards them.
	Logger *slog.Logger

	// Registerer registers the service's Prometheus metrics (see
	// metrics.go). Nil means the metrics are kept but not registered.
	// Registering on a Registerer that already has them is an error from
	// New.
	Registerer prometheus.Registerer

	// ProduceTimeout bounds how long POST /orders waits for the broker to
	// acknowledge the orderCreated event before answering 503
	// broker_unavailable; it also bounds how long a request waits for
	// another in-process request with the same Idempotency-Key. Closest
	// Kafka setting: delivery.timeout.ms, but per request and without
	// failing the record when the producer cannot safely do so. Default
	// DefaultProduceTimeout (10s); zero means the default; negative is an
	// error.
	ProduceTimeout time.Duration

	// BodyTimeout bounds how long POST /orders waits for its whole body
	// once the handler runs (a read deadline on the connection, through
	// http.ResponseController; the header is the server's
	// ReadHeaderTimeout); past it the answer is 408 request_timeout and the
	// connection is closed. Default DefaultBodyTimeout (10s); zero means
	// the default; negative is an error.
	BodyTimeout time.Duration

	// DBTimeout bounds each request's database work: recording a POST
	// (the checkout_requests transaction, its retries and the wait for
	// SQLite's write lock included) and reading a GET. Past it the answer
	// is 503 database_unavailable and Ready reports the database until a
	// later transaction succeeds. Default DefaultDBTimeout (5s); zero means
	// the default; negative is an error.
	DBTimeout time.Duration

	// MaxBodyBytes is the largest POST /orders body accepted, in bytes;
	// a larger one is answered 413 body_too_large. Default
	// DefaultMaxBodyBytes (1 MiB); zero means the default; negative is an
	// error.
	MaxBodyBytes int64

	// Auth verifies the bearer tokens of requests (Authorization: Bearer
	// <JWT>, RFC 6750): the token's customer is the order's customer, and
	// GET /orders/{id} of a customer's order needs that customer's token.
	// An order naming a customer without a token is 401; a token for
	// another customer than the body's customerId is 403
	// customer_mismatch; a guest order (no customerId) needs no token
	// unless AuthRequired. Nil: no authentication, anyone may order in any
	// customer's name and read any order (--auth none).
	Auth *authn.Verifier

	// AuthRequired makes every request need a valid token (no guest
	// orders, no anonymous GET). Requires Auth.
	AuthRequired bool

	// RateLimit is how many requests per second one client may make to
	// the API (POST and GET alike), a client being the token's customer,
	// else the peer's IP address (X-Forwarded-For is not trusted); beyond
	// its burst a request is answered 429 rate_limited with Retry-After.
	// A token bucket per client (golang.org/x/time/rate). Zero: no limit;
	// negative or NaN is an error.
	RateLimit float64

	// RateBurst is the bucket size of RateLimit: how many requests a
	// client may make at once. Default max(1, 2 x RateLimit); negative is
	// an error.
	RateBurst int

	// MaxBatch is the most claims of concurrent requests (their
	// Idempotency-Key rows) written together in one batch, and the most
	// published marks (group commit: see the package doc). Default
	// DefaultMaxBatch (64); 1 writes each request alone; negative or over
	// MaxMaxBatch is an error (a batch is one statement, and PostgreSQL's
	// extended protocol takes at most 65,535 parameters: a claim takes up
	// to 8).
	MaxBatch int
}

// withDefaults returns c with its defaults filled in, or an error naming the
// first invalid field.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.DB == nil:
		return c, ErrNoDB
	case c.Serde == nil:
		return c, ErrNoSerde
	case c.Producer == nil:
		return c, ErrNoProducer
	case c.ProduceTimeout < 0:
		return c, fmt.Errorf("checkout: Config.ProduceTimeout is %v, want >= 0 (0 means %v)", c.ProduceTimeout, DefaultProduceTimeout)
	case c.BodyTimeout < 0:
		return c, fmt.Errorf("checkout: Config.BodyTimeout is %v, want >= 0 (0 means %v)", c.BodyTimeout, DefaultBodyTimeout)
	case c.DBTimeout < 0:
		return c, fmt.Errorf("checkout: Config.DBTimeout is %v, want >= 0 (0 means %v)", c.DBTimeout, DefaultDBTimeout)
	case c.MaxBodyBytes < 0:
		return c, fmt.Errorf("checkout: Config.MaxBodyBytes is %d, want >= 0 (0 means %d)", c.MaxBodyBytes, DefaultMaxBodyBytes)
	case c.AuthRequired && c.Auth == nil:
		return c, errors.New("checkout: Config.AuthRequired needs Config.Auth (a token verifier)")
	case !(c.RateLimit >= 0) || math.IsInf(c.RateLimit, 0):
		return c, fmt.Errorf("checkout: Config.RateLimit is %v, want >= 0 requests per second (0: no limit)", c.RateLimit)
	case c.MaxBatch < 0 || c.MaxBatch > MaxMaxBatch:
		return c, fmt.Errorf("checkout: Config.MaxBatch is %d, want 0 to %d (0 means %d)", c.MaxBatch, MaxMaxBatch, DefaultMaxBatch)
	case c.RateBurst < 0:
		return c, fmt.Errorf("checkout: Config.RateBurst is %d, want >= 0 (0: twice RateLimit)", c.RateBurst)
	}
	if c.RateBurst == 0 {
		c.RateBurst = max(1, int(math.Ceil(2*c.RateLimit)))
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = DefaultProduceTimeout
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = DefaultDBTimeout
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return c, nil
}
