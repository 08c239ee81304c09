package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/processor"
)

// TestProducePoisonReachesDLQ: a record written with `ordercast produce` to
// a topic a running group reads, which its handler refuses, is listed by
// `dlq list` with the key, headers and coordinates produce printed; `groups`
// prints one line for the group and `groups --partitions` its partitions.
func TestProducePoisonReachesDLQ(t *testing.T) {
	testkafka.Parallel(t)
	addrs := testkafka.Cluster(t, map[string]int32{"events": 3, "g.dlq": 2})
	b := "--brokers=" + strings.Join(addrs, ",")
	p, err := processor.New(processor.Brokers(addrs...), processor.Group("g"), processor.Topics("events"),
		processor.CommitInterval(20*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if string(r.Value) == "poison" {
				return processor.Permanentf("cannot decode %q", r.Value)
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	testkafka.Run(t, p)

	var w producedRecord
	out := mustRun(t, "produce", b, "--topic", "events", "--key", "k1", "--value", "poison", "--header", "trace=abc", "-H", "note=a=b", "-o", "json")
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("produce -o json: %v\n%s", err, out)
	}
	if w.Topic != "events" || w.ID != (ops.Coord{Topic: "events", Partition: w.Partition, Offset: w.Offset}).String() {
		t.Fatalf("produce printed %+v", w)
	}
	var l ops.Listing
	testkafka.WaitFor(t, 15*time.Second, "the poison record in g.dlq", func() bool {
		out, err := ordercast(t, "dlq", "list", "--group", "g", b, "-o", "json")
		return err == nil && json.Unmarshal([]byte(out), &l) == nil && l.Selected == 1
	})
	r := l.Records[0]
	if r.Key != "k1" || r.OriginalTopic != "events" || r.OriginalPartition != w.Partition || r.OriginalOffset != w.Offset || r.ErrorClass != "permanent" {
		t.Errorf("DLQ record %+v, produced %+v", r, w)
	}
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = h.Value
	}
	if hs["trace"] != "abc" || hs["note"] != "a=b" {
		t.Errorf("headers %v: want trace=abc and note=a=b kept", hs)
	}
	if table := mustRun(t, "dlq", "list", "--group", "g", b); !strings.Contains(table, r.ID) || !strings.Contains(table, w.ID) {
		t.Errorf("dlq list does not show %s from %s:\n%s", r.ID, w.ID, table)
	}

	// Replayed, the record fails again: its copy names it (REPLAY OF); a
	// second replay of everything skips the copy, unless asked.
	mustRun(t, "dlq", "replay", "--group", "g", b)
	var list string
	testkafka.WaitFor(t, 15*time.Second, "the replayed copy in g.dlq", func() bool {
		list = mustRun(t, "dlq", "list", "--group", "g", b)
		return strings.Contains(list, "2 selected")
	})
	if !strings.Contains(list, "REPLAY OF") || !strings.Contains(list, "1 of them replays that failed again") || strings.Count(list, r.ID) != 2 {
		t.Errorf("dlq list after a failed replay: want the copy naming %s:\n%s", r.ID, list)
	}
	out, err = ordercast(t, "dlq", "replay", "--group", "g", b)
	if err == nil || !strings.Contains(out, "1 refused, 1 skipped") || !strings.Contains(out, "a replay of "+r.ID+" that failed again") {
		t.Errorf("second dlq replay: err %v\n%s", err, out)
	}
	if out, _ := ordercast(t, "dlq", "replay", "--group", "g", b, "--dry-run", "--include-failed-replays"); !strings.Contains(out, "would replay 1 of 2") ||
		strings.Contains(out, "skipped") {
		t.Errorf("dlq replay --include-failed-replays --dry-run:\n%s", out)
	}

	// A value from a file, to a chosen partition.
	file := filepath.Join(t.TempDir(), "v.bin")
	if err := os.WriteFile(file, []byte{0, 1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, "produce", b, "--topic", "events", "--key", "k2", "--value-file", file, "--partition", "2"); !strings.Contains(out, "wrote events/2/") ||
		!strings.Contains(out, "3 value bytes") {
		t.Errorf("produce --value-file --partition 2: %s", out)
	}

	// groups: one line for the group; --partitions: a row per partition.
	var sum string
	testkafka.WaitFor(t, 15*time.Second, "group g stable with no lag", func() bool {
		sum = mustRun(t, "groups", "g", b)
		return strings.Contains(sum, "Stable") && strings.Contains(sum, "0 of 3")
	})
	lines := strings.Split(strings.TrimSpace(sum), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "GROUP") || !strings.HasPrefix(lines[1], "g ") {
		t.Errorf("groups g: want a header and one line:\n%s", sum)
	}
	if f := strings.Fields(lines[1]); len(f) < 7 || f[3] != "1" || f[4] != "0" {
		t.Errorf("groups g: want 1 member and lag 0: %q", lines[1])
	}
	full := mustRun(t, "groups", "g", b, "--partitions")
	for _, want := range []string{"MEMBER", "COMMITTED", "events  0", "events  1", "events  2"} {
		if !strings.Contains(full, want) {
			t.Errorf("groups --partitions: no %q:\n%s", want, full)
		}
	}
}

// TestProduceFlags: each bad flag is named with what it expects, before
// anything is written.
func TestProduceFlags(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"events": 2})
	b := "--brokers=" + strings.Join(addrs, ",")
	checkFlagErrors(t, []flagCase{
		{[]string{"produce", b, "--key", "k"}, []string{"--topic is required"}},
		{[]string{"produce", b, "--topic", "events"}, []string{"--key is required"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--value", "v", "--value-file", "f"}, []string{"--value and --value-file", "not both"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--header", "novalue"}, []string{`--header "novalue"`, "KEY=VALUE"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--header", "=v"}, []string{`--header "=v"`, "non-empty KEY"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--value-file", "/nonexistent/v"}, []string{`--value-file "/nonexistent/v"`, "no such file"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--partition", "-2"}, []string{"--partition -2", ">= 0"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--partition", "2"}, []string{"--partition 2", "2 partitions, 0 to 1"}},
		{[]string{"produce", b, "--topic", "events", "--key", "k", "--partition", "x"}, []string{`--partition "x"`, "whole number"}},
		{[]string{"produce", b, "--topic", "nosuch", "--key", "k"}, []string{"--topic nosuch", "does not exist", "topics create"}},
	})
}
