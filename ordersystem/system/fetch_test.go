package system

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
)

// TestConsumersFetchSettings: every consumer group member's client fetches
// with Config.Consumers.FetchMinBytes and FetchMaxWait (fetch.min.bytes,
// fetch.max.wait.ms), DefaultFetchMinBytes and DefaultFetchMaxWait when
// they are zero; values out of range are refused by Start before anything
// runs.
func TestConsumersFetchSettings(t *testing.T) {
	brokers := testkafka.Cluster(t, nil)
	start := func(minBytes int32, maxWait time.Duration) (*System, error) {
		reg := srfake.New()
		t.Cleanup(reg.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return Start(ctx, Config{
			Services:  []string{ServiceOrders, ServiceNotifications},
			Kafka:     KafkaConfig{Brokers: brokers, Layout: ops.Layout{Partitions: 1, ReplicationFactor: testkafka.ReplicationFactor(t)}},
			Schema:    SchemaConfig{RegistryURL: reg.URL()},
			HTTP:      HTTPConfig{Addr: "127.0.0.1:0"},
			DB:        DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
			Consumers: ConsumerConfig{FetchMinBytes: minBytes, FetchMaxWait: maxWait},
		})
	}
	for _, c := range []struct {
		minBytes, wantMin int32
		maxWait, wantWait time.Duration
	}{
		{0, DefaultFetchMinBytes, 0, DefaultFetchMaxWait},
		{1, 1, MinFetchMaxWait, MinFetchMaxWait},
		{4096, 4096, 37 * time.Millisecond, 37 * time.Millisecond},
	} {
		s, err := start(c.minBytes, c.maxWait)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.procs) != 2 {
			t.Fatalf("%d group members, want 2 (orders, notifications)", len(s.procs))
		}
		for _, p := range s.procs {
			cl := p.Client()
			if got := cl.OptValue(kgo.FetchMinBytes); got != c.wantMin {
				t.Errorf("Config{FetchMinBytes: %d}: member fetches with fetch.min.bytes %v, want %d", c.minBytes, got, c.wantMin)
			}
			if got := cl.OptValue(kgo.FetchMaxWait); got != c.wantWait {
				t.Errorf("Config{FetchMaxWait: %v}: member fetches with fetch.max.wait %v, want %v", c.maxWait, got, c.wantWait)
			}
		}
		if err := s.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	for _, bad := range []struct {
		minBytes int32
		maxWait  time.Duration
	}{{-1, 0}, {0, -time.Millisecond}, {0, time.Microsecond}, {0, MinFetchMaxWait - time.Millisecond}, {0, MinFetchMaxWait + time.Microsecond}, {0, MaxFetchMaxWait + time.Millisecond}} {
		if s, err := start(bad.minBytes, bad.maxWait); err == nil {
			s.Stop(context.Background())
			t.Errorf("Config{FetchMinBytes: %d, FetchMaxWait: %v} started, want an error", bad.minBytes, bad.maxWait)
		}
	}
}
