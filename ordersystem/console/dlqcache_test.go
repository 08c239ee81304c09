package console_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/ordersystem/ops"
)

// TestDLQClientPerGroup: the overview, DLQ and record pages, asked many
// times and concurrently, share one ops.DLQ (one Kafka client) per group
// for the console's lifetime; after Close a page fails instead of opening
// a new one.
func TestDLQClientPerGroup(t *testing.T) {
	brokers := testkafka.Cluster(t, map[string]int32{"orders.dlq": 1, "payments.dlq": 1, "orderCreated": 1})
	testkafka.Produce(t, brokers, hostile())
	c, err := console.New(console.Config{Kafka: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Groups: []string{"orders", "payments"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	made := map[string]int{}
	var closed atomic.Bool
	c.SetNewDLQ(func(group string, opts ...kgo.Opt) (*ops.DLQ, error) {
		if closed.Load() {
			t.Errorf("a DLQ of %s made after Close", group)
		}
		mu.Lock()
		made[group]++
		mu.Unlock()
		return ops.NewDLQ(group, opts...)
	})
	srv := httptest.NewServer(c)
	defer srv.Close()
	pages := []string{"/console/", "/console/dlq/orders", "/console/dlq/orders/0/0", "/console/dlq/payments"}
	var wg sync.WaitGroup
	for range 3 {
		for _, p := range pages {
			wg.Go(func() {
				resp, err := http.Get(srv.URL + p)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %d", p, resp.StatusCode)
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	if made["orders"] != 1 || made["payments"] != 1 || len(made) != 2 {
		t.Errorf("DLQs made per group after %d requests: %v; want one per group", 3*len(pages), made)
	}
	mu.Unlock()

	c.Close()
	closed.Store(true)
	if code, _, _ := get(t, http.DefaultClient, srv.URL+"/console/dlq/orders"); code == http.StatusOK {
		t.Errorf("the DLQ page after Close: %d, want an error", code)
	}
}
