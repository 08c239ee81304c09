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
