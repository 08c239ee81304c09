package system_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// lockedBuffer is a bytes.Buffer safe for the system's goroutines to log
// into while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExistingTopicsThatDifferAreWarned: a start whose layout asks for
// other partitions (or more replicas) than the existing topics have leaves
// them unchanged and logs a WARN naming the topics, what they have and
// what was asked; a start that asks what they have logs none.
func TestExistingTopicsThatDifferAreWarned(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")
	start := func(partitions int32) string {
		t.Helper()
		var logs lockedBuffer
		sys, err := startOn(t, brokers, system.Config{
			DB:     system.DBConfig{DSN: dsn},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Kafka:  system.KafkaConfig{Layout: ops.Layout{Partitions: partitions, ReplicationFactor: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sys.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		return logs.String()
	}
	if logs := start(2); strings.Contains(logs, "existing topics differ") {
		t.Fatalf("first start, topics created: %s", logs)
	}
	logs := start(4)
	for _, want := range []string{"level=WARN", "existing topics differ", "--partitions", "orderCreated", "2 partitions, not 4", "left unchanged"} {
		if !strings.Contains(logs, want) {
			t.Errorf("start with --partitions 4 on topics of 2: log lacks %q:\n%s", want, logs)
		}
	}
	if logs := start(2); strings.Contains(logs, "existing topics differ") {
		t.Errorf("start asking what the topics have: %s", logs)
	}
}
