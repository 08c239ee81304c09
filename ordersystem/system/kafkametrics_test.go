package system_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/system"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServiceEndpoints: a service process serves /metrics with the Go
// runtime's metrics, the runtime's consumer metrics, the franz-go client
// metrics (kprom, per client; requests by API) and the lag of its group as the broker sees
// it; /healthz answers and /readyz turns ready once the member joined.
func TestServiceEndpoints(t *testing.T) {
	brokers := testkafka.Cluster(t, nil)
	sys, err := startOn(t, brokers, system.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	base := "http://" + sys.AdminAddr()
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	want := []string{
		"go_goroutines ",
		"process_",
		`ordercast_group_lag_total{group="orders"} 0`,
		`ordercast_group_members{group="orders"} 1`,
		`ordercast_kafka_buffered_fetch_records_total{client_id="orders-1-`,
		`ordercast_kafka_buffered_produce_records_total{client_id="ordercast-producer"}`,
		`ordercast_kafka_connects_total{client_id="orders-1-`,
		// our own request counter, per client and API
		`ordercast_kafka_requests_total{client_id="orders-1-`,
		`,request="Heartbeat"}`,
		`,request="JoinGroup"}`,
		// request latency histograms, per client and broker
		`ordercast_kafka_request_duration_e2e_seconds_bucket{client_id="orders-1-`,
		`ordercast_kafka_write_wait_seconds_bucket{client_id="orders-1-`,
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, base+"/metrics")
		var missing []string
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		if code == http.StatusOK && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics (%d) lacks %q", code, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelayClientMetrics: the outbox relay's clients, which it creates
// itself (a transactional producer per session), are counted like the
// others: ordercast_kafka_* and the requests by API under the client id
// ordercast-relay-<role>. Without the relay's per-client options they were
// missing from /metrics, and with them the broker's transactional load.
func TestRelayClientMetrics(t *testing.T) {
	brokers := testkafka.Cluster(t, nil)
	sys, err := startOn(t, brokers, system.Config{Services: []string{system.ServicePayments}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	base := "http://" + sys.AdminAddr()
	want := []string{
		`ordercast_kafka_requests_total{client_id="` + system.RelayClientIDPrefix + `producer",request="InitProducerID"}`,
		`ordercast_kafka_connects_total{client_id="` + system.RelayClientIDPrefix + `producer"`,
	}
	testkafka.WaitFor(t, 15*time.Second, "the relay's clients on /metrics", func() bool {
		_, body := get(t, base+"/metrics")
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
}
