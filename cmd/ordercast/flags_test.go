package main

import (
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ordercast/ordercast/processor"
)

// flagCase is a command line that must fail at once with an error naming
// what is wrong.
type flagCase struct {
	args []string
	want []string // substrings of the error
}

// checkFlagErrors runs each case in process: each must fail within 10s
// (before starting anything, for a flag error) with every wanted substring.
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
		if d := time.Since(start); d > 10*time.Second {
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
		{[]string{"replay", oneDay, "--rate", "Inf"}, []string{"--rate +Inf", ">= 0", "0: unlimited"}},
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
		{[]string{"dlq", "replay", "--group", "orders", "--rate", "+Inf", b}, []string{"--rate +Inf", ">= 0", "0: unlimited"}},
		{[]string{"dlq", "show", "orders.dlq/0/1", "--partition", "2", b}, []string{"--partition", "orders.dlq/0/1"}},
		{[]string{"dlq", "show", "orders.dlq/0/1", "--offset", "3", b}, []string{"--offset", "orders.dlq/0/1"}},
		{[]string{"dlq", "purge", "--group", "orders", "--all", "--partition", "-1", b}, []string{"--partition", ">= 0"}},
	})
}

// upQuick are `up` flags that keep a run that got past the flag checks
// from touching the default ports or the working directory.
func upQuick(t *testing.T, extra ...string) []string {
	return append([]string{"up", "--data-dir", t.TempDir(), "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0",
		"--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0", "--seed-data", oneDay}, extra...)
}

func TestCommonFlags(t *testing.T) {
	run := func(extra ...string) []string {
		return append([]string{"run", "payments", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}, extra...)
	}
	notHostPort := []string{"not a host:port", "127.0.0.1:8080"}
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--http", "nonsense"), append([]string{`--http "nonsense"`}, notHostPort...)},
		{upQuick(t, "--http", "127.0.0.1:99999"), []string{"--http", "not a host:port"}},
		{run("--http", "nonsense"), []string{"--http", "not a host:port"}},
		{upQuick(t, "--broker-addr", "9092"), []string{"--broker-addr", "not a host:port"}},
		{upQuick(t, "--registry-addr", "localhost"), []string{"--registry-addr", "not a host:port"}},
		{upQuick(t, "--registry", "127.0.0.1:8081"), []string{"--registry", "http://"}},
		{upQuick(t, "--min-insync-replicas", "-1"), []string{"--min-insync-replicas", "replication factor"}},
		{upQuick(t, "--min-insync-replicas", "2"), []string{"--min-insync-replicas", "--replication-factor 1"}},
		{run("--session-timeout", "0"), []string{"--session-timeout", "positive duration"}},
		{run("--session-timeout", "abc"), []string{`--session-timeout "abc"`, "positive duration"}},
		{upQuick(t, "--session-timeout", "-5s"), []string{"--session-timeout", "positive duration"}},
		{run("--start-offset", "newest"), []string{`--start-offset: start offset "newest"`, "earliest, latest or an RFC 3339 time"}},
		{upQuick(t, "--start-offset", "2026-05-01"), []string{"--start-offset", "RFC 3339 time such as 2026-05-01T12:00:00Z"}},
		{run("--start-offset", "1960-01-01T00:00:00Z"), []string{"--start-offset", "before 1970"}},
		{run("--member-id", ""), []string{"--member-id", "empty"}},
		{upQuick(t, "--member-id", " "), []string{"--member-id", "empty"}},
		{run("--transaction-timeout", "-1s"), []string{"--transaction-timeout", "1s or more"}},
		{run("--transaction-timeout", "10ms"), []string{"--transaction-timeout", "1s or more"}},
		{run("--schema-version", "orderCreated"), []string{"--schema-version", "topic=version"}},
		{run("--schema-version", "orders=1"), []string{"--schema-version", `"orders" has no schema`, "orderCreated"}},
		{run("--schema-version", "orderCreated=9"), []string{"--schema-version", "released one, 1 to"}},
		{upQuick(t, "--schema-version", "orderCreated=1,orderCreated=2"), []string{"--schema-version", "twice"}},
	})
	// A bad value from the environment names the variable and the flag.
	t.Setenv("ORDERCAST_SESSION_TIMEOUT", "soon")
	checkFlagErrors(t, []flagCase{{run(), []string{"ORDERCAST_SESSION_TIMEOUT", `"soon"`, "--session-timeout"}}})
}

// A --db (or ORDERCAST_DB) that is neither sqlite:PATH nor a postgres URL is
// refused before anything starts, instead of becoming an SQLite file of
// that name in the working directory.
func TestDBFlag(t *testing.T) {
	t.Chdir(t.TempDir())
	run := []string{"run", "payments", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1"}
	forms := []string{"sqlite:PATH", "postgres://", "postgresql://"}
	checkFlagErrors(t, []flagCase{
		{append(run, "--db", "garbage"), append([]string{`--db "garbage"`}, forms...)},
		{append(run, "--db", "mysql://x"), append([]string{`--db "mysql://x"`}, forms...)},
		{append(run, "--db", "sqlite:"), []string{"--db", "needs a path"}},
		{upQuick(t, "--db", "ordercast.db"), append([]string{`--db "ordercast.db"`}, forms...)},
	})
	t.Setenv("ORDERCAST_DB", "garbage")
	checkFlagErrors(t, []flagCase{{run, append([]string{`ORDERCAST_DB (--db) "garbage"`}, forms...)}})
	if ents, _ := os.ReadDir("."); len(ents) > 0 {
		t.Errorf("files created in the working directory: %v", ents)
	}
}

// --start-offset fills system.Config.Consumers.StartOffset: earliest by default.
func TestStartOffsetFlag(t *testing.T) {
	parse := func(args ...string) processor.Start {
		t.Helper()
		var c common
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		c.register(cmd, false)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := c.config()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return cfg.Consumers.StartOffset
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args []string
		want processor.Start
	}{
		{nil, processor.Earliest},
		{[]string{"--start-offset", "earliest"}, processor.Earliest},
		{[]string{"--start-offset", "latest"}, processor.Latest},
		{[]string{"--start-offset", "2026-05-01T14:00:00+02:00"}, processor.AtTime(at)},
	} {
		if got := parse(tc.args...); got.String() != tc.want.String() {
			t.Errorf("%v: start offset %v, want %v", tc.args, got, tc.want)
		}
	}
}

// --member-id and --session-timeout fill system.Config; each flag wins over
// its environment variable, which is the default.
func TestMemberIDAndSessionTimeout(t *testing.T) {
	parse := func(args ...string) (string, time.Duration) {
		t.Helper()
		var c common
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		c.register(cmd, false)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := c.config()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return cfg.Consumers.MemberID, cfg.Consumers.SessionTimeout
	}
	if id, st := parse(); id != "" || st != 0 {
		t.Errorf("no flag, no env: member id %q, session timeout %v; want the system's defaults", id, st)
	}
	if id, st := parse("--member-id", "f1", "--session-timeout", "10s"); id != "f1" || st != 10*time.Second {
		t.Errorf("flags: %q, %v", id, st)
	}
	t.Setenv("ORDERCAST_MEMBER_ID", "env-id")
	t.Setenv("ORDERCAST_SESSION_TIMEOUT", "7s")
	if id, st := parse(); id != "env-id" || st != 7*time.Second {
		t.Errorf("env only: %q, %v", id, st)
	}
	if id, st := parse("--member-id", "f2", "--session-timeout", "1m"); id != "f2" || st != time.Minute {
		t.Errorf("flags over env: %q, %v", id, st)
	}
	out, _ := ordercast(t, "run", "--help")
	for _, want := range []string{"--member-id", "--session-timeout", "ORDERCAST_MEMBER_ID", "ORDERCAST_SESSION_TIMEOUT", "session.timeout.ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
}

// --transaction-timeout and --schema-version fill system.Config.
func TestTransactionTimeoutAndSchemaVersionFlags(t *testing.T) {
	var c common
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	c.register(cmd, false)
	if err := cmd.ParseFlags([]string{"--transaction-timeout", "15s", "--schema-version", "orderCreated=1, paymentProcessed=v1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consumers.TransactionTimeout != 15*time.Second {
		t.Errorf("TransactionTimeout = %v, want 15s", cfg.Consumers.TransactionTimeout)
	}
	if want := map[string]int{"orderCreated": 1, "paymentProcessed": 1}; !maps.Equal(cfg.Schema.WriterVersions, want) || cfg.Schema.Versions != nil {
		t.Errorf("WriterSchemaVersions = %v, SchemaVersions = %v; want %v and nil", cfg.Schema.WriterVersions, cfg.Schema.Versions, want)
	}
}

// A real conflict on --http still says the address is in use.
func TestUpHTTPInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded stack")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	args := upQuick(t, "--http", ln.Addr().String(), "--seed-data", oneDay)
	_, err = ordercast(t, args...)
	if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "--http") {
		t.Errorf("up --http on a busy port: %v", err)
	}
}

// Flags of up that only mean something with another are refused without
// it, and values that mean nothing are refused before anything starts.
func TestUpFlags(t *testing.T) {
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--report", "r.json"), []string{"--report", "--exit-when-done"}},
		{upQuick(t, "--replay", oneDay, "--report", "r.json"), []string{"--report", "--exit-when-done"}},
		{upQuick(t, "--timeout", "5m"), []string{"--timeout", "--exit-when-done"}},
		{upQuick(t, "--exit-when-done"), []string{"--exit-when-done", "--replay"}},
		{upQuick(t, "--rate", "5"), []string{"--rate", "--replay"}},
		{upQuick(t, "--replay-concurrency", "4"), []string{"--replay-concurrency", "--replay"}},
		{upQuick(t, "--replay", oneDay, "--replay-concurrency", "0"), []string{"--replay-concurrency", ">= 1"}},
		{upQuick(t, "--replay", oneDay, "--rate", "-1"), []string{"--rate", ">= 0"}},
		{upQuick(t, "--replay", oneDay, "--exit-when-done", "--timeout", "0"), []string{"--timeout", "positive"}},
		{upQuick(t, "--replay", oneDay, "--exit-when-done", "--report", ""), []string{"--report", "file"}},
		{upQuick(t, "--replay", "/nonexistent/orders.csv"), []string{"--replay", "/nonexistent/orders.csv"}},
		{upQuick(t, "--max-batch", "-1"), []string{"--max-batch", ">= 0"}},
		{upQuick(t, "--db-conns", "-1"), []string{"--db-conns", ">= 0"}},
		{upQuick(t, "--checkout-db-conns", "-1"), []string{"--checkout-db-conns", ">= 0"}},
		{upQuick(t, "--checkout-max-batch", "-2"), []string{"--checkout-max-batch", "want 0 to 4096"}},
		{upQuick(t, "--checkout-max-batch", "5000"), []string{"--checkout-max-batch 5000", "want 0 to 4096"}},
		{upQuick(t, "--fetch-min-bytes", "0"), []string{"--fetch-min-bytes", "from 1"}},
		{upQuick(t, "--fetch-max-wait", "0s"), []string{"--fetch-max-wait", "from 10ms to 10s"}},
		{upQuick(t, "--fetch-max-wait", "9ms"), []string{"--fetch-max-wait", "from 10ms to 10s"}}, // franz-go's minimum
		{upQuick(t, "--fetch-max-wait", "10500us"), []string{"--fetch-max-wait", "whole milliseconds"}},
		{upQuick(t, "--fetch-max-wait", "1m"), []string{"--fetch-max-wait", "from 10ms to 10s"}},
		{upQuick(t, "--fetch-max-wait", "100"), []string{"--fetch-max-wait", "100"}},
	})
}

// TestNumericFlagRanges: an out-of-range value of a numeric or duration
// flag of up or run (0, negative, Inf, NaN, absurdly large) is refused
// with an error naming the flag and the range it takes, not a message of
// the package it would reach.
func TestNumericFlagRanges(t *testing.T) {
	run := func(extra ...string) []string {
		return append([]string{"run", "payments", "fulfillment", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}, extra...)
	}
	rateLimit := []string{"--rate-limit", "from 0 to 1e+06"}
	session := []string{"--session-timeout", "from 100ms", "30m"}
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--rate-limit", "Inf"), rateLimit},
		{upQuick(t, "--rate-limit", "NaN"), rateLimit},
		{run("--rate-limit", "-1"), rateLimit},
		{run("--rate-limit", "1e300"), rateLimit},
		{run("--rate-burst", "-1"), []string{"--rate-burst", ">= 0"}},
		{run("--db-conns", "8"), []string{"--db-conns applies only to PostgreSQL", "SQLite"}},
		{upQuick(t, "--checkout-db-conns", "4"), []string{"--checkout-db-conns applies only to PostgreSQL", "SQLite"}},
		{upQuick(t, "--session-timeout", "1ms"), session},
		{run("--session-timeout", "99ms"), session},
		{run("--session-timeout", "31m"), []string{"--session-timeout", "at most 30m"}},
		{run("--transaction-timeout", "1000h"), []string{"--transaction-timeout", "transaction.max.timeout.ms", "596h"}},
		{upQuick(t, "--concurrency", "0"), []string{"--concurrency", "from 1 to 4096"}},
		{run("--concurrency", "1000000000"), []string{"--concurrency", "from 1 to 4096"}},
		{upQuick(t, "--partitions", "0"), []string{"--partitions", "from 1 to 10000"}},
		{run("--partitions", "2147483647"), []string{"--partitions", "from 1 to 10000"}},
		{upQuick(t, "--replication-factor", "0"), []string{"--replication-factor", ">= 1"}},
		{upQuick(t, "--replication-factor", "3"), []string{"--replication-factor 3", "embedded broker is one broker"}},
		{run("--max-attempts", "0"), []string{"--max-attempts", ">= 1"}},
		{run("--fetch-min-bytes", "3000000000"), []string{"--fetch-min-bytes", "from 1"}},
		{run("--auth-clock-skew", "-1s"), []string{"--auth-clock-skew", "from 0s"}},
		{run("--auth-clock-skew", "1000h"), []string{"--auth-clock-skew", "from 0s"}},
		{run("--opening-credit", "-1"), []string{"--opening-credit", "non-negative"}},
		{run("--retry-delays", "1s,0s"), []string{"--retry-delays", "positive duration"}},
		{upQuick(t, "--retry-delays", "1s,1000h"), []string{"--retry-delays", "under 168h0m0s", "retention"}},
		{upQuick(t, "--replay", oneDay, "--rate", "Inf"), []string{"--rate", ">= 0"}},
		{upQuick(t, "--replay", oneDay, "--rate", "NaN"), []string{"--rate", ">= 0"}},
		{upQuick(t, "--replay", oneDay, "--replay-concurrency", "-1"), []string{"--replay-concurrency", ">= 1"}},
		{upQuick(t, "--replay", oneDay, "--max-row-errors", "Inf"), []string{"--max-row-errors", "from 0 to 1"}},
		{upQuick(t, "--replay", oneDay, "--max-row-errors", "2"), []string{"--max-row-errors", "from 0 to 1"}},
		{upQuick(t, "--replay", oneDay, "--exit-when-done", "--timeout", "-1s"), []string{"--timeout", "positive"}},
	})
}

func TestOtherFlags(t *testing.T) {
	b := "--brokers=127.0.0.1:1"
	run := []string{"run", "payments", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}
	chaos := func(extra ...string) []string {
		return append([]string{"chaos", "--data-dir", t.TempDir(), "--binary", "/nonexistent/ordercast", "--seed-data", "/nonexistent/seed.csv", "--workload", ""}, extra...)
	}
	checkFlagErrors(t, []flagCase{
		{append(run, "--instances", "orders=2"), []string{"--instances", "orders", "payments"}},
		{append(slices.Replace(slices.Clone(run), 1, 2, "orders"), "--seed-data", oneDay), []string{"--seed-data applies only to checkout and payments", "it runs orders"}},
		{append(run, "--rate-limit", "5"), []string{"--rate-limit applies only to checkout", "it runs payments"}},
		{append(run, "--auth-required"), []string{"--auth-required applies only to checkout"}},
		{append(run, "--checkout-max-batch", "8"), []string{"--checkout-max-batch applies only to checkout"}},
		{append(slices.Replace(slices.Clone(run), 1, 2, "notifications", "fulfillment"), "--opening-credit", "10"), []string{"--opening-credit applies only", "notifications, fulfillment"}},
		{append(slices.Replace(slices.Clone(run), 1, 2, "checkout"), "--fetch-min-bytes", "1"), []string{"--fetch-min-bytes", "consumer services", "checkout"}},
		{append(slices.Replace(slices.Clone(run), 1, 2, "checkout"), "--fetch-max-wait", "50ms"), []string{"--fetch-max-wait", "consumer services"}},
		{append(run, "--sasl-user", "u"), []string{"--sasl-user", "--sasl-mechanism"}},
		{append(run, "--kafka-tls-key", "k.pem"), []string{"--kafka-tls-cert", "--kafka-tls-key"}},
		{append(run, "--kafka-tls-insecure-skip-verify"), []string{"--kafka-tls-insecure-skip-verify", "--kafka-tls"}},
		{append(run, "--registry-tls-ca", "ca.pem"), []string{"--registry-tls-ca", "https"}},
		{[]string{"groups", b, "--sasl-password", "p"}, []string{"--sasl-password", "--sasl-mechanism"}},
		{[]string{"topics", "create", "x", "--retry-delays", "1s", b}, []string{"--retry-delays", "--system"}},
		{[]string{"devstack", "--data-dir", t.TempDir(), "--broker-addr", "nonsense"}, []string{"--broker-addr", "not a host:port"}},
		{[]string{"devstack", "--data-dir", t.TempDir(), "--registry-addr", "8081"}, []string{"--registry-addr", "not a host:port"}},
		{[]string{"devstack", "--data-dir", t.TempDir(), "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0", "--save-every", "-1s"}, []string{"--save-every", ">= 0"}},
		{chaos("--instances", "0"), []string{"--instances", "1 to 4"}},
		{chaos("--checkouts", "0"), []string{"--checkouts", ">= 1"}},
		{chaos("--rate", "Inf"), []string{"--rate +Inf", "orders per second"}},
		{chaos("--rate", "NaN"), []string{"--rate NaN", "orders per second"}},
		{chaos("--duration", "0"), []string{"--duration", "positive"}},
		{chaos("--fault-every", "-1s"), []string{"--fault-every", "positive"}},
		{chaos("--session-timeout", "0"), []string{"--session-timeout", "positive"}},
		{chaos("--drain-timeout", "0"), []string{"--drain-timeout", "positive"}},
		{chaos("--check-every", "0"), []string{"--check-every", "negative"}},
		{chaos("--rate", "NaN"), []string{"--rate", "number"}},
		{chaos("--crash-rates", "crash-after-nothing=0.5"), []string{"--crash-rates", "crash-after-nothing", "crash-after-effect"}},
		{chaos("--opening-credit", "lots"), []string{"--opening-credit", "GBP"}},
		{chaos("--kafka-script", "scripts/kafka.sh"), []string{"--kafka-script", "--postgres-script", "--db", "together"}},
		{chaos("--proxy"), []string{"--proxy", "real cluster"}},
		{chaos("--seeds", "3"), []string{"--seeds", "--table"}},
		{chaos("--faults", "net-reset"), []string{"net-reset", "embedded"}},
	})
	t.Setenv("KAFKA_TLS", "yes")
	checkFlagErrors(t, []flagCase{{[]string{"groups", b}, []string{"KAFKA_TLS", `"yes"`, "true or false"}}})
}

// No flag usage has a backquote: pflag's UnquoteUsage takes a backquoted
// word for the value's name, so --help printed "--brokers ordercast up".
func TestFlagUsagesWithoutBackquotes(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage has a backquote: %s", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}

// run names every missing required flag in one error, not one per attempt.
func TestRunNamesAllMissingFlags(t *testing.T) {
	for _, env := range []string{"KAFKA_BROKERS", "SCHEMA_REGISTRY_URL", "ORDERCAST_DB"} {
		t.Setenv(env, "")
	}
	checkFlagErrors(t, []flagCase{
		{[]string{"run", "orders", "--brokers", "", "--registry", ""}, []string{"required flags missing", "--brokers (or KAFKA_BROKERS)", "--registry (or SCHEMA_REGISTRY_URL)", "--db (or ORDERCAST_DB)"}},
		// Like the operator commands, run defaults to the embedded stack
		// of `ordercast up`: only the database is left to name.
		{[]string{"run", "orders"}, []string{"--db (or ORDERCAST_DB) is required"}},
		{[]string{"run", "orders", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1"}, []string{"--db (or ORDERCAST_DB) is required", "sqlite:PATH"}},
	})
}

// TestRunDefaultsAgreeWithOperatorCommands: run, topics, groups, dlq and
// load all default --brokers (and --registry where they have one) to the
// embedded stack of `ordercast up`.
func TestRunDefaultsAgreeWithOperatorCommands(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("SCHEMA_REGISTRY_URL", "")
	root := newRoot()
	for _, path := range [][]string{{"run"}, {"topics", "list"}, {"groups"}, {"dlq", "list"}, {"dlq", "show"}, {"load"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		lookup := func(name string) *pflag.Flag {
			if fl := cmd.Flags().Lookup(name); fl != nil {
				return fl
			}
			if fl := cmd.PersistentFlags().Lookup(name); fl != nil {
				return fl
			}
			return cmd.InheritedFlags().Lookup(name)
		}
		if fl := lookup("brokers"); fl == nil || fl.DefValue != defaultBrokers {
			t.Errorf("%v --brokers default %v, want %s", path, fl, defaultBrokers)
		}
		if fl := lookup("registry"); fl != nil && fl.DefValue != defaultRegistry {
			t.Errorf("%v --registry default %q, want %s", path, fl.DefValue, defaultRegistry)
		}
	}
	if fl, _, _ := root.Find([]string{"run"}); fl.Flags().Lookup("registry").DefValue != defaultRegistry {
		t.Errorf("run --registry default %q", fl.Flags().Lookup("registry").DefValue)
	}
}

// TestNumericFlagErrors: every numeric, duration and boolean flag of every
// command names itself and what it expects on a value of the wrong type,
// not pflag's strconv error.
func TestNumericFlagErrors(t *testing.T) {
	n := 0
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		fs := pflag.NewFlagSet("", pflag.ContinueOnError)
		fs.AddFlagSet(cmd.Flags())
		fs.AddFlagSet(cmd.PersistentFlags())
		fs.VisitAll(func(fl *pflag.Flag) {
			switch fl.Value.Type() {
			case "int", "int16", "int32", "int64", "uint", "float64", "duration", "bool":
			default:
				return
			}
			n++
			args := append(strings.Fields(cmd.CommandPath())[1:], "--"+fl.Name+"=abc")
			_, err := ordercast(t, args...)
			if err == nil {
				t.Errorf("ordercast %q: no error", args)
				return
			}
			want := "--" + fl.Name + ` "abc": want `
			if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "strconv") || strings.Contains(err.Error(), "time:") {
				t.Errorf("ordercast %q: error %q, want it to start %q and name what is expected", args, err, want)
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if n < 30 {
		t.Errorf("only %d typed flags checked", n)
	}
}

func TestVersion(t *testing.T) {
	out := mustRun(t, "version")
	for _, w := range []string{"ordercast ", "commit ", "go go1."} {
		if !strings.Contains(out, w) {
			t.Errorf("version output lacks %q:\n%s", w, out)
		}
	}
}

// TestReplayThatSendsNothingFails: a file with only a header, or whose rows
// are malformed, fails `replay` and `up --replay` before anything is sent
// or started, naming why; with --exit-when-done the report says failed.
func TestReplayThatSendsNothingFails(t *testing.T) {
	dir := t.TempDir()
	const header = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
	hdr := filepath.Join(dir, "header.csv")
	bad := filepath.Join(dir, "malformed.csv")
	if err := os.WriteFile(hdr, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(header+strings.Repeat("536366,22633,HAND WARMER,six,2010-12-01 08:28:00,1.85,17850,United Kingdom\n", 12)), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "http://" + closedAddr(t) // never reached: nothing is sent
	checkFlagErrors(t, []flagCase{
		{[]string{"replay", hdr, "--url", url}, []string{"no order to send", "nothing was sent"}},
		{[]string{"replay", bad, "--url", url}, []string{"12 of 12 data rows are malformed", "--max-row-errors"}},
		{[]string{"replay", bad, "--url", url, "--max-row-errors", "-1"}, []string{"--max-row-errors -1", "fraction"}},
		{[]string{"up", "--replay", bad, "--data-dir", filepath.Join(dir, "data")}, []string{"12 of 12 data rows are malformed"}},
	})
	report := filepath.Join(dir, "report.json")
	data := filepath.Join(dir, "data")
	_, err := ordercast(t, "up", "--replay", hdr, "--exit-when-done", "--report", report, "--data-dir", data)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(ee.msg, "no order to send") {
		t.Fatalf("up --replay header-only: %v, want exit 1 naming why", err)
	}
	r := readReport(t, report)
	if r.Status != StatusFailed || !strings.Contains(r.Reason, "no order to send") {
		t.Errorf("report: status %q, reason %q", r.Status, r.Reason)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("--data-dir %s was created (%v) by a run that failed on its arguments", data, err)
	}
}

// TestOutputFilesCheckedAtStart: --report (up) and --summary (replay) to a
// path that cannot be written fail at once, before anything runs.
func TestOutputFilesCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	nowhere := filepath.Join(dir, "no", "such", "dir", "out.json")
	url := "http://" + closedAddr(t)
	checkFlagErrors(t, []flagCase{
		{[]string{"up", "--replay", oneDay, "--exit-when-done", "--report", nowhere, "--data-dir", filepath.Join(dir, "data")}, []string{"--report " + nowhere, "cannot be written"}},
		{[]string{"replay", oneDay, "--url", url, "--summary", nowhere}, []string{"--summary " + nowhere, "cannot be written"}},
	})
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("--data-dir created before the arguments were checked: %v", err)
	}
	// A writable path is left as it was.
	ok := filepath.Join(dir, "ok.json")
	if err := checkWritable("report", ok); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ok); !os.IsNotExist(err) {
		t.Errorf("checkWritable left %s behind", ok)
	}
}

// TestUpOutsideRepository: from a directory without a checkout, a missing
// --seed-data is named at start and nothing is created; without the flag the
// embedded catalog is used (system.TestSeedWithoutFile).
func TestUpOutsideRepository(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if fl := newUp().Flags().Lookup("seed-data"); fl.DefValue != "" {
		t.Errorf("--seed-data defaults to %q, a path in the repository; want the embedded catalog", fl.DefValue)
	}
	checkFlagErrors(t, []flagCase{
		{[]string{"up", "--seed-data", "data/online-retail/online_retail.csv.gz"}, []string{"--seed-data data/online-retail/online_retail.csv.gz", "no such file", "embedded"}},
	})
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("up created %v before failing on its arguments", entries)
	}
}

// --notifications-mode takes group or share, on up and run, and only where
// notifications runs; a bad value names the flag and both values.
func TestNotificationsModeFlag(t *testing.T) {
	run := func(svc string, extra ...string) []string {
		return append([]string{"run", svc, "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}, extra...)
	}
	want := []string{`--notifications-mode "queue"`, "want group", "or share"}
	checkFlagErrors(t, []flagCase{
		{upQuick(t, "--notifications-mode", "queue"), want},
		{run("notifications", "--notifications-mode", "queue"), want},
		{run("notifications", "--notifications-mode", ""), []string{`--notifications-mode ""`, "want group"}},
		{run("payments", "--notifications-mode", "share"), []string{"--notifications-mode applies only to notifications", "it runs payments"}},
		// --instances: each service once (the last of two would win silently).
		{upQuick(t, "--instances", "notifications=2,notifications=3"), []string{`--instances "notifications=2,notifications=3"`, "notifications is given twice"}},
	})
	out, _ := ordercast(t, "up", "--help")
	if !strings.Contains(out, "--notifications-mode") || !strings.Contains(out, "(default \"group\")") {
		t.Errorf("up --help does not show --notifications-mode with its default group:\n%s", out)
	}
}
