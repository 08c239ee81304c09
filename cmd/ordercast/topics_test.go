package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
)

// topics create on an existing topic with other values exits 0, and both
// the table and -o json show what the topic has, with a note naming each
// difference, not what was asked.
func TestTopicsCreateExistingShowsActual(t *testing.T) {
	addrs := testkafka.Cluster(t, nil)
	brokers := "--brokers=" + strings.Join(addrs, ",")
	rf := testkafka.ReplicationFactor(t)
	mustRun(t, "topics", "create", "audit", "--partitions", "12", "--config", "retention.ms=604800000", brokers)

	out := mustRun(t, "topics", "create", "audit", "--partitions", "3", "--config", "retention.ms=1000", brokers)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "audit ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 5 || f[1] != "12" || f[2] != fmt.Sprint(rf) || f[4] != "exists" {
		t.Errorf("table row %q, want audit with 12 partitions, RF %d, exists:\n%s", line, rf, out)
	}
	for _, want := range []string{"12 partitions, not 3", "retention.ms=604800000, not 1000", "left unchanged"} {
		if !strings.Contains(line, want) {
			t.Errorf("table row %q lacks %q", line, want)
		}
	}

	var res []ops.CreateResult
	js := mustRun(t, "topics", "create", "audit", "--partitions", "3", "--config", "retention.ms=1000", brokers, "-o", "json")
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("%v:\n%s", err, js)
	}
	if len(res) != 1 || res[0].Status != "exists" || res[0].Partitions != 12 || res[0].ReplicationFactor != rf ||
		!strings.Contains(res[0].Note, "12 partitions, not 3") || !strings.Contains(res[0].Note, "retention.ms=604800000, not 1000") {
		t.Errorf("-o json: %+v", res)
	}
}
