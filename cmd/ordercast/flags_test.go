package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// flagCase is a command line that must fail at once with an error naming
// what is wrong.
type flagCase struct {
	args []string
	want []string // substrings of the error
}

// checkFlagErrors runs each case in process: each must fail within a few
// seconds (before starting anything) with every wanted substring.
func checkFlagErrors(t *testing.T, cases []flagCase) {
	t.Helper()
	for _, c := range cases {
		start := time.Now()
		out, err := ordercast(t, c.args...)
		if err == nil {
			t.Errorf("ordercast %q: no error\n%s", c.args, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ordercast %q: error %q lacks %q", c.args, err, w)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("ordercast %q took %v to fail", c.args, d)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestReplayFlags(t *testing.T) {
	checkFlagErrors(t, []flagCase{
		{[]string{"replay", oneDay, "--timeout", "0"}, []string{"--timeout", "positive duration"}},
		{[]string{"replay", oneDay, "--timeout", "-1s"}, []string{"--timeout", "positive duration"}},
		{[]string{"replay", oneDay, "--max-attempts", "0"}, []string{"--max-attempts", ">= 1"}},
		{[]string{"replay", oneDay, "--url", "localhost:8080"}, []string{"--url", "http://"}},
		{[]string{"replay", oneDay, "--rate", "NaN"}, []string{"--rate", ">= 0"}},
		{[]string{"replay", oneDay, "--concurrency", "0"}, []string{"--concurrency", ">= 1"}},
	})
}

// Nothing listens at --url: the replay stops after the first invoice's
// attempts instead of trying all of them, and says why.
func TestReplayUnreachable(t *testing.T) {
	addr := closedAddr(t)
	start := time.Now()
	_, err := ordercast(t, "replay", oneDay, "--url", "http://"+addr, "--max-attempts", "2", "--timeout", "2s")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"did not answer any of", "connection refused", addr, "--url"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to give up", d)
	}
}

func TestDLQFlags(t *testing.T) {
	b := "--brokers=127.0.0.1:1"
	known := []string{"undecodable", "unknown_schema_id", "wrong_subject", "incompatible_schema", "invalid", "timeout", "permanent", "transient"}
	checkFlagErrors(t, []flagCase{
		{[]string{"dlq", "replay", "--group", "orders", "--class", "nosuch", b, "--timeout", "1s"}, append([]string{"--class", `"nosuch"`, "unknown error class"}, known...)},
		{[]string{"dlq", "replay", "--group", "orders", "--class", "invalid,Invalid", b, "--timeout", "1s"}, []string{"--class", `"Invalid"`}},
		{[]string{"dlq", "list", "--group", "orders", "--class", "nosuch", b, "--timeout", "1s"}, []string{"--class", "undecodable"}},
		{[]string{"dlq", "list", "--group", "orders", "--limit", "-1", b}, []string{"--limit", ">= 0"}},
		{[]string{"dlq", "list", "--group", "orders", "--from-offset", "-5", b}, []string{"--from-offset", ">= 0"}},
		{[]string{"dlq", "replay", "--group", "orders", "--to-offset", "-2", b}, []string{"--to-offset", ">= 0"}},
		{[]string{"dlq", "replay", "--group", "orders", "--limit", "-3", b}, []string{"--limit", ">= 0"}},
		{[]string{"dlq", "replay", "--group", "orders", "--rate", "NaN", b}, []string{"--rate", ">= 0"}},
		{[]string{"dlq", "show", "orders.dlq/0/1", "--partition", "2", b}, []string{"--partition", "orders.dlq/0/1"}},
		{[]string{"dlq", "show", "orders.dlq/0/1", "--offset", "3", b}, []string{"--offset", "orders.dlq/0/1"}},
		{[]string{"dlq", "purge", "--group", "orders", "--all", "--partition", "-1", b}, []string{"--partition", ">= 0"}},
	})
}
