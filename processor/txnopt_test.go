package processor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txnretry"
)

// asTxnOpts returns opts as TxnOpts, and false if one of them is an option
// of New only (a nil Opt stays a nil TxnOpt).
func asTxnOpts(opts []Opt) ([]TxnOpt, bool) {
	out := make([]TxnOpt, len(opts))
	for i, o := range opts {
		if o == nil {
			continue
		}
		to, ok := o.(TxnOpt)
		if !ok {
			return nil, false
		}
		out[i] = to
	}
	return out, true
}

// mustTxnOpts is asTxnOpts for options the test knows to be TxnOpts.
func mustTxnOpts(t testing.TB, opts []Opt) []TxnOpt {
	t.Helper()
	out, ok := asTxnOpts(opts)
	if !ok {
		t.Fatalf("an option of New only among %d options meant for NewTransactional", len(opts))
	}
	return out
}

// TestTxnOptSplit: the options NewTransactional ignores or refuses are an
// Opt only, so that passing one to it does not compile; the options it
// takes are a TxnOpt, and New takes them too. A New-only option that became
// a TxnOpt (or a shared one that lost it) fails here.
func TestTxnOptSplit(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	newOnly := map[string]Opt{
		"WithHandler":           WithHandler(nop),
		"BlockKeys":             BlockKeys(KeyBlockRetries),
		"RetryTopics":           RetryTopics(time.Second),
		"RetryTopicPrefix":      RetryTopicPrefix("x"),
		"DeadLetter":            DeadLetter(false),
		"CommitRefreshInterval": CommitRefreshInterval(time.Second),
		"Producer":              Producer(nil),
		"HandleTopic":           HandleTopic("a", nop),
		"WithBatchHandler":      WithBatchHandler(func(context.Context, []*kgo.Record) error { return nil }),
	}
	for name, o := range newOnly {
		if _, ok := o.(TxnOpt); ok {
			t.Errorf("%s is a TxnOpt: NewTransactional would take it and ignore it", name)
		}
	}
	shared := map[string]Opt{
		"Brokers": Brokers("a:1"), "Group": Group("g"), "Topics": Topics("t"), "MaxInFlight": MaxInFlight(1, 1),
		"HandlerTimeout": HandlerTimeout(time.Second), "MaxAttempts": MaxAttempts(2), "Backoff": Backoff(time.Millisecond, time.Second),
		"CommitInterval": CommitInterval(time.Second), "DrainTimeout": DrainTimeout(time.Second), "SessionTimeout": SessionTimeout(time.Minute),
		"RebalanceTimeout": RebalanceTimeout(time.Minute), "TransactionTimeout": TransactionTimeout(time.Minute), "InstanceID": InstanceID("i"),
		"ClientID": ClientID("c"), "GroupProtocol": GroupProtocol("consumer"), "Logger": Logger(nil), "WithMetrics": WithMetrics(nil),
		"ClientOpts": ClientOpts(), "ConsumerOpts": ConsumerOpts(), "ProducerOpts": ProducerOpts(), "DeadLetterTopic": DeadLetterTopic("d"),
		"OnDeadLetter": OnDeadLetter(nil), "HeaderPrefix": HeaderPrefix("x-"), "StartOffset": StartOffset(Latest), "CreateTopics": CreateTopics(true),
		"WithOrdering": WithOrdering(OrderKey), "Concurrency": Concurrency(4), "CommitMetadataMaxBytes": CommitMetadataMaxBytes(1 << 10),
		"MaxBatch": MaxBatch(10), "WithTxnBatchHandler": WithTxnBatchHandler(func(context.Context, []*kgo.Record) ([][]*kgo.Record, error) { return nil, nil }),
	}
	for name, o := range shared {
		if _, ok := o.(TxnOpt); !ok {
			t.Errorf("%s is not a TxnOpt: NewTransactional cannot take it", name)
		}
	}
}

// TestTxnRefusesOrdering: NewTransactional refuses OrderUnordered, and
// OrderKey without the completed-offsets map, naming the option; it takes
// OrderPartition and OrderKey with Concurrency.
func TestTxnRefusesOrdering(t *testing.T) {
	h := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	base := []TxnOpt{Brokers("a:1"), Group("g"), Topics("t")}
	for _, tc := range []struct {
		opts []TxnOpt
		want string
	}{
		{[]TxnOpt{WithOrdering(OrderUnordered)}, "WithOrdering: OrderUnordered"},
		{[]TxnOpt{WithOrdering(OrderKey), CommitMetadataMaxBytes(0)}, "CommitMetadataMaxBytes: 0 with OrderKey"},
		{[]TxnOpt{WithOrdering(OrderKey), Concurrency(4)}, ""},
		{[]TxnOpt{WithOrdering(OrderPartition), CommitMetadataMaxBytes(0)}, ""},
	} {
		_, err := NewTransactional("id", h, append(append([]TxnOpt{}, base...), tc.opts...)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d options: %v, want no error", len(tc.opts), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// TestTxnRetryBackoff: the exactly-once session's client retries after
// txnretry's backoff (20 ms first, not franz-go's 250 ms) and refreshes its
// metadata up to every 100 ms (not 5 s), so that a transaction's first
// produce refused with CONCURRENT_TRANSACTIONS while the previous one's
// markers are written does not wait a quarter of a second or more, nor for
// the next metadata refresh; a RetryBackoffFn in ClientOpts replaces the
// backoff.
func TestTxnRetryBackoff(t *testing.T) {
	h := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	for _, c := range []struct {
		name  string
		opts  []TxnOpt
		first time.Duration // at most
		fifth time.Duration // at most
	}{
		{"default", nil, txnretry.First, 16 * txnretry.First},
		{"ClientOpts", []TxnOpt{ClientOpts(kgo.RetryBackoffFn(func(int) time.Duration { return 7 * time.Second }))}, 7 * time.Second, 7 * time.Second},
	} {
		tp, err := NewTransactional("txn-backoff", h, append([]TxnOpt{Brokers("127.0.0.1:1"), Group("g"), Topics("in")}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		sess, err := tp.newSession()
		if err != nil {
			t.Fatal(err)
		}
		fn, _ := sess.Client().OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
		minAge, _ := sess.Client().OptValue(kgo.MetadataMinAge).(time.Duration)
		sess.Close()
		if minAge != txnretry.MetadataMinAge {
			t.Errorf("%s: MetadataMinAge %v, want %v (a produce refused with CONCURRENT_TRANSACTIONS waits for the next metadata refresh)", c.name, minAge, txnretry.MetadataMinAge)
		}
		if fn == nil {
			t.Fatalf("%s: no RetryBackoffFn", c.name)
		}
		if d := fn(1); d > c.first || d < c.first*4/5 {
			t.Errorf("%s: first retry after %v, want %v less at most a fifth", c.name, d, c.first)
		}
		if d := fn(5); d > c.fifth || d < c.fifth*4/5 {
			t.Errorf("%s: fifth retry after %v, want %v less at most a fifth", c.name, d, c.fifth)
		}
	}
}
