package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/devstack"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/system"
)

func TestLoadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate 0: want at least 0.001"},
		{[]string{"--rate", "-5"}, "--rate -5"},
		{[]string{"--duration", "0s"}, "--duration 0s: want a positive duration"},
		{[]string{"--rate", "0.5", "--duration", "1s"}, "less than one order"},
		{[]string{"--url", "localhost:8080"}, "--url \"localhost:8080\": want checkout's base URL"},
		{[]string{"--registry", "nope"}, "--registry \"nope\""},
		{[]string{"--db", "mysql://x"}, "--db \"mysql://x\": want sqlite:PATH or a postgres://"},
		{[]string{"--brokers", " "}, "--brokers"},
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--drain-timeout", "-1s"}, "--drain-timeout -1s"},
		{[]string{"--max-lines", "0"}, "--max-lines 0: want >= 1"},
		{[]string{"--min-balance", "-1"}, "--min-balance -1"},
		{[]string{"--rate", "fast"}, `--rate "fast": want a number`},
	} {
		root := newRoot()
		root.SetArgs(append([]string{"load"}, tc.args...))
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("load %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestLoadEmbedded runs `ordercast load` against the whole system in
// process on the embedded broker, registry and SQLite, and checks its
// report: every order sent was accepted, stored, paid and shipped once,
// every invariant holds, and each shipped order has an end-to-end latency.
func TestLoadEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	dir := t.TempDir()
	stack, err := devstack.Start(devstack.Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	ctx := context.Background()
	// checkout with --auth dev's verifier: the load signs its tokens with
	// the key of --data-dir.
	devKey, err := authn.LoadOrCreateDevKey(authn.DevKeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := devKey.Verifier(0)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := system.Start(ctx, system.Config{
		SeedFile:      "../../data/online-retail/online_retail_2010-12-01.csv",
		OpeningCredit: system.DefaultOpeningCredit,
		Kafka:         system.KafkaConfig{Brokers: stack.Brokers, Layout: ops.Layout{Partitions: 3, ReplicationFactor: 1}, TransactionalIDSuffix: "-loadtest"},
		Schema:        system.SchemaConfig{RegistryURL: stack.RegistryURL},
		DB:            system.DBConfig{DSN: stack.DSN},
		Checkout:      system.CheckoutConfig{Auth: verifier, AuthRequired: true},
		HTTP:          system.HTTPConfig{Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })

	report := filepath.Join(dir, "load.json")
	csvFile := filepath.Join(dir, "load.csv")
	root := newRoot()
	var stderr bytes.Buffer
	root.SetErr(&stderr)
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"load", "--url", "http://" + sys.HTTPAddr(), "--brokers", strings.Join(stack.Brokers, ","),
		"--registry", stack.RegistryURL, "--db", stack.DSN, "--rate", "40", "--duration", "3s",
		"--drain-timeout", "2m", "--report", report, "--csv", csvFile, "--seed", "7", "--data-dir", dir})
	start := time.Now()
	if err := root.Execute(); err != nil {
		t.Fatalf("load: %v (after %v)\n%s", err, time.Since(start), stderr.String())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep LoadReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	const orders = 120
	if rep.Status != "passed" || rep.OrdersSent != orders || rep.OrdersAccepted != orders || len(rep.ErrorsByStatus) != 0 {
		t.Errorf("status %q (%s), sent %d, accepted %d, errors %v; want passed, %d sent and accepted", rep.Status, rep.Reason, rep.OrdersSent, rep.OrdersAccepted, rep.ErrorsByStatus, orders)
	}
	if len(rep.Invariants) < 5 {
		t.Errorf("%d invariants in the report, want the audit's 5", len(rep.Invariants))
	}
	for name, inv := range rep.Invariants {
		if !inv.OK {
			t.Errorf("invariant %s violated: %s", name, inv.Detail)
		}
	}
	if rep.Shipped+rep.Refused != orders || rep.NotShipped != 0 || rep.EndToEnd.Count != int64(rep.Shipped) || rep.Shipped == 0 {
		t.Errorf("shipped %d, refused %d, neither %d, end-to-end values %d; want shipped+refused = %d, each shipped with a latency", rep.Shipped, rep.Refused, rep.NotShipped, rep.EndToEnd.Count, orders)
	}
	if rep.Checkout.Count != orders || rep.Checkout.P50 <= 0 || rep.Checkout.P99 < rep.Checkout.P50 || rep.EndToEnd.P99 < rep.EndToEnd.P50 {
		t.Errorf("checkout %+v, end-to-end %+v: want %d checkout values and ordered quantiles", rep.Checkout, rep.EndToEnd, orders)
	}
	if p := rep.Progress; p.Stored != p.Accepted || p.ShipmentsRecorded != p.Paid || p.Accepted != orders {
		t.Errorf("progress %+v: want %d accepted, all stored and the paid ones shipped", p, orders)
	}
	csvb, err := os.ReadFile(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csvb), "\n"); lines < 4 {
		t.Errorf("CSV has %d lines, want a header and a row per second of the 3 s run:\n%s", lines, csvb)
	}
	if !strings.Contains(stderr.String(), "load   1s: sent") {
		t.Errorf("no progress line on stderr:\n%s", stderr.String())
	}
}

// TestErrorCounts: the summary line names each error cause with its count,
// sorted, and says none when there is none (it printed Go's map syntax).
func TestErrorCounts(t *testing.T) {
	if got := errorCounts(nil); got != "none" {
		t.Errorf("errorCounts(nil) = %q, want none", got)
	}
	if got, want := errorCounts(map[string]int{"503": 3, "401 unauthorized": 20}), "401 unauthorized: 20, 503: 3"; got != want {
		t.Errorf("errorCounts = %q, want %q", got, want)
	}
}
