package processor

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// TestHealthCountsHandlersPastDrainTimeout: a handler that ignores its
// context keeps running after the shutdown's release gave up on it
// (DrainTimeout), and Run waits for it; all that time Health counts it in
// InFlight (it showed 0 once the release had dropped the partition's
// records), and once it returns, nothing.
func TestHealthCountsHandlersPastDrainTimeout(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 1})
	started := make(chan struct{}, 1)
	unblock := make(chan struct{})
	handler := func(context.Context, *kgo.Record) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-unblock // ignores its context
		return nil
	}
	var releasedAt atomic.Bool
	hs := hooks{partitions: func(event string, _ map[string][]int32) {
		if event == "release-end:shutdown" {
			releasedAt.Store(true)
		}
	}}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), WithHandler(handler),
		SessionTimeout(testkafka.MinSessionTimeout*5), DrainTimeout(100*time.Millisecond), withHooks(hs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	unblocked := false
	defer func() {
		if !unblocked {
			close(unblock)
			<-done
		}
	}()
	produce(t, addrs, &kgo.Record{Topic: "in", Value: val(0)})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	if h := p.Health(); h.InFlight != 1 {
		t.Fatalf("while the handler runs: %+v, want InFlight 1", h)
	}
	cancel()
	waitFor(t, 20*time.Second, "the shutdown's release to give up on the handler", releasedAt.Load)
	if h := p.Health(); h.InFlight != 1 || len(h.Partitions) != 0 {
		t.Fatalf("the partition released, its handler still running: %+v, want no partition and InFlight 1", h)
	}
	close(unblock)
	unblocked = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the handler did")
	}
	if h := p.Health(); h.InFlight != 0 {
		t.Fatalf("after Run returned: %+v, want InFlight 0", h)
	}
}

// TestShutdownLogsPartitionsReleasedOnce: a shutdown says "partitions
// released" once, for the shutdown's release; the client's leave that
// follows revokes the same partitions and has nothing left to release (it
// logged the line a second time, why=revoked).
func TestShutdownLogsPartitionsReleasedOnce(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"in": 2})
	logs := &levelLog{info: true}
	p, err := New(Brokers(addrs...), Group("g"), Topics("in"), Logger(slog.New(logs)),
		WithHandler(func(context.Context, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, p)
	produce(t, addrs, &kgo.Record{Topic: "in", Partition: 0, Value: val(0)}, &kgo.Record{Topic: "in", Partition: 1, Value: val(1)})
	waitFor(t, 20*time.Second, "both partitions assigned", func() bool { return len(p.Health().Partitions) == 2 })
	stop()
	got := logs.all("partitions released")
	if len(got) != 1 || !strings.Contains(got[0], "why=shutdown") {
		t.Fatalf("%d 'partitions released' lines %q, want one, why=shutdown", len(got), got)
	}
}
