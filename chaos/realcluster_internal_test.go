package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A broker fault's start-node waits past kafka.sh's own 90 s default (on a
// loaded machine a node took longer, and the episode ended with the node
// still starting), unless the environment sets the timeout.
func TestStartNodeWaitsLongerThanTheScriptDefault(t *testing.T) {
	script := filepath.Join(t.TempDir(), "kafka.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$1 ${ORDERCAST_KAFKA_START_TIMEOUT:-unset}\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rc := &realCluster{cfg: &Cluster{KafkaScript: script}}
	ctx := context.Background()

	t.Setenv("ORDERCAST_KAFKA_START_TIMEOUT", "")
	os.Unsetenv("ORDERCAST_KAFKA_START_TIMEOUT")
	for args, want := range map[string]string{"start-node 1": "start-node 600", "stop-node 1": "stop-node unset"} {
		out, err := rc.kafka(ctx, strings.Fields(args)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("%s: the script saw %q, want %q", args, got, want)
		}
	}

	t.Setenv("ORDERCAST_KAFKA_START_TIMEOUT", "42")
	if out, err := rc.kafka(ctx, "start-node", "1"); err != nil || strings.TrimSpace(out) != "start-node 42" {
		t.Errorf("start-node with ORDERCAST_KAFKA_START_TIMEOUT=42: %q, %v; want the caller's value kept", out, err)
	}
}
