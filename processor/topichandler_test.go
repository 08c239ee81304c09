package processor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHandleTopic: each topic's records reach its own handler, the topics
// without one reach the WithHandler handler, and a record of a topic with
// its own handler that comes back from a retry topic reaches that handler
// again (with its original topic).
func TestHandleTopic(t *testing.T) {
	addrs := testCluster(t, map[string]int32{"a": 2, "b": 1, "c": 1, "g.retry.1": 1})
	var mu sync.Mutex
	seen := map[string][]string{} // handler -> "topic/value"
	failedOnce := false
	record := func(name string) Handler {
		return func(_ context.Context, r *kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			seen[name] = append(seen[name], r.Topic+"/"+string(r.Value))
			if string(r.Value) == "retry-me" && !failedOnce {
				failedOnce = true
				return errors.New("transient")
			}
			return nil
		}
	}
	produce(t, addrs,
		&kgo.Record{Topic: "a", Partition: 0, Value: []byte("a1")}, &kgo.Record{Topic: "a", Partition: 1, Value: []byte("retry-me")},
		&kgo.Record{Topic: "b", Value: []byte("b1")}, &kgo.Record{Topic: "c", Value: []byte("c1")})
	runProcessor(t, Brokers(addrs...), Group("g"), Topics("a", "b", "c"), MaxAttempts(1), RetryTopics(10*time.Millisecond),
		CommitInterval(10*time.Millisecond), Backoff(time.Millisecond, 5*time.Millisecond),
		HandleTopic("a", record("A")), HandleTopic("b", record("B")), WithHandler(record("fallback")))
	waitFor(t, 20*time.Second, "every record handled, the retried one twice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["A"]) == 3 && len(seen["B"]) == 1 && len(seen["fallback"]) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	for name, want := range map[string]string{"B": "b/b1", "fallback": "c/c1"} {
		if got := strings.Join(seen[name], ","); got != want {
			t.Errorf("handler %s saw %s, want %s", name, got, want)
		}
	}
	a := strings.Join(seen["A"], ",")
	if strings.Count(a, "a/retry-me") != 2 || !strings.Contains(a, "a/a1") {
		t.Errorf("handler A saw %s, want a/a1 once and a/retry-me twice (the second time from the retry topic)", a)
	}
}

// TestHandleTopicRefusedAtNew: New names every problem of the HandleTopic
// options.
func TestHandleTopicRefusedAtNew(t *testing.T) {
	noop := func(context.Context, *kgo.Record) error { return nil }
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("a", "b")}
	for _, tc := range []struct {
		name string
		opts []Opt
		want string
	}{
		{"topic without a handler", []Opt{HandleTopic("a", noop)}, `topic "b" has no handler`},
		{"topic not consumed", []Opt{HandleTopic("x", noop), WithHandler(noop)}, `HandleTopic("x"): not one of Topics`},
		{"twice", []Opt{HandleTopic("a", noop), HandleTopic("a", noop), WithHandler(noop)}, `HandleTopic("a"): given twice`},
		{"nil handler", []Opt{HandleTopic("a", nil), HandleTopic("b", noop)}, `HandleTopic("a"): nil handler`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(append(append([]Opt{}, base...), tc.opts...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %s", err, tc.want)
			}
		})
	}
	p, err := New(append(append([]Opt{}, base...), HandleTopic("a", noop), HandleTopic("b", noop))...)
	if err != nil {
		t.Fatalf("New with a handler for every topic and no WithHandler: %v", err)
	}
	p.Client().Close()
	p.prod.Close()
	if _, ok := HandleTopic("a", noop).(TxnOpt); ok {
		t.Fatal("HandleTopic is a TxnOpt: NewTransactional would take it")
	}
}

// TestByTopicWithoutHandlerIsPermanent: a record of a topic ByTopic has no
// handler for, and no fallback, is a permanent failure (to the DLQ) that
// names the topic.
func TestByTopicWithoutHandlerIsPermanent(t *testing.T) {
	called := ""
	h := ByTopic(map[string]Handler{"a": func(context.Context, *kgo.Record) error { called = "a"; return nil }}, nil)
	if err := h(context.Background(), &kgo.Record{Topic: "a"}); err != nil || called != "a" {
		t.Fatalf("record of a: err %v, called %q", err, called)
	}
	err := h(context.Background(), &kgo.Record{Topic: "z"})
	if !IsPermanent(err) || !errors.Is(err, ErrNoTopicHandler) || !strings.Contains(err.Error(), "topic z") {
		t.Fatalf("record of z: %v, want a permanent ErrNoTopicHandler naming z", err)
	}
}
