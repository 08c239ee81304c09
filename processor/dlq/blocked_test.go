package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor"
	"github.com/ordercast/ordercast/processor/dlq"
)

// TestDLQBlockedKeys: with processor.BlockKeys(KeyBlockDeadLetters), a
// dead-lettered record holds its key. List shows the key blocked and the
// record holding it; a dry-run purge releases nothing; Purge releases the
// key, and the records held behind it are then handled, in order. A replay
// of a record whose key is held releases it once the copy is handled.
func TestDLQBlockedKeys(t *testing.T) {
	addrs, _ := testCluster(t, map[string]int32{"in": 1, "g.retry.1": 1, "g.dlq": 1})
	var mu sync.Mutex
	var handled []string
	poison := map[string]bool{"a:1": true, "b:1": true}
	stop := runProcessor(t, processor.Brokers(addrs...), processor.Group("g"), processor.Topics("in"),
		processor.WithOrdering(processor.OrderKey), processor.MaxAttempts(1), processor.RetryTopics(10*time.Millisecond),
		processor.BlockKeys(processor.KeyBlockDeadLetters), processor.CreateTopics(true),
		processor.CommitInterval(10*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			if poison[string(r.Value)] {
				return processor.Permanent(errors.New("poison"))
			}
			handled = append(handled, string(r.Value))
			return nil
		}))
	defer stop()
	var recs []*kgo.Record
	for i := 0; i < 4; i++ {
		for _, k := range []string{"a", "b", "c"} {
			recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte(fmt.Sprintf("%s:%d", k, i))})
		}
	}
	produce(t, addrs, recs...)
	count := func(prefix string) (n int, order string) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range handled {
			if v[:1] == prefix {
				n++
				order += v + " "
			}
		}
		return n, order
	}
	waitFor(t, 20*time.Second, "key c handled, a and b held", func() bool { n, _ := count("c"); return n == 4 })
	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	var l *dlq.Listing
	waitFor(t, 10*time.Second, "two records in the DLQ", func() bool {
		l, err = d.List(ctx, dlq.Selection{}, 0)
		return err == nil && l.Selected == 2 && len(l.BlockedKeys) == 2
	})
	for _, r := range l.Records {
		if !r.BlocksKey {
			t.Errorf("DLQ record %s (key %s): BlocksKey false, want true", r.ID, r.Key)
		}
	}
	if l.BlockedKeys[0].Key != "a" || l.BlockedKeys[0].At != "g.dlq" || l.BlockedKeys[0].RecordID != "in/0/3" {
		t.Errorf("blocked keys %+v, want a behind in/0/3 at g.dlq first", l.BlockedKeys)
	}
	if n, _ := count("a"); n != 1 {
		t.Fatalf("key a: %d records handled, want 1 (a:0; the rest held behind a:1)", n)
	}

	// Replay b's record (fixed first): its copy is handled, then b's held records, in order.
	mu.Lock()
	delete(poison, "b:1")
	mu.Unlock()
	if _, err := d.Replay(ctx, dlq.ReplayOptions{Selection: dlq.Selection{Keys: []string{"b"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "key b released by the replay", func() bool { n, _ := count("b"); return n == 4 })
	if _, order := count("b"); order != "b:0 b:1 b:2 b:3 " {
		t.Errorf("key b handled as %q, want in order", order)
	}

	// Purge: a dry run releases nothing, the purge releases a; a:1 is gone, a:2 and a:3 follow in order.
	if _, err := d.Purge(ctx, dlq.PurgeOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if bk, err := d.BlockedKeys(ctx); err != nil || len(bk) != 1 || bk[0].Key != "a" {
		t.Fatalf("after a dry-run purge: blocked keys %+v, %v; want a alone", bk, err)
	}
	if _, err := d.Purge(ctx, dlq.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "key a released by the purge", func() bool { n, _ := count("a"); return n == 3 })
	if _, order := count("a"); order != "a:0 a:2 a:3 " {
		t.Errorf("key a handled as %q, want a:0 a:2 a:3", order)
	}
	if bk, err := d.BlockedKeys(ctx); err != nil || len(bk) != 0 {
		t.Errorf("blocked keys after the purge: %+v, %v; want none", bk, err)
	}
}
