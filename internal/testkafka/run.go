package testkafka

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Runner is anything with a blocking Run that returns when its context ends,
// such as *processor.Processor or *processor.TxnProcessor.
type Runner interface {
	Run(ctx context.Context) error
}

// Run starts r.Run in a goroutine and returns a function that cancels it and
// waits for it to return (at most 30s), failing the test if Run returned an
// error or did not return. The stop function is idempotent and also runs at
// test cleanup.
func Run(t testing.TB, r Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
