package system_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkafka"
	"github.com/ordercast/ordercast/system"
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
	base := "http://" + sys.HTTPAddr()
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
