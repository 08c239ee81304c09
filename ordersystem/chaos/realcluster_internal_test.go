package chaos

import (
	"context"
	"net"
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

// Two harnesses on one machine listen on different loopback addresses.
func TestProcHostIsThisHarnesss(t *testing.T) {
	seen := map[string]int{}
	for pid := 1; pid <= 4_000_000; pid += 997 {
		h := hostOf(pid)
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			t.Fatalf("hostOf(%d) = %q, not a loopback address", pid, h)
		}
		seen[h]++
	}
	if hostOf(4242) == hostOf(4243) || procHost != hostOf(os.Getpid()) {
		t.Fatalf("neighbouring pids share %s, or procHost %s is not this process's", hostOf(4242), procHost)
	}
	if len(seen) < 1000 {
		t.Fatalf("only %d distinct addresses over 4,000 pids", len(seen))
	}
}
