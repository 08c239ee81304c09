package checkout_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// serveHTTP serves e's handler on a real server, as system does: behind
// Guard, StopReadingBodies registered for Shutdown. What Guard answers
// itself is checked against the OpenAPI description too.
func (e *testEnv) serveHTTP() *httptest.Server {
	srv := httptest.NewUnstartedServer(apiContract.wrap(e.t, checkout.Guard(e.handler), e.pinned))
	srv.Config.MaxHeaderBytes = checkout.ServerMaxHeaderBytes
	srv.Config.RegisterOnShutdown(e.svc.StopReadingBodies)
	srv.Start()
	e.t.Cleanup(srv.Close)
	return srv
}

// rawRequest writes raw to a new connection to srv and returns the
// connection and a reader of its answers.
func rawRequest(t *testing.T, srv *httptest.Server, raw string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// readError reads one answer and returns its status and code, failing the
// test unless it is the API's JSON error.
func readError(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	var e order.ErrorResponse
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("answer %d Content-Type %q, want application/json", resp.StatusCode, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code == "" || e.Error == "" {
		t.Fatalf("answer %d is not {code, error}: %v %+v", resp.StatusCode, err, e)
	}
	return resp.StatusCode, e.Code
}

// A body that trickles in (or never completes its
// Content-Length) is answered 408 request_timeout after BodyTimeout.
func TestSlowBodyTimesOut(t *testing.T) {
	e := newEnv(t, withBodyTimeout(300*time.Millisecond))
	srv := e.serveHTTP()
	start := time.Now()
	_, br := rawRequest(t, srv, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"lines\"")
	status, code := readError(t, br)
	if status != http.StatusRequestTimeout || code != checkout.CodeRequestTimeout {
		t.Fatalf("got %d %s, want 408 request_timeout", status, code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("408 after %v, want about the 300ms BodyTimeout", d)
	}
}

// Shutdown does not wait for a body being read: it ends
// the read (408) and returns at once.
func TestShutdownDoesNotWaitForSlowBody(t *testing.T) {
	e := newEnv(t, withBodyTimeout(time.Minute))
	srv := e.serveHTTP()
	_, br := rawRequest(t, srv, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"lines\"")
	eventually(t, "the body read to start", func() bool { return e.svc.ActiveBodyReads() == 1 })
	got := make(chan [2]any, 1)
	go func() {
		s, c := readError(t, br)
		got <- [2]any{s, c}
	}()
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v with a slow body open, want well under the 1m BodyTimeout", d)
	}
	if a := <-got; a[0] != http.StatusRequestTimeout || a[1] != checkout.CodeRequestTimeout {
		t.Errorf("the slow request got %v %v, want 408 request_timeout", a[0], a[1])
	}
}

// What ServeMux would answer in HTML or plain text is the
// API's JSON: non-canonical paths are not redirected, CONNECT, a large
// header.
func TestServerAnswersJSON(t *testing.T) {
	e := newEnv(t)
	srv := e.serveHTTP()
	for _, c := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"dot-dot path", "GET /orders/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 404, checkout.CodeNotFound},
		{"double slash", "GET //orders HTTP/1.1\r\nHost: x\r\n\r\n", 404, checkout.CodeNotFound},
		{"dot segment", "POST /./orders HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 404, checkout.CodeNotFound},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405, checkout.CodeMethodNotAllowed},
		{"large header", "GET /orders/ord_1 HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", 431, checkout.CodeHeaderTooLarge},
		{"large header on POST", "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n{}", 431, checkout.CodeHeaderTooLarge},
		{"large header on an unknown path", "GET /nope HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", 431, checkout.CodeHeaderTooLarge},
		{"unknown path", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, checkout.CodeNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, br := rawRequest(t, srv, c.raw)
			status, code := readError(t, br)
			if status != c.status || code != c.code {
				t.Errorf("%s: got %d %s, want %d %s", c.name, status, code, c.status, c.code)
			}
		})
	}
}
