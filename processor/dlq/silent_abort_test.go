package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/txnchecktest"
	"github.com/ordercast/ordercast/processor/dlq"
)

// TestPurgeAndReplaySurviveSilentAbort: the first commit of a Purge and of
// a Replay is answered nil but aborted. Each finds it by reading its state
// record back, writes its transaction again, and returns only once
// read_committed readers see the result: the purge position moved, the
// replayed record written once.
func TestPurgeAndReplaySurviveSilentAbort(t *testing.T) {
	c, addrs := txnchecktest.Fake(t, map[string]int32{"events": 1, "g.dlq": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produce(t, addrs, dlqRec("g", 0, "k1", "bad1", "permanent", "events", 7), dlqRec("g", 0, "k2", "bad2", "invalid", "events", 8))
	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	turned := txnchecktest.AbortCommits(c, 1)
	res, err := d.Replay(ctx, dlq.ReplayOptions{Selection: dlq.Selection{Classes: []string{"permanent"}}})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if turned.Load() != 1 || len(res.Replayed) != 1 {
		t.Fatalf("replay: %d commits turned into aborts, result %+v", turned.Load(), res)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := readCommitted(t, addrs, kadm.NewClient(cl), "events"); len(got) != 1 || got[0] != "bad1" {
		t.Fatalf("read_committed events after the replay: %q, want [bad1] once", got)
	}
	l, err := d.List(ctx, dlq.Selection{}, 0)
	if err != nil || l.Replayed != 1 {
		t.Fatalf("List after the replay: %+v, %v; want 1 replayed", l, err)
	}

	turned = txnchecktest.AbortCommits(c, 1)
	if _, err := d.Purge(ctx, dlq.PurgeOptions{}); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if turned.Load() != 1 {
		t.Fatalf("purge: %d commits turned into aborts, want 1", turned.Load())
	}
	if l, err := d.List(ctx, dlq.Selection{}, 0); err != nil || l.Selected != 0 {
		t.Fatalf("List right after the purge: %+v, %v; want nothing pending", l, err)
	}
}

// TestPurgeAndReplayGiveUpAfterThreeAbortedCommits: a commit answered nil
// but aborted is written again 3 times in all, as Purge's and Replay's docs
// say; when all 3 are aborted each returns an error and nothing happened
// (no position moved, nothing written or marked), and running it again
// completes it.
func TestPurgeAndReplayGiveUpAfterThreeAbortedCommits(t *testing.T) {
	c, addrs := txnchecktest.Fake(t, map[string]int32{"events": 1, "g.dlq": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produce(t, addrs, dlqRec("g", 0, "k1", "bad1", "permanent", "events", 7))
	d, err := dlq.New("g", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	turned := txnchecktest.AbortCommits(c, 3)
	if res, err := d.Replay(ctx, dlq.ReplayOptions{}); err == nil {
		t.Fatalf("Replay with every commit aborted: %+v, want an error", res)
	}
	if turned.Load() != 3 {
		t.Fatalf("replay: %d commits turned into aborts, want 3 attempts", turned.Load())
	}
	if got := readCommitted(t, addrs, adm, "events"); len(got) != 0 {
		t.Fatalf("read_committed events after the failed replay: %q, want none", got)
	}
	if l, err := d.List(ctx, dlq.Selection{}, 0); err != nil || l.Replayed != 0 || l.Selected != 1 {
		t.Fatalf("List after the failed replay: %+v, %v; want 1 selected, none replayed", l, err)
	}
	if res, err := d.Replay(ctx, dlq.ReplayOptions{}); err != nil || len(res.Replayed) != 1 {
		t.Fatalf("Replay again: %+v, %v; want 1 replayed", res, err)
	}

	turned = txnchecktest.AbortCommits(c, 3)
	if res, err := d.Purge(ctx, dlq.PurgeOptions{}); err == nil {
		t.Fatalf("Purge with every commit aborted: %+v, want an error", res)
	}
	if turned.Load() != 3 {
		t.Fatalf("purge: %d commits turned into aborts, want 3 attempts", turned.Load())
	}
	if l, err := d.List(ctx, dlq.Selection{}, 0); err != nil || l.Selected != 1 {
		t.Fatalf("List after the failed purge: %+v, %v; want the record still selected", l, err)
	}
	if _, err := d.Purge(ctx, dlq.PurgeOptions{}); err != nil {
		t.Fatalf("Purge again: %v", err)
	}
	if l, err := d.List(ctx, dlq.Selection{}, 0); err != nil || l.Selected != 0 {
		t.Fatalf("List after the purge: %+v, %v; want nothing selected", l, err)
	}
}
