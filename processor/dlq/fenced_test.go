package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor/dlq"
)

// TestFencedReplaySaysWhy: a slow replay fenced by a second replay of the
// same group ends with an error saying another replay is running, not a
// bare INVALID_PRODUCER_EPOCH; the second replay writes every record.
func TestFencedReplaySaysWhy(t *testing.T) {
	ctx := context.Background()
	addrs, adm := testCluster(t, map[string]int32{"events": 1, "c.dlq": 1})
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, dlqRec("c", 0, "k", "v"+itoa(i), "invalid", "events", i))
	}
	produce(t, addrs, recs...)
	slow, err := dlq.New("c", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	done := make(chan error, 1)
	go func() {
		_, err := slow.Replay(ctx, dlq.ReplayOptions{Rate: 5}) // 4 s, in one transaction
		done <- err
	}()
	waitFor(t, 10*time.Second, "the slow replay writing", func() bool { return endOffsets(t, adm, "events") > 0 })
	fast, err := dlq.New("c", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if _, err := fast.Replay(ctx, dlq.ReplayOptions{}); err != nil {
		t.Fatalf("second replay: %v", err)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the fenced replay did not end")
	}
	if err == nil || !strings.Contains(err.Error(), "another dlq replay or purge of group c is running; wait for it or retry") {
		t.Fatalf("fenced replay: %v", err)
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Errorf("fenced replay error %v does not wrap the Kafka error", err)
	}
}

// TestTxnClientRetries: a replay's or purge's transactional client retries
// after 20 ms (not franz-go's 250 ms) and refreshes its metadata up to every
// 100 ms (not 5 s), as the runtime's other transactional clients, so that a
// transaction refused with CONCURRENT_TRANSACTIONS while the previous one's
// markers are written waits tens of milliseconds (scenario S22); the
// caller's RetryBackoffFn replaces the backoff.
func TestTxnClientRetries(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []kgo.Opt
		first time.Duration
	}{
		{"default", nil, 20 * time.Millisecond},
		{"caller's options", []kgo.Opt{kgo.RetryBackoffFn(func(int) time.Duration { return 7 * time.Second })}, 7 * time.Second},
	} {
		d, err := dlq.New("g", append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(d.TxnClientOpts()...)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		fn, _ := cl.OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
		minAge, _ := cl.OptValue(kgo.MetadataMinAge).(time.Duration)
		cl.Close()
		if fn == nil {
			t.Fatalf("%s: no RetryBackoffFn", c.name)
		}
		if d := fn(1); d > c.first || d < c.first*4/5 {
			t.Errorf("%s: first retry after %v, want %v less at most a fifth", c.name, d, c.first)
		}
		if minAge != 100*time.Millisecond {
			t.Errorf("%s: MetadataMinAge %v, want 100ms", c.name, minAge)
		}
	}
}
