package checkout

import (
	"fmt"
	"net/http"
	pathpkg "path"
	"strings"
	"sync"
	"time"
)

// MaxHeaderBytes is the most header bytes (names, values, the request
// line) a request to the API may have; more is answered 431
// header_too_large in JSON. Servers should set http.Server.MaxHeaderBytes
// above it (ServerMaxHeaderBytes), so that net/http, which answers a
// larger header itself in plain text before any handler runs, only does so
// far above this limit.
const MaxHeaderBytes = 64 << 10

// ServerMaxHeaderBytes is the http.Server.MaxHeaderBytes to serve Guard
// with: net/http's default, 1 MiB, well above MaxHeaderBytes.
const ServerMaxHeaderBytes = http.DefaultMaxHeaderBytes

// Codes of Guard.
const (
	// CodeHeaderTooLarge: the request's header is over MaxHeaderBytes.
	// HTTP 431.
	CodeHeaderTooLarge = "header_too_large"
	// CodeRequestTimeout: the request body did not arrive within
	// Config.BodyTimeout, or the server is shutting down and stopped
	// reading it. HTTP 408; the connection is closed.
	CodeRequestTimeout = "request_timeout"
)

// Guard wraps the whole HTTP handler of a server that serves the API
// (checkout's Handler behind a ServeMux, with /metrics and the like) so that
// what net/http's ServeMux would answer in plain text or HTML is answered in
// the API's JSON instead: a path that is not in canonical form ("..", "//",
// "/./": ServeMux redirects it, 307 with an HTML body) is 404 not_found
// without a redirect; CONNECT (ServeMux answers "404 page not found") is
// 405 method_not_allowed; a header over MaxHeaderBytes is 431
// header_too_large. The other requests go to h unchanged. Safe for
// concurrent use.
func Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case r.Method == http.MethodConnect:
			w.Header().Set("Allow", "GET, HEAD, POST")
			writeError(w, reject(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method CONNECT is not allowed: this is not a proxy"))
		case headerSize(r) > MaxHeaderBytes:
			w.Header().Set("Connection", "close")
			writeError(w, reject(http.StatusRequestHeaderFieldsTooLarge, CodeHeaderTooLarge,
				fmt.Sprintf("the request header is %d bytes, more than %d", headerSize(r), MaxHeaderBytes)))
		case p == "" || p[0] != '/' || (p != "/" && pathpkg.Clean(p) != strings.TrimSuffix(p, "/")) || strings.Contains(p, "//"):
			writeError(w, reject(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such resource: %s %s (paths are not cleaned nor redirected)", r.Method, truncate(p, 100))))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// headerSize approximates the bytes of r's request line and header as
// sent.
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// bodyReads are the request bodies being read, so that StopReadingBodies
// can end them. Safe for concurrent use.
type bodyReads struct {
	mu       sync.Mutex
	stopping bool
	active   map[*http.ResponseController]struct{}
}

// start sets the read deadline of w's connection to timeout from now (at
// once when stopping) and returns the function to call with the read's
// error when the body is read, which clears it after a success. A ResponseWriter without deadlines (a test
// recorder) is read without one.
func (b *bodyReads) start(w http.ResponseWriter, timeout time.Duration) func(error) {
	rc := http.NewResponseController(w)
	b.mu.Lock()
	defer b.mu.Unlock()
	deadline := time.Now().Add(timeout)
	if b.stopping {
		deadline = time.Now()
	}
	if rc.SetReadDeadline(deadline) != nil {
		return func(error) {}
	}
	if b.active == nil {
		b.active = make(map[*http.ResponseController]struct{})
	}
	b.active[rc] = struct{}{}
	return func(err error) {
		b.mu.Lock()
		delete(b.active, rc)
		b.mu.Unlock()
		if err == nil {
			// Kept after a failed read: net/http then discards what is
			// left of the body, which must not block either.
			_ = rc.SetReadDeadline(time.Time{})
		}
	}
}

// StopReadingBodies ends every request body being read, and any read
// later, at once: those requests are answered 408 request_timeout and
// their connections closed, so that a slow (or stalled) body does not hold
// a graceful shutdown. Register it with http.Server.RegisterOnShutdown.
// Safe for concurrent use; it does not block.
func (s *Service) StopReadingBodies() {
	b := &s.bodies
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopping = true
	for rc := range b.active {
		_ = rc.SetReadDeadline(time.Now())
	}
}
