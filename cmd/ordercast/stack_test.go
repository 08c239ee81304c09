package main

import (
	"net"
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

// Two listen-address flags given one address are refused before anything
// starts, naming both, instead of the second listener's "not free" once
// the first has started; port 0 (a free port each) is no clash.
func TestListenAddrClash(t *testing.T) {
	addr := closedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	run := func(extra ...string) []string {
		return append([]string{"run", "payments", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}, extra...)
	}
	devstackArgs := func(extra ...string) []string {
		return append([]string{"devstack", "--data-dir", t.TempDir(), "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0"}, extra...)
	}
	both := func(a, b string) []string { return []string{"--" + a, "--" + b, "one address"} }
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--registry-addr", addr, "--broker-addr", addr), both("broker-addr", "registry-addr")},
		{upQuick(t, "--http", addr, "--admin-http", addr), both("http", "admin-http")},
		{upQuick(t, "--http", ":"+port, "--broker-addr", addr), both("http", "broker-addr")},
		{upQuick(t, "--admin-http", "localhost:"+port, "--registry-addr", addr), both("admin-http", "registry-addr")},
		{run("--http", addr, "--admin-http", addr), both("http", "admin-http")},
		{devstackArgs("--broker-addr", addr, "--registry-addr", addr), both("broker-addr", "registry-addr")},
	})
	for _, ok := range [][2]string{
		{"127.0.0.1:0", "127.0.0.1:0"},
		{":0", "127.0.0.1:0"},
		{"127.0.0.1:" + port, "127.0.0.2:" + port},
		{"127.0.0.1:8080", "127.0.0.1:8081"},
	} {
		if err := checkDistinctAddrs(listenFlag{"http", ok[0]}, listenFlag{"admin-http", ok[1]}); err != nil {
			t.Errorf("%s and %s: %v", ok[0], ok[1], err)
		}
	}
}
