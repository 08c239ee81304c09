package system_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

func startFulfillment(t *testing.T, brokers []string, cfg system.Config) (*system.System, error) {
	t.Helper()
	cfg.Services = []string{system.ServiceFulfillment}
	cfg.Kafka.Layout = ops.Layout{Partitions: 2, ReplicationFactor: 1}
	cfg.Consumers.MemberID = "f1"
	return startOn(t, brokers, cfg)
}

// TestWaitReportsFailedService: a member that stops with an error (here its
// client id is too long for franz-go: 300 bytes of transactional id suffix)
// ends Wait with that error naming the service, and Failed is closed; a
// process then exits instead of serving /healthz as a zombie.
func TestWaitReportsFailedService(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	sys, err := startFulfillment(t, brokers, system.Config{
		Kafka: system.KafkaConfig{TransactionalIDSuffix: strings.Repeat("x", 300)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = sys.Wait(ctx)
	if err == nil {
		t.Fatal("Wait returned nil: the failed member was not reported")
	}
	for _, want := range []string{"service fulfillment stopped", "client id length"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Wait: %q lacks %q", err, want)
		}
	}
	select {
	case <-sys.Failed():
	default:
		t.Error("Failed not closed")
	}
	if sys.Err() == nil {
		t.Error("Err nil after a failure")
	}
}

// TestWaitWithoutFailure: Wait returns nil when its context ends and no
// service failed.
func TestWaitWithoutFailure(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	sys, err := startFulfillment(t, brokers, system.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := sys.Wait(ctx); err != nil {
		t.Errorf("Wait: %v", err)
	}
	if err := sys.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestTransactionTimeoutAboveBrokerMax: a transaction timeout the broker
// refuses (transaction.max.timeout.ms) is a start error naming the flag
// and the broker setting, instead of a member failing at every join.
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	testkafka.SkipIfReal(t, "sets the embedded broker's transaction.max.timeout.ms")
	_, brokers := testkafka.Fake(t, nil, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "10000"}))
	sys, err := startFulfillment(t, brokers, system.Config{
		Consumers: system.ConsumerConfig{TransactionTimeout: 20 * time.Second},
	})
	if err == nil {
		_ = sys.Stop(context.Background())
		t.Fatal("Start accepted a transaction timeout above the broker's maximum")
	}
	for _, want := range []string{"--transaction-timeout", "transaction.max.timeout.ms", "20s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start: %q lacks %q", err, want)
		}
	}
	// Within the maximum it starts.
	sys, err = startFulfillment(t, brokers, system.Config{
		Consumers: system.ConsumerConfig{TransactionTimeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sys.Stop(context.Background())
}

// TestDSNPasswordRedacted: the password of a postgres --db never appears
// in Start's error.
func TestDSNPasswordRedacted(t *testing.T) {
	_, err := system.Start(context.Background(), system.Config{
		DB:   system.DBConfig{DSN: "postgres://app:S3cretPW@127.0.0.1:1/x?connect_timeout=1"},
		HTTP: system.HTTPConfig{Addr: "127.0.0.1:0"},
	})
	if err == nil {
		t.Fatal("Start succeeded without a database")
	}
	if strings.Contains(err.Error(), "S3cretPW") {
		t.Errorf("password in error: %v", err)
	}
	if !strings.Contains(err.Error(), "app:xxxxx@127.0.0.1:1") {
		t.Errorf("error %q does not show the redacted DSN", err)
	}
	for in, want := range map[string]string{
		"postgres://app:S3cretPW@h/x": "postgres://app:xxxxx@h/x",
		"postgres://app:p%zz@w@h/x":   "postgres://xxxxx@h/x",
		"sqlite:/tmp/x.db":            "sqlite:/tmp/x.db",
		"postgresql://app@h/x":        "postgresql://app@h/x",
	} {
		if got := system.RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMemberIDTooLong: Start refuses a member id longer than MaxMemberIDLen.
func TestMemberIDTooLong(t *testing.T) {
	_, err := system.Start(context.Background(), system.Config{
		Consumers: system.ConsumerConfig{MemberID: strings.Repeat("m", system.MaxMemberIDLen+1)},
	})
	if err == nil || !strings.Contains(err.Error(), "--member-id") {
		t.Fatalf("Start: %v; want an error naming --member-id", err)
	}
}
