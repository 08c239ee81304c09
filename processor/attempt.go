package processor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attemptCtx is the context of one handler attempt: the partition's context
// (values and cancellation on revoke or shutdown) plus the HandlerTimeout
// deadline. Unlike context.WithTimeout it arms a timer only when the handler
// asks for Done, so a handler that never blocks on its context costs no
// timer per record (a timer per record would be the largest cost of the
// runtime itself with a fast handler). Err reports the deadline from the clock, so
// it holds whether Done was asked for or not.
type attemptCtx struct {
	context.Context // the partition's context
	deadline        time.Time
	released        atomic.Bool                 // release was called
	wait            atomic.Pointer[attemptWait] // created by the first Done
}

// attemptWait is what an attemptCtx needs once Done was asked for: the
// channel, the error it was closed with, and the timer and parent hook that
// close it. Kept out of attemptCtx, which is allocated for every record
// (most handlers never call Done), so that it stays small.
type attemptWait struct {
	mu         sync.Mutex
	done       chan struct{}
	err        error // set when done is closed
	timer      *time.Timer
	stopParent func() bool
}

func newAttemptCtx(parent context.Context, timeout time.Duration) *attemptCtx {
	c := new(attemptCtx)
	c.init(parent, time.Now(), timeout)
	return c
}

// init prepares a zero attemptCtx for an attempt started at start.
func (c *attemptCtx) init(parent context.Context, start time.Time, timeout time.Duration) {
	c.Context, c.deadline = parent, start.Add(timeout)
}

// Deadline returns the attempt's deadline, or the parent's if earlier.
func (c *attemptCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done returns a channel closed at the deadline, when the parent ends or at
// release, whichever comes first.
func (c *attemptCtx) Done() <-chan struct{} {
	if w := c.wait.Load(); w != nil {
		return w.done
	}
	w := &attemptWait{done: make(chan struct{})}
	if !c.wait.CompareAndSwap(nil, w) {
		return c.wait.Load().done // another goroutine's Done won
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		// release saw w first and closed it.
	case c.released.Load():
		// release ran before w was published (it stores released
		// before it looks for w).
		w.closeLocked(context.Canceled)
	default:
		if err := c.errNow(); err != nil {
			w.closeLocked(err)
			break
		}
		w.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(w, context.DeadlineExceeded) })
		w.stopParent = context.AfterFunc(c.Context, func() { c.cancel(w, c.Context.Err()) })
	}
	return w.done
}

// Err returns context.DeadlineExceeded after the deadline, the parent's
// error once it ended, context.Canceled after release, and nil before.
func (c *attemptCtx) Err() error {
	if w := c.wait.Load(); w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	}
	if c.released.Load() {
		return context.Canceled
	}
	return c.errNow()
}

func (c *attemptCtx) errNow() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *attemptCtx) cancel(w *attemptWait, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.closeLocked(err)
	}
}

// closeLocked closes w.done with err. w.mu held, w.err nil.
func (w *attemptWait) closeLocked(err error) {
	w.err = err
	close(w.done)
}

// release ends the attempt: its timers stop and the context is cancelled,
// as context.WithTimeout's cancel function does. Without Done asked for, it
// is one atomic store: no lock.
func (c *attemptCtx) release() {
	c.released.Store(true)
	w := c.wait.Load()
	if w == nil {
		return // a later Done sees released
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.stopParent()
	}
	if w.err == nil {
		w.closeLocked(context.Canceled)
	}
}
