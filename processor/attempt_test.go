package processor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAttemptCtx: the lazy attempt context behaves like context.WithTimeout
// whether or not Done is asked for before the deadline.
func TestAttemptCtx(t *testing.T) {
	t.Run("deadline via Done", func(t *testing.T) {
		c := newAttemptCtx(context.Background(), 20*time.Millisecond)
		defer c.release()
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed at the deadline")
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err %v", c.Err())
		}
	})
	t.Run("deadline via Err only", func(t *testing.T) {
		c := newAttemptCtx(context.Background(), time.Millisecond)
		defer c.release()
		deadline, ok := c.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		for time.Now().Before(deadline) {
			if c.Err() != nil {
				t.Fatal("Err before the deadline")
			}
			time.Sleep(100 * time.Microsecond)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err %v", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed after the deadline")
		}
	})
	t.Run("parent cancelled", func(t *testing.T) {
		type key struct{}
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		c := newAttemptCtx(parent, time.Hour)
		defer c.release()
		done := c.Done()
		derived, stop := context.WithCancel(c)
		defer stop()
		cancel()
		for _, ch := range []<-chan struct{}{done, derived.Done()} {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal("not cancelled with the parent")
			}
		}
		if !errors.Is(c.Err(), context.Canceled) || c.Value(key{}) != "v" {
			t.Fatalf("Err %v, value %v", c.Err(), c.Value(key{}))
		}
	})
	t.Run("release cancels", func(t *testing.T) {
		c := newAttemptCtx(context.Background(), time.Hour)
		done := c.Done()
		c.release()
		select {
		case <-done:
		default:
			t.Fatal("release did not close Done")
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err %v", c.Err())
		}
	})
	t.Run("release before Done", func(t *testing.T) {
		// The common case: the handler never asked for Done and kept the
		// context past its return.
		c := newAttemptCtx(context.Background(), time.Hour)
		if c.Err() != nil {
			t.Fatalf("Err %v before release", c.Err())
		}
		c.release()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err %v after release", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done asked for after release is not closed")
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err %v after release and Done", c.Err())
		}
	})
	t.Run("Done racing release", func(t *testing.T) {
		// Done from several goroutines while release runs: every caller
		// gets the one channel, closed, and Err says Canceled (run with
		// -race).
		for range 200 {
			c := newAttemptCtx(context.Background(), time.Hour)
			chans := make(chan (<-chan struct{}), 3)
			for range 3 {
				go func() { chans <- c.Done() }()
			}
			c.release()
			var first <-chan struct{}
			for range 3 {
				ch := <-chans
				if first == nil {
					first = ch
				} else if ch != first {
					t.Fatal("Done returned two channels")
				}
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
					t.Fatal("Done not closed after release")
				}
			}
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("Err %v", c.Err())
			}
		}
	})
}
