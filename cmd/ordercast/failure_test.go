package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// TestRunExitsWhenServiceFails: when a service stops with an error, run
// stops the rest and returns that error (main exits 1) instead of serving
// on as a zombie whose /healthz answers 200. The member is made to fail by
// a transactional id (its client id) longer than Kafka clients allow.
func TestRunExitsWhenServiceFails(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	orig := startSystem
	t.Cleanup(func() { startSystem = orig })
	startSystem = func(ctx context.Context, cfg system.Config) (*system.System, error) {
		cfg.Kafka.TransactionalIDSuffix = strings.Repeat("x", 300)
		return orig(ctx, cfg)
	}
	err := exitWithin(t, 60*time.Second, "run", "fulfillment", "--brokers", strings.Join(brokers, ","), "--registry", reg.URL(),
		"--db", "sqlite:"+filepath.Join(t.TempDir(), "x.db"), "--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0", "--partitions", "2", "--member-id", "f1")
	if err == nil || !strings.Contains(err.Error(), "service fulfillment stopped") || !strings.Contains(err.Error(), "client id length") {
		t.Fatalf("run returned %v; want the fulfillment member's error", err)
	}
}

// exitWithin runs the command and returns its error, failing the test if it
// is still running after d.
func exitWithin(t *testing.T, d time.Duration, args ...string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := ordercast(t, args...)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s still running %v after its service failed", args[0], d)
		return nil
	}
}

// TestRunExitsWhenBrokerRefusesMember: a broker whose
// group.max.session.timeout.ms is below --session-timeout refuses every join
// with INVALID_SESSION_TIMEOUT. run must exit 1 naming that error, not stay
// up holding no partition while franz-go retries the join forever.
func TestRunExitsWhenBrokerRefusesMember(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil, kfake.GroupMaxSessionTimeout(time.Minute))
	reg := srfake.New()
	t.Cleanup(reg.Close)
	err := exitWithin(t, 60*time.Second, "run", "orders", "--brokers", strings.Join(brokers, ","), "--registry", reg.URL(),
		"--db", "sqlite:"+filepath.Join(t.TempDir(), "x.db"), "--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0", "--partitions", "2", "--session-timeout", "2m")
	if err == nil || !strings.Contains(err.Error(), "service orders stopped") || !strings.Contains(err.Error(), "INVALID_SESSION_TIMEOUT") ||
		!strings.Contains(err.Error(), "--session-timeout, ORDERCAST_SESSION_TIMEOUT) is 2m0s") {
		t.Fatalf("run returned %v; want the orders member's INVALID_SESSION_TIMEOUT", err)
	}
}

// Flags out of range: each is refused at once, naming the flag,
// the limit and the Kafka setting behind it.
func TestReviewFlagLimits(t *testing.T) {
	run := func(svc string, extra ...string) []string {
		return append([]string{"run", svc, "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--db", "sqlite:" + t.TempDir() + "/x.db"}, extra...)
	}
	checkFlagErrors(t, []flagCase{
		{run("fulfillment", "--member-id", strings.Repeat("m", 300)), []string{"--member-id", "300 bytes", "at most 200"}},
		{upQuick(t, "--member-id", strings.Repeat("m", 201)), []string{"--member-id", "at most 200"}},
		{run("orders", "--session-timeout", "1h"), []string{"--session-timeout", "at most 30m", "group.max.session.timeout.ms"}},
		{run("orders", "--transaction-timeout", "15s"), []string{"--transaction-timeout", "fulfillment", "runs orders"}},
		{run("orders", "--db", "mysql://app:S3cretPW@h/x"), []string{"--db", "app:xxxxx@h"}},
	})
	out, err := ordercast(t, run("orders", "--db", "mysql://app:S3cretPW@h/x")...)
	if err == nil || strings.Contains(err.Error()+out, "S3cretPW") {
		t.Errorf("--db password shown: %v %s", err, out)
	}
}

// TestUpExitsWhenServiceFails: the same for up (without --replay).
func TestUpExitsWhenServiceFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded stack")
	}
	orig := startSystem
	t.Cleanup(func() { startSystem = orig })
	startSystem = func(ctx context.Context, cfg system.Config) (*system.System, error) {
		cfg.Kafka.TransactionalIDSuffix = strings.Repeat("x", 300)
		return orig(ctx, cfg)
	}
	err := exitWithin(t, 60*time.Second, upQuick(t, "--partitions", "2", "--seed-data", oneDay)...)
	if err == nil || !strings.Contains(err.Error(), "service fulfillment stopped") {
		t.Fatalf("up returned %v; want the fulfillment member's error", err)
	}
}
