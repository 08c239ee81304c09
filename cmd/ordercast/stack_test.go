package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded broker and registry of `up` and `devstack` take any client
// without credentials: a non-loopback --broker-addr or --registry-addr is
// refused, naming --allow-remote-embedded, before anything is started.
func TestEmbeddedStackLoopbackOnly(t *testing.T) {
	devstackArgs := func(extra ...string) []string {
		return append([]string{"devstack", "--data-dir", t.TempDir(), "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0"}, extra...)
	}
	want := []string{"not a loopback address", "--allow-remote-embedded"}
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--broker-addr", "0.0.0.0:0"), append([]string{"--broker-addr 0.0.0.0:0"}, want...)},
		{upQuick(t, "--registry-addr", ":0"), append([]string{"--registry-addr :0"}, want...)},
		{devstackArgs("--broker-addr", "0.0.0.0:0"), append([]string{"--broker-addr 0.0.0.0:0"}, want...)},
		{devstackArgs("--registry-addr", "0.0.0.0:0"), append([]string{"--registry-addr 0.0.0.0:0"}, want...)},
		{upQuick(t, "--admin-http", "nonsense"), []string{`--admin-http "nonsense"`, "not a host:port"}},
	})
}

// A data directory that group or others may write is refused by `up`
// before anything is made in it (the development key, the database).
func TestUpRefusesWritableDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	checkFlagErrors(t, []flagCase{{append(upQuick(t), "--data-dir", dir), []string{"--data-dir", "mode", "chmod 700"}}})
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("up made %v in the refused data directory", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, "auth")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("development key directory made: %v", err)
	}
}
