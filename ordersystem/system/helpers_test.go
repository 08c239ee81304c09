package system_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// startOn starts a system on brokers with cfg, filling what cfg leaves
// unset: a fresh srfake registry, a SQLite database in a temp directory,
// the orders service, a free HTTP port and topics of 2 partitions with the
// cluster's replication factor. The registry is closed when the test ends;
// stopping the system is the caller's.
func startOn(t *testing.T, brokers []string, cfg system.Config) (*system.System, error) {
	t.Helper()
	cfg.Kafka.Brokers = brokers
	if cfg.Schema.RegistryURL == "" {
		reg := srfake.New()
		t.Cleanup(reg.Close)
		cfg.Schema.RegistryURL = reg.URL()
	}
	if cfg.DB.DSN == "" {
		cfg.DB.DSN = "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")
	}
	if len(cfg.Services) == 0 {
		cfg.Services = []string{system.ServiceOrders}
	}
	if cfg.HTTP.Addr == "" {
		cfg.HTTP.Addr = "127.0.0.1:0"
	}
	if cfg.Kafka.Layout.Partitions == 0 {
		cfg.Kafka.Layout = ops.Layout{Partitions: 2, ReplicationFactor: testkafka.ReplicationFactor(t)}
	}
	return system.Start(context.Background(), cfg)
}
