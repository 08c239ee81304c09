package checkout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// The contract: checkout.OpenAPI (openapi.json) is kept true by the tests of
// this package. Every testEnv's handler is wrapped by apiContract.wrap, so
// every request a test makes, through testEnv.serve or a real server on
// testEnv.handler, is checked after it is answered:
//
//   - The answer (status, documented headers, body) is valid for its
//     operation (kin-openapi's openapi3filter.ValidateResponse, statuses
//     included); an answer to a request that matches no operation must be
//     one of x-ordercast-unmatched.
//   - A request the description refuses (ValidateRequest: the
//     Idempotency-Key header, the Content-Type, the body's schema when the
//     handler read it whole) must be refused, 4xx; a request it allows must
//     not be answered unknown_field (the schema would be missing a member).
//
// TestMain then fails the package when a (status, code) pair the
// description lists was never answered, when the whole package ran on the
// embedded broker (with -run, -skip or a real cluster some tests do not
// run).
var apiContract = loadContract()

// contract is the loaded description and the answers seen.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// unmatched is x-ordercast-unmatched's responses.
	unmatched openapi3.Responses

	mu   sync.Mutex
	seen map[answerKey]bool
}

// answerKey is one documented answer: an operation ("POST /orders", or
// "unmatched"), a status and an error code ("" for a success).
type answerKey struct {
	op     string
	status int
	code   string
}

func (k answerKey) String() string {
	if k.code == "" {
		return fmt.Sprintf("%s %d", k.op, k.status)
	}
	return fmt.Sprintf("%s %d %s", k.op, k.status, k.code)
}

const opUnmatched = "unmatched"

func loadContract() *contract {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(checkout.OpenAPI)
	if err != nil {
		panic(fmt.Sprintf("openapi.json does not load: %v", err))
	}
	if !doc.IsOpenAPI31OrLater() {
		panic("openapi.json is not an OpenAPI 3.1 document")
	}
	if err := doc.Validate(ctx); err != nil {
		panic(fmt.Sprintf("openapi.json is not a valid OpenAPI document: %v", err))
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		panic(fmt.Sprintf("openapi.json: router: %v", err))
	}
	c := &contract{doc: doc, router: router, seen: map[answerKey]bool{}}
	// x-ordercast-unmatched holds responses the loader does not know of:
	// decode them as a Responses object, with the document's components
	// for their $refs.
	var ext struct {
		Unmatched struct {
			Responses json.RawMessage `json:"responses"`
		} `json:"x-ordercast-unmatched"`
	}
	if err := json.Unmarshal(checkout.OpenAPI, &ext); err != nil || len(ext.Unmatched.Responses) == 0 {
		panic(fmt.Sprintf("openapi.json: x-ordercast-unmatched.responses: %v", err))
	}
	wrapped := map[string]any{}
	_ = json.Unmarshal(checkout.OpenAPI, &wrapped)
	wrapped["paths"] = map[string]any{"/unmatched": map[string]any{"get": map[string]any{"responses": json.RawMessage(ext.Unmatched.Responses)}}}
	b, _ := json.Marshal(wrapped)
	udoc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		panic(fmt.Sprintf("openapi.json: x-ordercast-unmatched.responses: %v", err))
	}
	if err := udoc.Validate(ctx); err != nil {
		panic(fmt.Sprintf("openapi.json: x-ordercast-unmatched.responses: %v", err))
	}
	c.unmatched = *udoc.Paths.Find("/unmatched").Get.Responses
	return c
}

// documented lists every answer the description lists: each operation's
// responses, the error ones by each code of their code enum.
func (c *contract) documented() []answerKey {
	var out []answerKey
	add := func(op string, rs *openapi3.Responses) {
		for status, rr := range rs.Map() {
			n, err := strconv.Atoi(status)
			if err != nil {
				panic(fmt.Sprintf("openapi.json: %s: response %q is not a status", op, status))
			}
			codes := errorCodes(rr.Value)
			if len(codes) == 0 {
				out = append(out, answerKey{op, n, ""})
			}
			for _, code := range codes {
				out = append(out, answerKey{op, n, code})
			}
		}
	}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			add(method+" "+path, op.Responses)
		}
	}
	add(opUnmatched, &c.unmatched)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// errorCodes returns the code enum of an error response (allOf Error and
// {code: {enum}}), nil for another response.
func errorCodes(r *openapi3.Response) []string {
	mt := r.Content.Get("application/json")
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return nil
	}
	var codes []string
	for _, s := range mt.Schema.Value.AllOf {
		if p := s.Value.Properties["code"]; p != nil && p.Value != nil {
			for _, v := range p.Value.Enum {
				codes = append(codes, v.(string))
			}
		}
	}
	return codes
}

// wrap returns h checking every request and answer against the
// description; violations fail t.
//
// A pinned instance (an orderCreated writer version set, as during a
// rolling upgrade) refuses the members its version lacks with
// unknown_field, which the description (of the newest version) allows:
// for it that check is off.
func (c *contract) wrap(t *testing.T, h http.Handler, pinned bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := &teeBody{rc: r.Body}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = body
		}
		rec := &recordingWriter{ResponseWriter: w, header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status, rec.header = http.StatusOK, w.Header().Clone()
		}
		if err := c.check(r, body, rec, pinned); err != nil {
			t.Errorf("OpenAPI contract (openapi.json): %s %s: %v\nrequest body %q\nanswer %d %s", r.Method, r.URL.RequestURI(), err, clipBytes(body.buf.Bytes()), rec.status, clipBytes(rec.body.Bytes()))
		}
	})
}

func clipBytes(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// check validates one exchange and records its answer.
func (c *contract) check(r *http.Request, body *teeBody, rec *recordingWriter, pinned bool) error {
	ctx := context.Background()
	var code string
	if rec.status >= 400 && r.Method != http.MethodHead {
		var e struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(rec.body.Bytes(), &e); err != nil {
			return fmt.Errorf("error answer is not JSON: %v", err)
		}
		code = e.Code
	}
	// The router matches on a URL with a host; a test request may have
	// none.
	rr := r.Clone(ctx)
	if rr.URL.Host == "" {
		rr.URL.Scheme, rr.URL.Host = "http", "checkout.test"
	}
	route, params, err := c.router.FindRoute(rr)
	var rerr *routers.RouteError
	if err != nil && !errors.As(err, &rerr) {
		return fmt.Errorf("route: %w", err)
	}
	for _, v := range params {
		// kin-openapi's legacy router matches /orders to /orders/{id}
		// with an empty id; a path parameter is never empty.
		if v == "" {
			err = routers.ErrPathNotFound
		}
	}
	if err != nil {
		c.record(answerKey{opUnmatched, rec.status, code})
		resp := c.unmatched.Status(rec.status)
		if resp == nil {
			return fmt.Errorf("answer %d to a request that matches no operation: not in x-ordercast-unmatched", rec.status)
		}
		return validateUnmatched(ctx, c.doc, resp.Value, rec)
	}
	c.record(answerKey{r.Method + " " + route.Path, rec.status, code})

	in := &openapi3filter.RequestValidationInput{Request: rr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: false, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if body.complete() {
		rr.Body = io.NopCloser(bytes.NewReader(body.buf.Bytes()))
	} else {
		// Not read to its end (too large, too slow, or refused before
		// it was read): what the client sent is unknown.
		rr.Body = http.NoBody
		in.Options.ExcludeRequestBody = true
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	switch {
	case reqErr != nil && rec.status < 400:
		return fmt.Errorf("the description refuses this request (%v), but it was answered %d", reqErr, rec.status)
	case reqErr == nil && code == "unknown_field" && !pinned:
		return fmt.Errorf("the description allows this request, but it was answered %d unknown_field: a member is missing from the schema", rec.status)
	}

	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 rec.status,
		Header:                 rec.header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: false},
	}
	out.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// validateUnmatched checks an answer to an unmatched request against resp:
// its body's schema and its required headers.
func validateUnmatched(_ context.Context, doc *openapi3.T, resp *openapi3.Response, rec *recordingWriter) error {
	for name, h := range resp.Headers {
		if h.Value.Required && rec.header.Get(name) == "" {
			return fmt.Errorf("answer %d lacks its required header %s", rec.status, name)
		}
	}
	mt := resp.Content.Get("application/json")
	if mt == nil {
		return nil
	}
	if ct := rec.header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("answer %d has Content-Type %q, want application/json", rec.status, ct)
	}
	var v any
	if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
		return fmt.Errorf("answer %d body: %w", rec.status, err)
	}
	if err := doc.ValidateSchemaJSON(mt.Schema.Value, v); err != nil {
		return fmt.Errorf("answer %d body: %w", rec.status, err)
	}
	return nil
}

func (c *contract) record(k answerKey) {
	c.mu.Lock()
	c.seen[k] = true
	c.mu.Unlock()
}

// unseen returns the documented answers no test got.
func (c *contract) unseen() []answerKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []answerKey
	for _, k := range c.documented() {
		if !c.seen[k] {
			out = append(out, k)
		}
	}
	return out
}

// teeBody keeps what the handler reads of a request body.
type teeBody struct {
	rc  io.ReadCloser
	buf bytes.Buffer
	eof bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

// complete reports whether the body was read to its end (or there was
// none).
func (b *teeBody) complete() bool { return b.rc == nil || b.eof }

// recordingWriter records an answer as it is written. Unwrap keeps
// http.ResponseController working (checkout sets read deadlines through
// it).
type recordingWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestMain runs the package's tests, then fails it when a documented answer
// was never given (see apiContract), if every test ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && wholeRun() {
		if missing := apiContract.unseen(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "--- FAIL: OpenAPI coverage: %d answers documented in openapi.json were never given by a test of this package (add a test, or remove them from the description):\n", len(missing))
			for _, k := range missing {
				fmt.Fprintf(os.Stderr, "\t%s\n", k)
			}
			fmt.Println("FAIL")
			code = 1
		}
	}
	os.Exit(code)
}

// wholeRun reports whether every test of the package ran on the embedded
// broker: no -run or -skip, not -short, no real cluster (tests of faults
// skip there).
func wholeRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short() && !testkafka.Real()
}

// TestOpenAPIServed: GET /openapi.json answers the embedded description,
// the same bytes, and it lists what the tests check it against; another
// method is 405 with Allow.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/openapi.json", "")
	if r.status != http.StatusOK || !bytes.Equal(r.body, checkout.OpenAPI) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want 200 and the %d bytes of openapi.json", r.status, len(r.body), len(checkout.OpenAPI))
	}
	if r := e.do(http.MethodPost, "/openapi.json", "{}"); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /openapi.json: %d Allow %q, want 405 with Allow GET, HEAD", r.status, r.header.Get("Allow"))
	}
	docs := apiContract.documented()
	for _, want := range []answerKey{{"POST /orders", 202, ""}, {"POST /orders", 422, "unknown_stock_code"}, {"GET /orders/{id}", 404, "not_found"}} {
		if !slices.Contains(docs, want) {
			t.Errorf("documented answers lack %s: %v", want, docs)
		}
	}
	if !strings.HasPrefix(string(checkout.OpenAPI), "{\n  \"openapi\": \"3.1") {
		t.Errorf("openapi.json does not start with an OpenAPI 3.1 version")
	}
}
