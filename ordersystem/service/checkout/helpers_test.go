package checkout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/promtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

// Catalog rows every test environment is seeded with.
var testCatalog = []struct {
	code, desc string
	price      int64
}{
	{"85123A", "WHITE HANGING HEART T-LIGHT HOLDER", 2550},
	{"71053", "WHITE METAL LANTERN", 3390},
	{"84406B", "CREAM CUPID HEARTS COAT HANGER", 2750},
	{"22423", "REGENCY CAKESTAND 3 TIER", 18000},
	{"POST", "POSTAGE (a fee code: not orderable)", 18000},
	{"FREE", "free sample", 0},
	{"HUGE", "priced so that two of them overflow int64", 5_000_000_000_000_000_000},
}

// orderCreatedPartitions is the partition count of the test environments'
// orderCreated.
const orderCreatedPartitions = 3

// testEnv is a checkout Service over a migrated database, a broker (topic
// orderCreated with 3 partitions: the embedded kfake, or the real cluster of
// ORDERCAST_TEST_BROKERS, see internal/testkafka) and an in-memory registry.
type testEnv struct {
	t       *testing.T
	db      *store.DB
	brokers []string
	// cluster is the embedded broker, for faults and controls; nil on a
	// real cluster (tests using it call testkafka.SkipIfReal).
	cluster  *kfake.Cluster
	producer *kgo.Client
	serde    *schema.Serde
	registry *sr.Client // the in-memory registry the Serde registered with
	reg      *prometheus.Registry
	svc      *checkout.Service
	// handler is svc's Handler checked against the OpenAPI description
	// (apiContract); pinned says its Serde pins schema versions.
	handler http.Handler
	pinned  bool
}

// envSettings is what envOpts change: the Service's Config and the options
// of its Serde.
type envSettings struct {
	cfg       checkout.Config
	serdeOpts []schema.Opt
}

type envOpt func(*envSettings)

func withProduceTimeout(d time.Duration) envOpt {
	return func(s *envSettings) { s.cfg.ProduceTimeout = d }
}

func withBodyTimeout(d time.Duration) envOpt { return func(s *envSettings) { s.cfg.BodyTimeout = d } }

func withDBTimeout(d time.Duration) envOpt { return func(s *envSettings) { s.cfg.DBTimeout = d } }

func withMaxBody(n int64) envOpt { return func(s *envSettings) { s.cfg.MaxBodyBytes = n } }

// withSerde adds options to the Serde of the environment (and of its
// instances), such as schema.WithWriterVersion.
func withSerde(opts ...schema.Opt) envOpt {
	return func(s *envSettings) { s.serdeOpts = append(s.serdeOpts, opts...) }
}

// pinned reports whether opts pin the Serde's schema versions (withSerde).
func pinned(opts []envOpt) bool {
	var set envSettings
	for _, o := range opts {
		o(&set)
	}
	return len(set.serdeOpts) > 0
}

// newEnv builds a test environment on a fresh SQLite database.
func newEnv(t *testing.T, opts ...envOpt) *testEnv {
	t.Helper()
	return newEnvOn(t, storetest.SQLite(t), opts...)
}

// newEnvOn builds a test environment on db (migrated, empty).
func newEnvOn(t *testing.T, db *store.DB, opts ...envOpt) *testEnv {
	t.Helper()
	ctx := testCtx(t)
	for _, p := range testCatalog {
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, ?, ?)`),
			p.code, p.desc, p.price); err != nil {
			t.Fatalf("seed catalog: %v", err)
		}
	}
	topics := map[string]int32{order.TopicOrderCreated: orderCreatedPartitions}
	var cluster *kfake.Cluster
	var brokers []string
	if testkafka.Real() {
		brokers = testkafka.Cluster(t, topics)
	} else {
		cluster, brokers = testkafka.Fake(t, topics)
	}
	producer, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()), // the default for an idempotent producer; said for the reader
		// Retry quickly after a fault is removed: kgo retries a failed
		// produce after a metadata refresh, at most every MetadataMinAge
		// (5s by default).
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
		kgo.MetadataMinAge(20*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	t.Cleanup(producer.Close)
	registry := srfake.New()
	t.Cleanup(registry.Close)
	rcl, err := sr.NewClient(sr.URLs(registry.URL()))
	if err != nil {
		t.Fatalf("registry client: %v", err)
	}
	e := &testEnv{t: t, db: db, brokers: brokers, cluster: cluster, producer: producer, registry: rcl}
	e.serde, e.reg, e.svc = e.newService(opts...)
	e.pinned = pinned(opts)
	e.handler = apiContract.wrap(t, e.svc.Handler(), e.pinned)
	return e
}

// instance returns another checkout Service on e's database, broker and
// registry, with its own Serde and metrics changed by opts: a second
// instance of the service, such as one pinned to an older schema version.
func (e *testEnv) instance(opts ...envOpt) *testEnv {
	e.t.Helper()
	o := *e
	o.serde, o.reg, o.svc = e.newService(opts...)
	o.pinned = pinned(opts)
	o.handler = apiContract.wrap(e.t, o.svc.Handler(), o.pinned)
	return &o
}

func (e *testEnv) newService(opts ...envOpt) (*schema.Serde, *prometheus.Registry, *checkout.Service) {
	t := e.t
	t.Helper()
	ctx := testCtx(t)
	reg := prometheus.NewRegistry()
	set := envSettings{cfg: checkout.Config{DB: e.db, Producer: e.producer, Registerer: reg, ProduceTimeout: 5 * time.Second}}
	for _, o := range opts {
		o(&set)
	}
	serde, err := schema.New(ctx, e.registry, set.serdeOpts...)
	if err != nil {
		t.Fatalf("serde: %v", err)
	}
	set.cfg.Serde = serde
	svc, err := checkout.New(ctx, set.cfg)
	if err != nil {
		t.Fatalf("checkout.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("checkout Close: %v", err)
		}
	})
	return serde, reg, svc
}

// testCtx is a context bounded well under the package's time budget.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// response is an answer of the handler.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var e order.ErrorResponse
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not an ErrorResponse: %v", r.body, err)
	}
	if e.Code == "" || e.Error == "" {
		t.Fatalf("error body %q lacks code or error", r.body)
	}
	return e.Code
}

func (r response) accepted(t *testing.T) order.PlaceOrderResponse {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d, want 202; body %s", r.status, r.body)
	}
	var ok order.PlaceOrderResponse
	if err := json.Unmarshal(r.body, &ok); err != nil {
		t.Fatalf("202 body %q: %v", r.body, err)
	}
	if ok.OrderID == "" || ok.Status != "accepted" {
		t.Fatalf("202 body %q: want an order id and status accepted", r.body)
	}
	return ok
}

// do sends a request to the handler; header pairs are name, value.
func (e *testEnv) do(method, path, body string, header ...string) response {
	e.t.Helper()
	req := httptest.NewRequestWithContext(testCtx(e.t), method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return e.serve(req)
}

// doCT posts body to /orders with Content-Type ct ("" for none).
func (e *testEnv) doCT(ct, body string, header ...string) response {
	e.t.Helper()
	req := httptest.NewRequestWithContext(testCtx(e.t), http.MethodPost, "/orders", strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return e.serve(req)
}

func (e *testEnv) serve(req *http.Request) response {
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q, want application/json", req.Method, req.URL.Path, ct)
	}
	return response{status: rec.Code, header: rec.Header(), body: bytes.Clone(rec.Body.Bytes())}
}

func (e *testEnv) post(body string, header ...string) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/orders", body, header...)
}

// topicCount is the number of records on orderCreated (sum of its
// partitions' end offsets). A retriable error (a broker whose metadata or
// replica manager lags behind the controller: UNKNOWN_TOPIC_OR_PARTITION,
// NOT_LEADER_OR_FOLLOWER) is asked again until a deadline; an answer
// missing a partition is one too, never a smaller sum.
func (e *testEnv) topicCount() int64 {
	e.t.Helper()
	adm := kadm.NewClient(e.producer)
	ctx, cancel := context.WithTimeout(testCtx(e.t), 10*time.Second)
	defer cancel()
	for {
		n, err := e.endOffsetsSum(ctx, adm)
		if err == nil {
			return n
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			e.t.Fatalf("end offsets of %s: %v", order.TopicOrderCreated, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // poll interval, not synchronisation
		}
	}
}

// endOffsetsSum sums orderCreated's end offsets, or says why it cannot.
func (e *testEnv) endOffsetsSum(ctx context.Context, adm *kadm.Client) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, order.TopicOrderCreated)
	if err != nil {
		return 0, err
	}
	var n int64
	var parts int
	for _, o := range ends[order.TopicOrderCreated] {
		if o.Err != nil {
			return 0, fmt.Errorf("partition %d: %w", o.Partition, o.Err)
		}
		n += o.Offset
		parts++
	}
	if parts != orderCreatedPartitions {
		return 0, fmt.Errorf("%d partitions answered of %d: %w", parts, orderCreatedPartitions, kerr.UnknownTopicOrPartition)
	}
	return n, nil
}

// consumed is one record of orderCreated, decoded.
type consumed struct {
	key string
	ev  order.OrderCreated
}

// consume reads orderCreated from the start until it has n records (polling
// with a deadline) and decodes them.
func (e *testEnv) consume(n int) []consumed {
	e.t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.brokers...),
		kgo.ConsumeTopics(order.TopicOrderCreated),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		e.t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(testCtx(e.t), 10*time.Second)
	defer cancel()
	var out []consumed
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("consumed %d records of orderCreated before the deadline, want %d", len(out), n)
		}
		fs.EachError(func(t string, p int32, err error) { e.t.Fatalf("fetch %s/%d: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			var c consumed
			c.key = string(r.Key)
			if _, err := e.serde.Decode(order.TopicOrderCreated, r.Value, &c.ev); err != nil {
				e.t.Fatalf("decode record at %d/%d: %v", r.Partition, r.Offset, err)
			}
			out = append(out, c)
		})
	}
	return out
}

// requestRow reads a checkout_requests row's status and order id.
func (e *testEnv) requestRow(key string) (status, orderID string) {
	e.t.Helper()
	err := e.db.QueryRowContext(testCtx(e.t), e.db.Rebind(`SELECT status, order_id FROM checkout_requests WHERE idempotency_key = ?`), key).
		Scan(&status, &orderID)
	if err != nil {
		e.t.Fatalf("read checkout request %q: %v", key, err)
	}
	return status, orderID
}

func (e *testEnv) accepted() int {
	e.t.Helper()
	n, err := e.svc.Accepted(testCtx(e.t))
	if err != nil {
		e.t.Fatalf("Accepted: %v", err)
	}
	return n
}

// metric returns the value of a counter or gauge (a histogram's sample
// count) with the given labels, summed over matching series (0 if absent).
func (e *testEnv) metric(name string, labels ...string) float64 {
	e.t.Helper()
	return promtest.Sum(e.t, e.reg, name, labels...)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-time.After(5 * time.Millisecond): // poll interval, not synchronisation
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		}
	}
}
