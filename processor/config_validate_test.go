package processor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDrainTimeoutFollowsRebalanceTimeout: a DrainTimeout at or above the
// RebalanceTimeout is refused naming both; without DrainTimeout the default
// (10s) is cut to half a shorter RebalanceTimeout.
func TestDrainTimeoutFollowsRebalanceTimeout(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithHandler(nop)}
	_, err := New(append(base, RebalanceTimeout(10*time.Second), DrainTimeout(2*time.Minute))...)
	if err == nil || !strings.Contains(err.Error(), "DrainTimeout: 2m0s, want less than RebalanceTimeout (10s)") {
		t.Fatalf("DrainTimeout over RebalanceTimeout: err %v", err)
	}
	for _, c := range []struct {
		name string
		opts []Opt
		want time.Duration
	}{
		{"defaults", nil, 10 * time.Second},
		{"short rebalance timeout", []Opt{RebalanceTimeout(4 * time.Second)}, 2 * time.Second},
		{"given", []Opt{RebalanceTimeout(4 * time.Second), DrainTimeout(3 * time.Second)}, 3 * time.Second},
	} {
		cfg := defaultCfg()
		for _, o := range append(base, c.opts...) {
			o.apply(&cfg)
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.drainTimeout != c.want {
			t.Errorf("%s: DrainTimeout %v, want %v", c.name, cfg.drainTimeout, c.want)
		}
	}
}

// TestConfigRefusedAtNew: an option value outside what the option takes (an
// unknown Ordering, a negative timeout, an empty broker address) is refused
// at New and NewTransactional with an error naming the option, and a nil Opt
// is an error naming its position, not a panic.
func TestConfigRefusedAtNew(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	txnNop := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithHandler(nop)}
	var unset Opt
	for _, c := range []struct {
		name string
		opts []Opt
		want string
	}{
		{"nil Opt", []Opt{Brokers("127.0.0.1:1"), nil, Group("g"), Topics("t"), WithHandler(nop)}, "option 2 of 5 is nil"},
		{"nil Opt variable", append(base[:4:4], unset), "option 5 of 5 is nil"},
		{"typed nil Opt", append(base[:4:4], opt(nil)), "option 5 of 5 is nil"},
		{"Ordering(7)", append(base[:4:4], WithOrdering(Ordering(7))), "WithOrdering: Ordering(7), want"},
		{"Ordering(-1)", append(base[:4:4], WithOrdering(Ordering(-1))), "WithOrdering: Ordering(-1), want"},
		{"HandlerTimeout(-1s)", append(base[:4:4], HandlerTimeout(-time.Second)), "HandlerTimeout: -1s, want >= 0"},
		{"MaxBatch(0) alone", append(base[:4:4], MaxBatch(0)), "MaxBatch: 0, want >= 1"},
		{"MaxBatch(-1) alone", append(base[:4:4], MaxBatch(-1)), "MaxBatch: -1, want >= 1"},
		{`Brokers("")`, []Opt{Brokers(""), Group("g"), Topics("t"), WithHandler(nop)}, "Brokers: address 1 of 1 is empty"},
		{`Brokers("a:1", " ")`, []Opt{Brokers("a:1", " "), Group("g"), Topics("t"), WithHandler(nop)}, "Brokers: address 2 of 2 is empty"},
		// An empty or nil value that would otherwise fall back to a default
		// without a word, or panic later.
		{`Topics("")`, []Opt{Brokers("a:1"), Group("g"), Topics(""), WithHandler(nop)}, "Topics: topic 1 of 1 is empty"},
		{`Topics("t", "u", "t")`, []Opt{Brokers("a:1"), Group("g"), Topics("t", "u", "t"), WithHandler(nop)}, `Topics: "t" is given twice (topics 1 and 3)`},
		{"Logger(nil)", append(base[:4:4], Logger(nil)), "Logger: nil, want a *slog.Logger"},
		{"ClientOpts(nil)", append(base[:4:4], ClientOpts(kgo.ClientID("x"), nil)), "ClientOpts: option 2 of 2 is nil"},
		{"ConsumerOpts(nil)", append(base[:4:4], ConsumerOpts(nil)), "ConsumerOpts: option 1 of 1 is nil"},
		{`DeadLetterTopic("")`, append(base[:4:4], DeadLetterTopic("")), `DeadLetterTopic: empty, want a topic name (leave the option out for "g.dlq")`},
		{`RetryTopicPrefix("")`, append(base[:4:4], RetryTopics(time.Second), RetryTopicPrefix("")), "RetryTopicPrefix: empty, want a prefix"},
		{"MaxBlockedKeys(-1) alone", append(base[:4:4], MaxBlockedKeys(-1)), "MaxBlockedKeys: -1, want >= 1"},
		{"WithBatchHandler(nil)", append(base[:4:4], WithBatchHandler(nil)), "WithBatchHandler: nil, want a BatchHandler"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: error %v, want one containing %q", err, c.want)
			}
			if q, err := NewQueue(c.opts...); err == nil {
				for _, cl := range q.Clients() {
					cl.Close()
				}
				if q.ownProd {
					q.prod.Close()
				}
				t.Errorf("NewQueue: no error, want one")
			}
			txnOpts, ok := asTxnOpts(c.opts)
			if !ok {
				return // an option of New only: NewTransactional cannot take it (TestTxnOptSplit)
			}
			_, err = NewTransactional("tx", txnNop, txnOpts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewTransactional: error %v, want one containing %q", err, c.want)
			}
		})
	}
	// Valid values still pass: every ordering, 0 (disabled) HandlerTimeout,
	// MaxBatch >= 1 alone (no effect without WithBatchHandler).
	for _, o := range []Opt{WithOrdering(OrderPartition), WithOrdering(OrderKey), WithOrdering(OrderUnordered), HandlerTimeout(0), MaxBatch(1)} {
		p, err := New(append(base[:4:4], o)...)
		if err != nil {
			t.Fatalf("valid option refused: %v", err)
		}
		p.cl.Close()
		p.prod.Close()
	}
}

// TestMissingTopicErrorWording: one missing topic reads in the singular,
// several in the plural with one kafka-topics.sh command line per topic.
func TestMissingTopicErrorWording(t *testing.T) {
	one := (&MissingTopicError{Topics: []string{"g.dlq"}, Partitions: 3}).Error()
	if !strings.Contains(one, "topic g.dlq does not exist") || !strings.Contains(one, "Create it") ||
		strings.Count(one, "kafka-topics.sh --create --topic g.dlq --partitions 3") != 1 {
		t.Errorf("one topic: %q", one)
	}
	two := (&MissingTopicError{Topics: []string{"a", "b"}, Partitions: 2}).Error()
	if !strings.Contains(two, "topics a, b do not exist") || !strings.Contains(two, "Create them") {
		t.Errorf("two topics: %q", two)
	}
	for _, topic := range []string{"a", "b"} {
		if n := strings.Count(two, "kafka-topics.sh --create --topic "+topic+" --partitions 2\n"); n != 1 {
			t.Errorf("two topics: %d command lines for %s in %q, want 1", n, topic, two)
		}
	}
	kb := (&MissingTopicError{Topics: []string{"g.blocked-keys"}, Partitions: 1, Compact: true}).Error()
	if !strings.Contains(kb, "kafka-topics.sh --create --topic g.blocked-keys --partitions 1 --config cleanup.policy=compact") ||
		!strings.Contains(kb, "blocked keys") {
		t.Errorf("blocked-keys topic: %q", kb)
	}
}
