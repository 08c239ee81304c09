package devstack

import (
	"strings"
	"testing"
)

// TestDataDirIsExclusive: a second stack on the same data directory is
// refused with an error naming the directory, and the directory is usable
// again once the first stack is closed.
func TestDataDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Start on %s: err %v, want an 'in use' error", dir, err)
	}
	first.Close()
	again, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
	again.Close()
}
