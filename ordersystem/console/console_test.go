package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/processor"
)

const testToken = "0123456789abcdef-operator"

// hostile is a DLQ record whose every part tries to inject markup.
func hostile() *kgo.Record {
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	return &kgo.Record{Topic: "orders.dlq", Key: []byte(`<img src=x onerror=alert(1)>`),
		Value: []byte(`{"note":"<script>alert('payload')</script>"}`),
		Headers: []kgo.RecordHeader{
			h(processor.HeaderOriginalTopic, "orderCreated"), h(processor.HeaderOriginalPartition, "0"), h(processor.HeaderOriginalOffset, "7"),
			h(processor.HeaderOriginalTimestamp, "1700000000123"),
			h(processor.HeaderErrorClass, "invalid"), h(processor.HeaderErrorMessage, `<script>alert('message')</script>`),
			h("x-note", `"><script>alert('header')</script>`),
		}}
}

// serve starts a console over a cluster holding one hostile DLQ record.
func serve(t *testing.T, token string) *httptest.Server {
	t.Helper()
	brokers := testkafka.Cluster(t, map[string]int32{"orders.dlq": 1, "orderCreated": 1})
	testkafka.Produce(t, brokers, hostile())
	c, err := console.New(console.Config{Kafka: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Groups: []string{"orders"}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, cl *http.Client, u string) (int, http.Header, string) {
	t.Helper()
	resp, err := cl.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func post(t *testing.T, cl *http.Client, u string, form url.Values, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRecordContentsAreEscaped checks that a DLQ record's key, headers,
// error message and payload are shown as text on the DLQ page and the
// record page: no markup of theirs reaches the HTML, and every page carries
// the security headers.
func TestRecordContentsAreEscaped(t *testing.T) {
	testkafka.Parallel(t)
	srv := serve(t, "")
	for _, path := range []string{"/console/dlq/orders", "/console/dlq/orders/0/0"} {
		code, hdr, body := get(t, srv.Client(), srv.URL+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, "<script") || strings.Contains(body, "<img") {
			t.Errorf("GET %s: record markup reached the HTML:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(&#39;message&#39;)&lt;/script&gt;") {
			t.Errorf("GET %s: the error message is not shown escaped:\n%s", path, body)
		}
		csp := hdr.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", path, hdr.Get("X-Content-Type-Options"))
		}
	}
	_, _, body := get(t, srv.Client(), srv.URL+"/console/dlq/orders/0/0")
	for _, want := range []string{"&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;", "&lt;script&gt;alert(&#39;header&#39;)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;",
		"produced 2023-11-14"} { // the original record's time (1700000000123 ms)
		if !strings.Contains(body, want) {
			t.Errorf("record page lacks %s", want)
		}
	}
}

// TestReadOnlyWithoutToken checks that without a token no action is offered
// and every action is refused.
func TestReadOnlyWithoutToken(t *testing.T) {
	testkafka.Parallel(t)
	srv := serve(t, "")
	_, _, body := get(t, srv.Client(), srv.URL+"/console/dlq/orders")
	if strings.Contains(body, "/replay") || strings.Contains(body, `name="id"`) || strings.Contains(body, "/login") {
		t.Errorf("read-only DLQ page offers an action:\n%s", body)
	}
	for _, path := range []string{"/console/dlq/orders/replay", "/console/dlq/orders/purge", "/console/groups/orders/reset", "/console/login"} {
		if code, _ := post(t, srv.Client(), srv.URL+path, url.Values{"id": {"orders.dlq/0/0"}, "action": {"apply"}, "token": {testToken}}, ""); code != http.StatusForbidden {
			t.Errorf("POST %s without a token configured: %d; want 403", path, code)
		}
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestActionsNeedSessionAndCSRF checks the operator session: a wrong token
// is refused; with the session, an action without the CSRF token or from
// another origin is refused; with both, a dry run answers.
func TestActionsNeedSessionAndCSRF(t *testing.T) {
	testkafka.Parallel(t)
	srv := serve(t, testToken)
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	replay := srv.URL + "/console/dlq/orders/replay"
	dry := url.Values{"id": {"orders.dlq/0/0"}, "action": {"dryrun"}}
	if code, _ := post(t, cl, replay, dry, ""); code != http.StatusForbidden {
		t.Errorf("replay without a session: %d; want 403", code)
	}
	if code, _ := post(t, cl, srv.URL+"/console/login", url.Values{"token": {"wrong-token-0123456789"}}, ""); code != http.StatusForbidden {
		t.Errorf("login with a wrong token: %d; want 403", code)
	}
	if code, body := post(t, cl, srv.URL+"/console/login", url.Values{"token": {testToken}, "next": {"/console/dlq/orders"}}, ""); code != http.StatusOK || !strings.Contains(body, `id="replay"`) {
		t.Fatalf("login: %d; want 200 and the DLQ page with its replay button:\n%s", code, body)
	}
	u, _ := url.Parse(srv.URL + "/console/")
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "ordercast_console" && ck.Value == "" {
			t.Error("empty session cookie")
		}
	}
	_, _, page := get(t, cl, srv.URL+"/console/dlq/orders")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the DLQ page:\n%s", page)
	}
	if code, _ := post(t, cl, replay, dry, ""); code != http.StatusForbidden {
		t.Errorf("replay without the CSRF token: %d; want 403", code)
	}
	dry.Set("csrf", m[1])
	if code, _ := post(t, cl, replay, dry, "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("replay from another origin: %d; want 403", code)
	}
	code, body := post(t, cl, replay, dry, srv.URL)
	if code != http.StatusOK || !strings.Contains(body, "1 would be replayed") {
		t.Errorf("dry run with session and CSRF token: %d; want 200 and one record that would be replayed:\n%s", code, body)
	}
	if strings.Contains(body, `<span class="badge ok">replayed</span>`) {
		t.Error("a dry run marked the record replayed")
	}
}
