package system

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// drainIdle is how long a connection may stay idle during a drain before
// drainServer closes it: a client that keeps sending gets its next answer
// with "Connection: close" well within it; one that sends nothing (an idle
// keep-alive connection in a client's pool) does not hold the shutdown
// for longer.
const drainIdle = time.Second

// drainPoll is how often a drain looks at the connections it tracks.
const drainPoll = 10 * time.Millisecond

// drainServer serves an http.Server on a listener and shuts it down without
// resetting a request: http.Server.Shutdown alone closes idle keep-alive
// connections at once, so a request a client has just sent on one (in the
// socket, not yet read) gets a connection reset instead of an answer (issue
// 13: about 1 in 1,500 requests during SIGTERM). RFC 9112, section 9.6: a
// server that means to close a persistent connection sends "Connection:
// close" on its last response and closes after it.
type drainServer struct {
	srv *http.Server
	ln  net.Listener
	// onDrain runs once drainIdle into a drain (checkout's
	// StopReadingBodies: a slow body does not hold the drain).
	onDrain []func()

	draining atomic.Bool
	mu       sync.Mutex
	conns    map[net.Conn]connInfo
	closed   bool // the listener, by Shutdown
	lnOnce   sync.Once
	lnErr    error
}

// connInfo is a tracked connection's last state and since when.
type connInfo struct {
	state http.ConnState
	since time.Time
}

// newDrainServer wraps srv (its Handler set) to serve on ln: it installs
// srv.ConnState (srv must not have one) and wraps srv.Handler so that,
// once Shutdown began, every response says "Connection: close".
func newDrainServer(srv *http.Server, ln net.Listener, onDrain ...func()) *drainServer {
	d := &drainServer{srv: srv, ln: ln, onDrain: onDrain, conns: make(map[net.Conn]connInfo)}
	srv.ConnState = d.track
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() {
			// net/http closes the connection after a response with
			// this header.
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
	return d
}

func (d *drainServer) track(c net.Conn, st http.ConnState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(d.conns, c)
	default:
		d.conns[c] = connInfo{state: st, since: time.Now()}
	}
}

// Serve serves until Shutdown; it returns nil once Shutdown closed the
// listener, else Serve's error.
func (d *drainServer) Serve() error {
	err := d.srv.Serve(onceCloseListener{d})
	if d.lnClosed() {
		return nil
	}
	return err
}

func (d *drainServer) lnClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

type onceCloseListener struct{ d *drainServer }

func (l onceCloseListener) Accept() (net.Conn, error) { return l.d.ln.Accept() }
func (l onceCloseListener) Addr() net.Addr            { return l.d.ln.Addr() }
func (l onceCloseListener) Close() error {
	l.d.lnOnce.Do(func() {
		l.d.lnErr = l.d.ln.Close()
		l.d.mu.Lock()
		l.d.closed = true
		l.d.mu.Unlock()
	})
	return l.d.lnErr
}

// Shutdown drains and stops the server, blocking until every connection
// is closed or ctx ends:
//
//  1. It closes the listener (no new connection is accepted; a client
//     dialling gets "connection refused", which says nothing was sent)
//     and answers every request from then on with "Connection: close",
//     so a connection closes right after its next answer.
//  2. It waits until every tracked connection (http.Server.ConnState) has
//     closed. A connection idle for drainIdle during the drain (a
//     client's pool keeping it without sending) is closed then; after
//     drainIdle the onDrain functions run (request bodies still being
//     read are ended).
//  3. It calls http.Server.Shutdown, which has nothing left to close but
//     connections ctx's end left behind; if ctx ends first, Close closes
//     them.
//
// A request read by the server is answered, unless ctx ends before its
// handler does. The one request that can still see a reset is one sent
// on a connection idle for drainIdle at the instant it is closed, the
// same race as the end of any keep-alive timeout (RFC 9112 section 9.3.1
// lets clients retry it). It returns ctx's error if ctx ended before the
// connections closed.
func (d *drainServer) Shutdown(ctx context.Context) error {
	// The listener first: a client that dials after an answer saying
	// "Connection: close" is refused, not queued in the accept backlog
	// and reset when the listener closes.
	_ = onceCloseListener{d}.Close()
	d.draining.Store(true)
	start := time.Now()
	ranOnDrain := false
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		now := time.Now()
		if !ranOnDrain && now.Sub(start) >= drainIdle {
			ranOnDrain = true
			for _, f := range d.onDrain {
				f()
			}
		}
		if d.closeIdle(start, now) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			_ = d.srv.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := d.srv.Shutdown(ctx); err != nil {
		_ = d.srv.Close()
		if !errors.Is(err, net.ErrClosed) {
			return err
		}
	}
	return nil
}

// closeIdle closes the tracked connections idle (or new, without a
// request yet) for drainIdle, counted from the later of their last
// change and the drain's start, and returns how many connections remain
// open.
func (d *drainServer) closeIdle(start, now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, ci := range d.conns {
		if ci.state != http.StateIdle && ci.state != http.StateNew {
			continue
		}
		since := ci.since
		if since.Before(start) {
			since = start
		}
		if now.Sub(since) >= drainIdle {
			_ = c.Close()
			delete(d.conns, c) // StateClosed follows
		}
	}
	return len(d.conns)
}
