package processor

import (
	"context"
	"sync"
	"time"
)

// attemptCtx is the context of one handler attempt: the partition's context
// (values and cancellation on revoke or shutdown) plus the HandlerTimeout
// deadline. Unlike context.WithTimeout it arms a timer only when the handler
// asks for Done, so a handler that never blocks on its context costs no
// timer per record (a timer per record was the largest cost of the runtime
// itself with a fast handler). Err reports the deadline from the clock, so
// it holds whether Done was asked for or not.
type attemptCtx struct {
	context.Context // the partition's context
	deadline        time.Time

	mu         sync.Mutex
	done       chan struct{} // created by Done
	err        error
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

// Done returns a channel closed at the deadline or when the parent ends.
func (c *attemptCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err = c.errLocked(); c.err != nil {
		close(c.done)
		return c.done
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
	c.stopParent = context.AfterFunc(c.Context, func() { c.cancel(c.Context.Err()) })
	return c.done
}

// Err returns context.DeadlineExceeded after the deadline, the parent's
// error once it ended, and nil before.
func (c *attemptCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.done != nil {
		return c.err
	}
	return c.errLocked()
}

func (c *attemptCtx) errLocked() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *attemptCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// release ends the attempt: its timers stop and the context is cancelled,
// as context.WithTimeout's cancel function does.
func (c *attemptCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.stopParent()
	}
	if c.err == nil {
		c.err = context.Canceled
		if c.done != nil {
			close(c.done)
		}
	}
}
