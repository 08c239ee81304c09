package main

import (
	"strings"
	"testing"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
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
