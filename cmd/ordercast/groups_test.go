package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/processor"
)

// A named group that does not exist is reported once: as the command's
// error (printed by main), not also in the table.
func TestGroupsMissingGroupErrorOnce(t *testing.T) {
	addrs := testkafka.Cluster(t, nil)
	out, err := ordercast(t, "groups", "nogroup", "--brokers="+strings.Join(addrs, ","))
	if err == nil || !strings.Contains(err.Error(), "nogroup") {
		t.Fatalf("groups nogroup: err %v\n%s", err, out)
	}
	if strings.Contains(out, "nogroup") {
		t.Errorf("the error is printed in the output too, and main prints it again:\n%s", out)
	}
}

// topics create refuses names Kafka does not allow before sending anything
// (the embedded broker would create them).
func TestTopicsCreateBadName(t *testing.T) {
	b := "--brokers=" + strings.Join(testkafka.Cluster(t, nil), ",")
	checkFlagErrors(t, []flagCase{
		{[]string{"topics", "create", "bad topic!", b}, []string{`"bad topic!"`, "' '", "letters, digits"}},
		{[]string{"topics", "create", "ok", "..", b}, []string{`".."`, "not allowed"}},
		{[]string{"topics", "create", ".", b}, []string{`"."`, "not allowed"}},
		{[]string{"topics", "create", "", b}, []string{"empty"}},
		{[]string{"topics", "create", strings.Repeat("x", 250), b}, []string{"250 characters", "at most 249"}},
	})
	out := mustRun(t, "topics", "create", "Ok_name-1."+strings.Repeat("x", 239), b)
	if !strings.Contains(out, "created") {
		t.Errorf("a legal 249-character name:\n%s", out)
	}
	if list := mustRun(t, "topics", "list", b); strings.Contains(list, "bad topic") || strings.Contains(list, "ok ") {
		t.Errorf("a refused topic was created:\n%s", list)
	}
}

// groups lists a share group (KIP-932) with the other groups: its type,
// its members while one runs, and its backlog once the member has stopped
// (the records produced since, the broker's share lag or END - SPSO).
func TestGroupsListsShareGroup(t *testing.T) {
	addrs := testkafka.Cluster(t, map[string]int32{"sg.in": 2, "sgroup.dlq": 1})
	b := "--brokers=" + strings.Join(addrs, ",")
	recs := func(n int, tag string) []*kgo.Record {
		var out []*kgo.Record
		for i := range n {
			out = append(out, &kgo.Record{Topic: "sg.in", Partition: int32(i % 2), Value: fmt.Appendf(nil, "%s-%d", tag, i)})
		}
		return out
	}
	testkafka.Produce(t, addrs, recs(10, "a")...)
	var handled atomic.Int64
	q, err := processor.NewQueue(processor.Brokers(addrs...), processor.Group("sgroup"), processor.Topics("sg.in"),
		processor.DrainTimeout(200*time.Millisecond),
		processor.WithHandler(func(context.Context, *kgo.Record) error { handled.Add(1); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop := testkafka.Run(t, q)
	// describe is sgroup as `groups -o json` shows it (the command fails
	// while the group does not exist yet).
	describe := func() ops.GroupInfo {
		t.Helper()
		out, _ := ordercast(t, "groups", "sgroup", "-o", "json", b)
		var gs []ops.GroupInfo
		if err := json.Unmarshal([]byte(out), &gs); err != nil || len(gs) != 1 {
			t.Fatalf("groups sgroup -o json: %v, %d groups:\n%s", err, len(gs), out)
		}
		return gs[0]
	}
	var g ops.GroupInfo
	testkafka.WaitFor(t, 60*time.Second, "the 10 records handled, the member listed and the backlog 0", func() bool {
		g = describe()
		return handled.Load() >= 10 && len(g.Members) == processor.DefaultShareSessions && g.TotalLag == 0 && len(g.Partitions) == 2
	})
	// One member per share session of the processor, "<client id>-s<n>".
	if g.Type != "share" {
		t.Fatalf("share group described as %+v, want type share", g)
	}
	for _, m := range g.Members {
		if !strings.HasPrefix(m.ClientID, q.Health().ClientID+"-s") {
			t.Errorf("member %s, want a session of %s (%s-s<n>)", m.ClientID, q.Health().ClientID, q.Health().ClientID)
		}
	}
	if list := mustRun(t, "groups", b); !strings.Contains(list, "sgroup") || !strings.Contains(list, "share/") {
		t.Errorf("groups does not list the share group with protocol share/...:\n%s", list)
	}
	stop()
	testkafka.Produce(t, addrs, recs(7, "b")...)
	testkafka.WaitFor(t, 30*time.Second, "the 7 records produced since the member stopped counted as backlog", func() bool {
		g = describe()
		return len(g.Members) == 0 && g.TotalLag == 7
	})
	out := mustRun(t, "groups", "sgroup", "--partitions", b)
	for _, want := range []string{"GROUP sgroup", "protocol share/", "total lag 7", "SPSO"} {
		if !strings.Contains(out, want) {
			t.Errorf("groups sgroup --partitions lacks %q:\n%s", want, out)
		}
	}
	if _, err := ops.ResetOffsets(t.Context(), kadm.NewClient(mustClient(t, addrs)), "sgroup", ops.ResetOptions{To: ops.ResetEarliest}); err == nil || !strings.Contains(err.Error(), "share group") {
		t.Errorf("an offset reset of a share group: %v, want refused as a share group", err)
	}
}
